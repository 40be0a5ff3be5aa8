// Dense parameters in a checkpoint (docs/checkpoints.md#dense-parameters):
// replicas are identical, so rank 0 writes each parameter's value and its
// optimizer state as dense/<i>.<kind>.npy, and the manifest's "dense" key
// lists them:
//   "dense": {"optimizer": "adam,beta1=0.9,...", "steps": 40,
//             "files": [{"name": "over_arch.model.1.bias", "kind": "value", "path": "dense/7.value.npy",
//                        "shape": [1], "bytes": 132, "xxh3_64": "..."}, ...]}
// Every rank reads them all when loading. Internal to core/src/checkpoint.
#pragma once

#include <filesystem>

#include <nlohmann/json.hpp>

#include "shardrec/core/checkpoint/checkpoint.h"

namespace shardrec::checkpoint {

// Writes the files under `staging`; returns the manifest's "dense" value.
StatusOr<nlohmann::json> SaveDense(const DenseCheckpointState& state, const std::filesystem::path& staging,
                                   int64_t* bytes);
// Checks the manifest's "dense" against `state` (names, shapes, the
// optimizer unless `reset_optimizer`) and the files' sizes and checksums,
// before anything changes; `source` names the manifest in errors.
Status CheckDense(const DenseCheckpointState& state, const nlohmann::json& manifest_extra, const std::filesystem::path& dir,
                  bool reset_optimizer, const std::string& source);
// Reads the values (and the state, unless `reset_optimizer`) into `state`.
Status LoadDense(const DenseCheckpointState& state, const nlohmann::json& manifest_extra, const std::filesystem::path& dir,
                 bool reset_optimizer);

}  // namespace shardrec::checkpoint
