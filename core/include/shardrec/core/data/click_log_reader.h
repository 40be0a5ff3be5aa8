// Click logs in, batches out: Criteo TSV files (plain or gzip) or
// TorchRec's preprocessed NumPy layout, streamed as one global sample
// sequence that every rank sees the same way, whatever the world size.
//
//   global batch k of an epoch = samples [k G, (k + 1) G), G = world x batch
//   rank r's batch            = its samples [r batch, (r + 1) batch)
//
// With a shuffle buffer of S samples the stream is cut into windows of S
// (rounded up to whole global batches), each shuffled by (seed, epoch,
// window); an epoch ends with the last whole global batch (a tail shorter
// than G is dropped, as TorchRec's loaders drop it). Every rank reads every
// window (one host's page cache holds the files once) and parses only its
// own samples, with oneTBB; a thread prepares the next batches while the
// current one trains.
//
// Transforms, as TorchRec applies them: TSV dense values log(1 + max(x, 0));
// the NumPy layout's dense values as stored (TorchRec's preprocessing
// wrote log(x + 3)); categorical column j is feature j of the tables, its
// row the value modulo the feature's num_embeddings (the NumPy layout's
// signed int32 values by floor modulo, as numpy's % computes it). One id
// per feature per sample; missing values are 0.
//
// A malformed line is an error naming the file and line; with
// skip_bad_lines it is skipped instead (the rank's batch is one smaller)
// and counted.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shardrec/core/data/criteo_line.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec::data {

struct ClickBatch {
  Tensor dense;              // float32 [n, 13]
  Tensor labels;             // float32 [n]
  KeyedJaggedTensor sparse;  // the 26 features, one id per sample
  int64_t bad_lines = 0;     // skipped in this batch (skip_bad_lines)
  int64_t epoch = 0;
  int64_t position = 0;      // global samples of the epoch consumed after this batch
};

struct ClickLogOptions {
  int rank = 0, world = 1;
  int64_t batch = 512;                    // per rank
  std::vector<std::string> features;      // the 26 categorical columns' feature names, in order
  std::vector<int64_t> num_embeddings;    // per feature; 0: the raw value (a managed-collision table remaps it)
  int64_t shuffle_buffer = 0;             // samples; 0: the files' order
  uint64_t seed = 0;
  bool skip_bad_lines = false;
  int threads = 0;                        // parsing threads (0: oneTBB's default)
  int prefetch = 2;                       // batches prepared ahead (0: none, on the caller's thread)
};

// What a data spec names: "criteo:PATH[,PATH...]" where each PATH is a TSV
// file (plain or gzip), or a directory holding either day_N_dense.npy files
// (the NumPy layout) or TSV files (*.tsv, *.txt, *.gz, in name order).
struct ClickLogSpec {
  enum class Kind { kTsv, kNpy } kind = Kind::kTsv;
  std::vector<std::string> files;  // kTsv: every file, in order; kNpy: the directory
  std::string text;                // as given
  // Checks that every file exists and is readable (before any training).
  static StatusOr<ClickLogSpec> Parse(const std::string& text);
};

class ClickLogReader {
 public:
  static StatusOr<std::unique_ptr<ClickLogReader>> Open(const ClickLogSpec& spec, const ClickLogOptions& options);
  // Samples in the whole stream (one pass over TSV files; headers only for
  // the NumPy layout): what an epoch holds.
  static StatusOr<int64_t> CountSamples(const ClickLogSpec& spec);
  ~ClickLogReader();

  // The next batch of this rank; an empty optional at the end of an epoch
  // (then StartEpoch continues).
  StatusOr<std::optional<ClickBatch>> Next();
  // Starts epoch `epoch` at global sample `position` (0, or a checkpoint's).
  Status StartEpoch(int64_t epoch, int64_t position = 0);

  int64_t bytes_read() const;     // from the files, so far
  double wait_seconds() const;    // the caller's time blocked in Next
  std::string Describe() const;

 private:
  class Impl;
  explicit ClickLogReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardrec::data
