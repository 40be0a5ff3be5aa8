// A whole recommendation model's dense half, configured without code: a
// JSON file (or the built-in defaults of `--model dlrm|dcn|deepfm`).
//   {"model": "dlrm",                           dlrm | dcn | deepfm
//    "dense_in_features": 13,
//    "dense_arch_layer_sizes": [512, 256, 64],  dlrm, dcn: the last is the embedding dim
//    "over_arch_layer_sizes": [512, 512, 256, 1],
//    "dcn_num_layers": 3, "dcn_low_rank_dim": 64,          dcn
//    "deepfm_hidden_layer_size": 128, "deep_fm_dimension": 64,   deepfm
//    "position_weighted": {"f0": 20, "*": 10}}  any model: feature -> max ids
//                                               per sample ("*": every other)
// position_weighted puts a PositionWeightedModule in front of the sparse
// arch (core/feature_processors/position_weighted.h); the tables of its
// features must be weighted (the host marks them so).
// Defaults are TorchRec's DLRM example (torchrec_dlrm/dlrm_main.py) with
// the DCN rank scaled from 512 to 64 for a 2-core machine: docs/models.md.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "shardrec/core/status.h"

namespace shardrec {

struct ModelConfig {
  std::string model = "dlrm";
  int64_t dense_in_features = 13;
  std::vector<int64_t> dense_arch_layer_sizes = {512, 256, 64};
  std::vector<int64_t> over_arch_layer_sizes = {512, 512, 256, 1};
  int dcn_num_layers = 3;
  int64_t dcn_low_rank_dim = 64;
  int64_t deepfm_hidden_layer_size = 128;
  int64_t deep_fm_dimension = 64;
  std::map<std::string, int64_t> position_weighted;  // empty: none

  // The features position_weighted covers among `features`, with "*"
  // expanded to the ones not named; a named feature that is not among
  // them is an error.
  StatusOr<std::map<std::string, int64_t>> PositionWeightedFeatures(const std::vector<std::string>& features) const;

  // "dlrm", "dcn", "deepfm" (the defaults), or a JSON file's path.
  static StatusOr<ModelConfig> FromNameOrFile(const std::string& text);
  static StatusOr<ModelConfig> FromJson(const nlohmann::json& j, const std::string& source);
  nlohmann::json ToJson() const;
  // Checks the sizes against the sparse half: `features` pooled
  // embeddings of `dim` columns each.
  Status Check(int64_t features, int64_t dim) const;
};

}  // namespace shardrec
