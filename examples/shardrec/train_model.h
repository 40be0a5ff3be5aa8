// `shardrec train --model`: the dense half of the host's training loop.
// The sparse half (the sharded collection) stays in cmd_train.cc; this
// turns its pooled output, synthetic dense features and planted labels
// into a loss, trains the dense model data-parallel (core/train) and hands
// back dL/dpooled for the collection's backward.
#pragma once

#include <memory>
#include <optional>
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include <boost/program_options.hpp>

#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/modules/sharded_tables.h"
#include "shardrec/core/train/model_trainer.h"
#include "train_data.h"

namespace shardrec::cli {

struct ModelFlags {
  std::string model;  // empty: no model (a synthetic output gradient, as before)
  std::string dense_optimizer = "adagrad,lr=0.01", bucket = "1MiB";
  double clip_grad_norm = 0;
  std::string dump_dir;      // --dump-dir
  int64_t bucket_bytes = 0;  // --bucket-size, parsed by CheckModelFlags
  int64_t position_weighted = 0;  // --position-weighted: max ids per sample of every feature (0: the model's)
};

// The model's config with the flags applied (--position-weighted).
StatusOr<ModelConfig> LoadModelConfig(const ModelFlags& f);

// Marks the tables of the model's position-weighted features as weighted
// (their features carry the position weights); a table that is also
// managed-collision is refused.
Status MarkPositionWeightedTables(const ModelFlags& f, std::vector<EmbeddingTableConfig>* tables);

// Parses and checks the flags once, before any rank starts: the error
// names the flag.
Status CheckModelFlags(ModelFlags* f);

void AddModelOptions(boost::program_options::options_description& desc, ModelFlags* f);

// The model, its trainer and the losses of one rank (or of the unsharded
// --verify reference).
class ModelRun {
 public:
  // `reference`: the unsharded copy on rank 0, which sees the global batch
  // and reproduces the ranks' semantics (loss per `batch`, dense gradients
  // averaged over `world`).
  static StatusOr<std::unique_ptr<ModelRun>> Create(const ProcessGroup* group, const ModelFlags& f,
                                                    const std::vector<EmbeddingTableConfig>& tables, uint64_t seed,
                                                    int64_t batch, int world, bool reference);
  // The batch as the collection sees it (with position weights, if any).
  StatusOr<KeyedJaggedTensor> ProcessFeatures(const KeyedJaggedTensor& batch) { return trainer_->ProcessFeatures(batch); }
  bool has_position_weights() const { return trainer_->has_position_weights(); }
  // The dense half of one step over the collection's output, the batch's
  // dense features and labels: returns dL/dpooled. Then the collection's
  // backward, then Update (with its id weight gradient when
  // has_position_weights()).
  StatusOr<Tensor> Backward(const Tensor& pooled, const Tensor& dense, const Tensor& labels);
  // The last Backward's logits [batch].
  const Tensor& last_logits() const { return last_logits_; }
  Status Update(const std::vector<float>* id_weight_grad) { return trainer_->Update(id_weight_grad); }
  ModelTrainer& trainer() { return *trainer_; }
  double last_loss() const { return last_loss_; }
  double first_loss() const { return first_loss_; }
  const ModelConfig& config() const { return config_; }
  // Its parameters and optimizer, for checkpoints.
  DenseCheckpointState CheckpointState() { return {trainer_->Parameters(), &trainer_->optimizer()}; }

 private:
  ModelConfig config_;
  std::unique_ptr<ModelTrainer> trainer_;
  double first_loss_ = -1, last_loss_ = 0;
  Tensor last_logits_;
};

// --dump-dir: what a reference implementation needs to replay a --model
// run, as .npy files (docs/models.md#replaying-a-run-elsewhere):
//   init/ and final/: dense/<parameter>.npy, tables/<table>.npy (weights)
//   steps/<k>/: dense.npy, labels.npy, <feature>.ids.npy, <feature>.lengths.npy
//               (the step's global batch, ranks' samples in rank order)
//   losses.npy (the mean loss over ranks, per step), run.json (model, sizes, optimizers)
class RunDump {
 public:
  // `dir` is created; an existing non-empty directory is refused.
  static StatusOr<RunDump> Create(const std::string& dir);
  // Collective: every rank reads the tables; the rank holding the dump
  // (rank 0; the others pass null) writes them and the dense parameters.
  static Status Parameters(const RunDump* dump, const std::string& phase, const std::vector<EmbeddingTableConfig>& tables,
                           const std::function<StatusOr<TableContents>(const std::string&)>& read_table,
                           ModelRun& model);
  Status Batch(int64_t step, const SyntheticData& data, int world, int64_t batch, int64_t dense_in) const;
  Status Finish(const std::vector<double>& losses, const nlohmann::json& run) const;

 private:
  explicit RunDump(std::filesystem::path dir) : dir_(std::move(dir)) {}
  std::filesystem::path dir_;
};

// The tables a model trains when --tables is not given: 26 features (Criteo's)
// of 100000 rows at the model's embedding dim.
StatusOr<std::string> DefaultModelTables(const std::string& model);

}  // namespace shardrec::cli
