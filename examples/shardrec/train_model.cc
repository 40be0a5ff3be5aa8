#include "train_model.h"

#include <algorithm>

#include <fmt/format.h>

#include <fstream>

#include "cli.h"
#include "kernel_threads.h"
#include "shardrec/core/io/names.h"
#include "shardrec/core/tensor/npy.h"
#include "shardrec/core/dense/gemm.h"
#include "shardrec/core/text/byte_size.h"

namespace shardrec::cli {

namespace po = boost::program_options;

void AddModelOptions(po::options_description& desc, ModelFlags* f) {
  desc.add_options()
      ("model", po::value(&f->model),
       "train a whole model: dlrm, dcn (DLRM with a low-rank CrossNet interaction), deepfm, or a model JSON file "
       "(docs/models.md). Batches then carry dense features and labels from a planted model, and the progress "
       "line shows the loss")
      ("dense-optimizer", po::value(&f->dense_optimizer)->default_value(f->dense_optimizer),
       "--model's dense optimizer NAME[,key=value...]: sgd (momentum, dampening, nesterov, weight_decay), adagrad "
       "(lr_decay, initial_accumulator_value, eps, weight_decay), adam, adamw (beta1, beta2, eps, weight_decay); "
       "as torch.optim computes them")
      ("bucket-size", po::value(&f->bucket)->default_value(f->bucket),
       "--model's data-parallel gradient buckets: each all-reduce starts when its bucket's gradients are ready, "
       "overlapping the rest of backward (0: one all-reduce after backward)")
      ("clip-grad-norm", DoubleValue(&f->clip_grad_norm),
       "--model: clip the dense gradients' total 2-norm to this (0: off), as torch.nn.utils.clip_grad_norm_")
      ("dump-dir", po::value(&f->dump_dir),
       "--model: write the initial and final parameters, every step's global batch and the losses as .npy files "
       "into this new directory, for a reference implementation to replay (docs/models.md)")
      ("position-weighted", po::value(&f->position_weighted),
       "--model: TorchRec's PositionWeightedModule on every feature, with trainable weights for positions 0 .. N-1 "
       "of each sample's ids (a model file's \"position_weighted\" chooses per feature); their tables become "
       "weighted");
}

Status CheckModelFlags(ModelFlags* f) {
  if (f->bucket == "0") {
    f->bucket_bytes = 0;
  } else {
    auto bytes = ParseByteSize(f->bucket);
    if (!bytes.ok()) return InvalidArgumentError("--bucket-size: " + bytes.status().message() + ", or 0");
    f->bucket_bytes = bytes.value();
  }
  if (!(f->clip_grad_norm >= 0)) return InvalidArgumentError("--clip-grad-norm must be >= 0 (0: off)");
  SR_RETURN_IF_ERROR(dense::DenseOptimizerSpec::Parse(f->dense_optimizer).status().WithContext("--dense-optimizer"));
  if (f->position_weighted < 0 || f->position_weighted > (int64_t{1} << 24)) {
    return InvalidArgumentError("--position-weighted must be in [1, 16777216] (0: the model's own)");
  }
  return LoadModelConfig(*f).status();
}

StatusOr<ModelConfig> LoadModelConfig(const ModelFlags& f) {
  SR_ASSIGN_OR_RETURN(ModelConfig c, ModelConfig::FromNameOrFile(f.model));
  if (f.position_weighted > 0) c.position_weighted = {{"*", f.position_weighted}};
  return c;
}

namespace {
// The pooled features in the collection's order (tables in order, each
// table's features in order).
std::vector<std::string> PooledFeatures(const std::vector<EmbeddingTableConfig>& tables) {
  std::vector<std::string> names;
  for (const auto& t : tables) {
    if (t.pooling == PoolingType::kNone) continue;
    names.insert(names.end(), t.feature_names.begin(), t.feature_names.end());
  }
  return names;
}
}  // namespace

Status MarkPositionWeightedTables(const ModelFlags& f, std::vector<EmbeddingTableConfig>* tables) {
  SR_ASSIGN_OR_RETURN(ModelConfig c, LoadModelConfig(f));
  if (c.position_weighted.empty()) return Status::Ok();
  SR_ASSIGN_OR_RETURN(auto lengths, c.PositionWeightedFeatures(PooledFeatures(*tables)));
  for (auto& t : *tables) {
    for (const auto& name : t.feature_names) {
      if (lengths.count(name) == 0) continue;
      if (!t.managed_collision.empty()) {
        return InvalidArgumentError(fmt::format("position weights on feature '{}': its table '{}' is managed-collision, "
                                                "which does not carry per-id weights yet",
                                                name, t.name));
      }
      t.is_weighted = true;
    }
  }
  return Status::Ok();
}

StatusOr<std::string> DefaultModelTables(const std::string& model) {
  SR_ASSIGN_OR_RETURN(ModelConfig c, ModelConfig::FromNameOrFile(model));
  const int64_t dim = c.model == "deepfm" ? 16 : c.dense_arch_layer_sizes.back();
  return fmt::format("26x100000x{}", dim);
}

StatusOr<std::unique_ptr<ModelRun>> ModelRun::Create(const ProcessGroup* group, const ModelFlags& f,
                                                     const std::vector<EmbeddingTableConfig>& tables, uint64_t seed,
                                                     int64_t batch, int world, bool reference) {
  auto run = std::make_unique<ModelRun>();
  SR_ASSIGN_OR_RETURN(run->config_, LoadModelConfig(f));
  int64_t features = 0, dim = 0;
  for (const auto& t : tables) {
    if (t.pooling == PoolingType::kNone) continue;
    if (dim != 0 && t.embedding_dim != dim) {
      return InvalidArgumentError(fmt::format("--model {}: every table needs one embedding dim; '{}' has {}, others {}",
                                              f.model, t.name, t.embedding_dim, dim));
    }
    dim = t.embedding_dim;
    features += static_cast<int64_t>(t.feature_names.size());
  }
  ModelTrainerOptions o;
  o.model = run->config_;
  o.dense_optimizer = f.dense_optimizer;
  o.seed = seed;
  o.bucket_bytes = f.bucket_bytes;
  o.clip_norm = static_cast<float>(f.clip_grad_norm);
  o.feature_names = PooledFeatures(tables);
  if (reference) {
    o.loss_batch = batch;
    o.dense_average = world;
    o.slices = world;
  }
  if (group != nullptr) {
    // The ranks on this host share its cores: OpenBLAS threads of their
    // own on top would only contend (and spin).
    dense::SetDenseMathThreads(ThreadsPerRank(group->local_world_size()));
  }
  SR_ASSIGN_OR_RETURN(run->trainer_, ModelTrainer::Create(reference ? nullptr : group, features, dim, o));
  return run;
}

StatusOr<Tensor> ModelRun::Backward(const Tensor& pooled, const Tensor& dense, const Tensor& labels) {
  SR_ASSIGN_OR_RETURN(DenseStep s, trainer_->Backward(pooled, dense, labels));
  if (first_loss_ < 0) first_loss_ = s.loss;
  last_loss_ = s.loss;
  last_logits_ = std::move(s.logits);
  return std::move(s.dpooled);
}

StatusOr<RunDump> RunDump::Create(const std::string& dir) {
  std::error_code ec;
  if (std::filesystem::exists(dir, ec) && !std::filesystem::is_empty(dir, ec)) {
    return InvalidArgumentError("--dump-dir " + dir + ": exists and is not empty; give a new directory");
  }
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgumentError("--dump-dir " + dir + ": cannot create it: " + ec.message());
  return RunDump(dir);
}

Status RunDump::Parameters(const RunDump* dump, const std::string& phase,
                           const std::vector<EmbeddingTableConfig>& tables,
                           const std::function<StatusOr<TableContents>(const std::string&)>& read_table,
                           ModelRun& model) {
  const bool lead = dump != nullptr;
  const auto root = lead ? dump->dir_ / phase : std::filesystem::path();
  std::error_code ec;
  if (lead) {
    std::filesystem::create_directories(root / "tables", ec);
    std::filesystem::create_directories(root / "dense", ec);
    if (ec) return InternalError((root / "tables").string() + ": cannot create: " + ec.message());
  }
  for (const auto& t : tables) {
    SR_ASSIGN_OR_RETURN(TableContents c, read_table(t.name));  // collective: every rank
    if (!lead) continue;
    SR_ASSIGN_OR_RETURN(auto path, PathUnder(root / "tables", "table", t.name, ".npy"));
    SR_RETURN_IF_ERROR(WriteNpy(path, c.weights));
  }
  if (!lead) return Status::Ok();
  for (const dense::Parameter* p : model.trainer().Parameters()) {
    SR_RETURN_IF_ERROR(WriteNpy(root / "dense" / (p->name + ".npy"), p->value));
  }
  return Status::Ok();
}

Status RunDump::Batch(int64_t step, const SyntheticData& data, int world, int64_t batch, int64_t dense_in) const {
  const auto root = dir_ / "steps" / std::to_string(step);
  std::error_code ec;
  std::filesystem::create_directories(root, ec);
  if (ec) return InternalError(root.string() + ": cannot create: " + ec.message());
  const KeyedJaggedTensor global = data.GlobalBatch(world, step, batch);
  const int64_t rows = world * batch;
  const Tensor dense = data.DenseFeatures(step, 0, rows, dense_in);
  SR_RETURN_IF_ERROR(WriteNpy(root / "dense.npy", dense));
  SR_RETURN_IF_ERROR(WriteNpy(root / "labels.npy", data.Labels(global, dense, step, 0)));
  size_t at = 0;
  for (size_t f = 0; f < global.keys().size(); ++f) {
    const std::vector<int64_t> lengths(global.lengths().begin() + static_cast<int64_t>(f) * rows,
                                       global.lengths().begin() + static_cast<int64_t>(f + 1) * rows);
    int64_t n = 0;
    for (int64_t l : lengths) n += l;
    const std::vector<int64_t> ids(global.values().begin() + static_cast<int64_t>(at),
                                   global.values().begin() + static_cast<int64_t>(at) + n);
    at += static_cast<size_t>(n);
    SR_ASSIGN_OR_RETURN(auto ids_path, PathUnder(root, "feature", global.keys()[f], ".ids.npy"));
    SR_ASSIGN_OR_RETURN(auto lengths_path, PathUnder(root, "feature", global.keys()[f], ".lengths.npy"));
    SR_RETURN_IF_ERROR(WriteNpy(ids_path, Tensor::FromVector(ids)));
    SR_RETURN_IF_ERROR(WriteNpy(lengths_path, Tensor::FromVector(lengths)));
  }
  return Status::Ok();
}

Status RunDump::Finish(const std::vector<double>& losses, const nlohmann::json& run) const {
  SR_RETURN_IF_ERROR(WriteNpy(dir_ / "losses.npy", Tensor::FromVector(losses)));
  std::ofstream out(dir_ / "run.json");
  out << run.dump(1) << "\n";
  if (!out) return InternalError((dir_ / "run.json").string() + ": cannot write");
  return Status::Ok();
}

}  // namespace shardrec::cli
