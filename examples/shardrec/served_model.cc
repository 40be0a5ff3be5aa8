// Model directories for export and infer (see served_model.h).
#include "served_model.h"

#include <fmt/format.h>

#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/checkpoint/directory.h"

namespace shardrec::cli {

StatusOr<ServedModel> OpenServedModel(const std::filesystem::path& dir) {
  ServedModel s;
  SR_ASSIGN_OR_RETURN(s.dir, ResolveCheckpoint(dir));
  SR_ASSIGN_OR_RETURN(s.manifest, LoadCheckpointManifest(s.dir));
  for (const auto& t : s.manifest.tables) {
    if (!t.managed_collision.empty()) {
      return UnimplementedError(fmt::format("{}: table '{}' is managed-collision: serving its remapped ids is not "
                                            "built yet (export and infer take plain tables)", s.dir.string(), t.name));
    }
  }
  const auto& extra = s.manifest.extra;
  if (extra.contains("model")) {
    SR_ASSIGN_OR_RETURN(ModelConfig m, ModelConfig::FromJson(extra["model"], s.dir.string() + ": \"model\""));
    s.model = std::move(m);
  } else if (extra.contains("dense")) {
    return InvalidArgumentError(s.dir.string() + ": it holds a dense model's parameters but not its config (a checkpoint "
                                "written before `train` recorded it): train again, or serve its tables alone "
                                "from a checkpoint without --model");
  }
  return s;
}

Status PooledShape(const std::vector<EmbeddingTableConfig>& tables, std::vector<std::string>* features, int64_t* dim) {
  features->clear();
  *dim = 0;
  for (const auto& t : tables) {
    if (t.pooling == PoolingType::kNone) continue;
    if (*dim != 0 && t.embedding_dim != *dim) {
      return InvalidArgumentError(fmt::format("the model's tables need one embedding dim; '{}' has {}, others {}",
                                              t.name, t.embedding_dim, *dim));
    }
    *dim = t.embedding_dim;
    features->insert(features->end(), t.feature_names.begin(), t.feature_names.end());
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<ModelTrainer>> CreateDenseHalf(const ModelConfig& model,
                                                        const std::vector<EmbeddingTableConfig>& tables) {
  std::vector<std::string> features;
  int64_t dim = 0;
  SR_RETURN_IF_ERROR(PooledShape(tables, &features, &dim));
  ModelTrainerOptions o;
  o.model = model;
  o.dense_optimizer = "sgd";  // never steps: serving only
  o.feature_names = features;
  return ModelTrainer::Create(nullptr, static_cast<int64_t>(features.size()), dim, o);
}

}  // namespace shardrec::cli
