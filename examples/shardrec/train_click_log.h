// `shardrec train --data`: the training loop's input from click logs on
// disk (core/data) instead of synthetic batches, and what comes out of it:
// a windowed training metric and held-out evaluations (core/metrics), a
// CSV of the curve, and the reader's position for checkpoints.
#pragma once

#include <cmath>
#include <cstdint>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/data/click_log_reader.h"
#include "shardrec/core/data/criteo_line.h"
#include "shardrec/core/metrics/binary_metrics.h"
#include "shardrec/core/modules/embedding_config.h"
#include "train_data.h"

namespace shardrec::cli {

struct ClickDataFlags {
  std::string data, eval_data, metrics_out, plot;
  int64_t epochs = 0, eval_every = 0, shuffle_buffer = 100000, metrics_every = 20, metrics_window = 100000;
  bool skip_bad_lines = false;
  int reader_threads = 0;
  // Filled by CheckClickDataFlags.
  std::optional<data::ClickLogSpec> train, eval;
  int64_t train_samples = 0;  // per epoch
};

void AddClickDataOptions(boost::program_options::options_description& desc, ClickDataFlags* f);

// Before any rank starts: the specs parse, every file exists and is
// readable, the training files are counted (an epoch's samples). The
// error names the flag.
Status CheckClickDataFlags(ClickDataFlags* f);

// The click log's features: the tables must serve 26 pooled features
// (Criteo's categorical columns, in order); managed-collision tables get
// raw ids. `num_embeddings` per feature (0 for a managed table).
Status ClickLogFeatures(const std::vector<EmbeddingTableConfig>& tables, std::vector<std::string>* features,
                        std::vector<int64_t>* num_embeddings);

// One step's input on one rank.
struct StepBatch {
  KeyedJaggedTensor sparse;
  Tensor dense, labels;  // with --model (always with --data)
  int64_t bad_lines = 0;
  int64_t epoch = 0;     // the click log's epoch this batch is from
};

// This rank's batches: synthetic (a function of the step), or the next
// batches of the click log, epoch after epoch.
class StepInput {
 public:
  static StatusOr<std::unique_ptr<StepInput>> Synthetic(const SyntheticData* data, int rank, int64_t batch,
                                                        int64_t dense_in);
  static StatusOr<std::unique_ptr<StepInput>> ClickLog(const ClickDataFlags& f, const data::ClickLogOptions& o);
  // The batch of `step` (synthetic), or the log's next one.
  StatusOr<StepBatch> Next(int64_t step);
  // Resuming: the log's epoch and position from a checkpoint's record.
  Status Resume(const nlohmann::json& record);
  // What a checkpoint keeps of the stream, after the last batch.
  nlohmann::json Record() const;
  double wait_seconds() const { return reader_ ? reader_->wait_seconds() : 0.0; }
  int64_t bytes_read() const { return reader_ ? reader_->bytes_read() : 0; }
  int64_t epoch() const { return epoch_; }

 private:
  const SyntheticData* synthetic_ = nullptr;
  int rank_ = 0;
  int64_t batch_ = 0, dense_in_ = 0;
  std::unique_ptr<data::ClickLogReader> reader_;
  std::string spec_;
  int64_t epoch_ = 0, position_ = 0, global_batch_ = 0, shuffle_ = 0;
  uint64_t seed_ = 0;
};

// The curve: a windowed metric over the ranks' last samples during
// training, and full passes over held-out data; rank 0 writes each point
// to --metrics-out (CSV).
class MetricsLog {
 public:
  // `path` empty: no file. Only the rank that writes (0) passes a path.
  static StatusOr<MetricsLog> Create(const std::string& path, int64_t window_per_rank);
  // This rank's step: its logits and labels join the window.
  void Add(const Tensor& logits, const Tensor& labels) { window_.Add(logits.span<float>(), labels.span<float>()); }
  // Collective: the window's metrics over every rank's window.
  StatusOr<metrics::BinaryMetrics> Windowed(const ProcessGroup& group);
  // A row of the CSV: split is "train" or "eval".
  Status Write(const std::string& split, int64_t step, int64_t samples, int64_t epoch, double loss,
               const metrics::BinaryMetrics& m, double seconds);

 private:
  MetricsLog(std::unique_ptr<std::ofstream> out, int64_t window) : out_(std::move(out)), window_(window) {}
  std::unique_ptr<std::ofstream> out_;
  std::string path_;
  metrics::MetricWindow window_;
};

// Collective: one pass over the held-out log; `predict` gives the logits
// of a batch (the collection's forward, then the model's). Every rank
// runs the same number of batches.
using Predict = std::function<StatusOr<Tensor>(const KeyedJaggedTensor& sparse, const Tensor& dense)>;
StatusOr<metrics::BinaryMetrics> EvaluatePass(const ProcessGroup& group, data::ClickLogReader& reader,
                                              const Predict& predict);

// `shardrec plot` and train's --plot: loss and AUC against samples, drawn by
// matplotlib (Debian's python3-matplotlib) from the CSV; a reference AUC
// (the planted model's) as a dashed line when not NaN.
Status PlotMetrics(const std::string& csv, const std::string& png, double reference_auc = std::nan(""),
                   const std::string& title = "");
// The planted model's held-out AUC from a `shardrec datagen` directory's
// planted.json (`dir` or any directory inside it, such as DIR/train), or NaN.
double PlantedAuc(const std::string& data_spec);

}  // namespace shardrec::cli
