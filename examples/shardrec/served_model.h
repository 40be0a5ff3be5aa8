// What `shardrec export` writes and `shardrec infer` serves: a model
// directory in the checkpoint format (docs/checkpoints.md), whose tables
// are in their serving types (int8/int4/int2 rows, fp16, ...) and carry no
// optimizer state, with the dense half's parameters and its config
// (manifest key "model"), and how it was made (key "export"). Any training
// checkpoint of `train --model` serves as well, in fp32.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "shardrec/core/checkpoint/manifest.h"
#include "shardrec/core/models/model_config.h"
#include "shardrec/core/train/model_trainer.h"

namespace shardrec::cli {

struct ServedModel {
  std::filesystem::path dir;  // the checkpoint itself (a run's directory resolved to its newest)
  CheckpointManifest manifest;
  std::optional<ModelConfig> model;  // absent: tables only (pooled embeddings are the output)
};

// Reads and checks the manifest; refuses what cannot be served yet
// (managed-collision tables, whose remap state no serving path restores).
StatusOr<ServedModel> OpenServedModel(const std::filesystem::path& dir);

// The model's pooled tables' features, in table order (what the dense half
// sees), and their one embedding dim.
Status PooledShape(const std::vector<EmbeddingTableConfig>& tables, std::vector<std::string>* features, int64_t* dim);

// The dense half, untrained (parameters come from the model's files), for
// one process: forward only.
StatusOr<std::unique_ptr<ModelTrainer>> CreateDenseHalf(const ModelConfig& model,
                                                        const std::vector<EmbeddingTableConfig>& tables);

}  // namespace shardrec::cli
