// Where a click log's samples come from, in the order of the global sample
// stream: Criteo TSV files (plain or gzip) or TorchRec's preprocessed NumPy
// layout. A source hands out windows of consecutive samples; the reader
// (click_log_reader.cc) shuffles a window, keeps this rank's samples and
// decodes only those. Every rank reads every window (the page cache holds a
// host's files once), so the stream, and so a run's sample sequence, does
// not depend on the world size. Internal to core/src/data.
#pragma once

#include <cstdint>
#include <filesystem>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/core/data/criteo_line.h"

namespace shardrec::data {

// One decoded sample before the transforms that need the tables.
struct RawSample {
  float label = 0;
  std::array<float, kCriteoDense> dense{};     // transformed (log) already
  std::array<uint64_t, kCriteoSparse> sparse{};  // row = sparse mod num_embeddings (see signed_ids)
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  // Rewinds to the stream's first sample (a new epoch).
  virtual Status Rewind() = 0;
  // Skips `count` samples (resuming at a position); fewer left is an error.
  virtual Status Skip(int64_t count) = 0;
  // Reads up to `count` next samples into the window; returns how many (0
  // at the end of the stream).
  virtual StatusOr<int64_t> ReadWindow(int64_t count) = 0;
  // Sample i of the last window. An error names the file and line (or row).
  virtual Status Decode(int64_t i, RawSample* out) const = 0;
  // "day_0.tsv.gz" etc., for messages.
  virtual std::string Describe() const = 0;
  // Bytes read from the files so far (decompressed text for TSV).
  virtual int64_t bytes_read() const = 0;
  // True when RawSample::sparse holds signed values (two's complement):
  // their row is the floor modulo, as numpy's % gives it to TorchRec.
  virtual bool signed_ids() const { return false; }
};

// TSV files in this order (gzip when a file starts with gzip's magic).
StatusOr<std::unique_ptr<SampleSource>> OpenTsvSource(std::vector<std::filesystem::path> files);
// day_N_{dense,sparse,labels}.npy for every day N of `dir`, in day order.
StatusOr<std::unique_ptr<SampleSource>> OpenNpySource(const std::filesystem::path& dir);
// Samples in the files (lines, counting a last one without '\n'), or in the days.
StatusOr<int64_t> CountTsvSamples(const std::vector<std::filesystem::path>& files);
StatusOr<int64_t> CountNpySamples(const std::filesystem::path& dir);

}  // namespace shardrec::data
