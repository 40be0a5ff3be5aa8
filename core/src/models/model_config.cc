#include "shardrec/core/models/model_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

namespace shardrec {

namespace {

// As the PositionWeightedModule accepts.
constexpr int64_t kMaxPositionWeightedLength = int64_t{1} << 24;

// A layer of 16384 x 16384 floats is 1 GiB: larger sizes are typos (or
// hostile files), refused before anything is allocated.
constexpr int64_t kMaxLayerSize = 16384;

Status Positive(const std::vector<int64_t>& sizes, const std::string& what) {
  for (int64_t s : sizes) {
    if (s <= 0 || s > kMaxLayerSize) {
      return InvalidArgumentError(fmt::format("model: {} must be in [1, {}], got {}", what, kMaxLayerSize,
                                              nlohmann::json(sizes).dump()));
    }
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ModelConfig> ModelConfig::FromNameOrFile(const std::string& text) {
  if (text == "dlrm" || text == "dcn" || text == "deepfm") {
    ModelConfig c;
    c.model = text;
    return c;
  }
  std::error_code ec;
  if (!std::filesystem::is_regular_file(text, ec)) {
    return InvalidArgumentError("--model '" + text + "': neither dlrm, dcn, deepfm nor a JSON file");
  }
  std::ifstream in(text);
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgumentError(text + ": not valid JSON");
  return FromJson(j, text);
}

StatusOr<ModelConfig> ModelConfig::FromJson(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return InvalidArgumentError(source + ": a model config is a JSON object");
  ModelConfig c;
  if (j.contains("model") && j["model"].is_string()) c.model = j["model"].get<std::string>();
  if (c.model != "dlrm" && c.model != "dcn" && c.model != "deepfm") {
    return InvalidArgumentError(source + ": \"model\" must be \"dlrm\", \"dcn\" or \"deepfm\"");
  }
  for (const auto& item : j.items()) {
    // Not a structured binding: clang 14 (the fuzz build) refuses to
    // capture one in the lambdas below.
    const std::string& key = item.key();
    const nlohmann::json& value = item.value();
    auto integer = [&](int64_t* out) -> Status {
      if (!value.is_number_integer()) return InvalidArgumentError(fmt::format("{}: \"{}\" must be an integer", source, key));
      *out = value.get<int64_t>();
      return Status::Ok();
    };
    auto sizes = [&](std::vector<int64_t>* out) -> Status {
      if (!value.is_array() || value.empty()) {
        return InvalidArgumentError(fmt::format("{}: \"{}\" must be a non-empty list of sizes", source, key));
      }
      out->clear();
      for (const auto& v : value) {
        if (!v.is_number_integer()) return InvalidArgumentError(fmt::format("{}: \"{}\" must list integers", source, key));
        out->push_back(v.get<int64_t>());
      }
      return Status::Ok();
    };
    int64_t layers = 0;
    if (key == "model") continue;
    if (key == "dense_in_features") {
      SR_RETURN_IF_ERROR(integer(&c.dense_in_features));
    } else if (key == "dense_arch_layer_sizes") {
      SR_RETURN_IF_ERROR(sizes(&c.dense_arch_layer_sizes));
    } else if (key == "over_arch_layer_sizes") {
      SR_RETURN_IF_ERROR(sizes(&c.over_arch_layer_sizes));
    } else if (key == "dcn_num_layers") {
      SR_RETURN_IF_ERROR(integer(&layers));
      if (layers <= 0 || layers > 64) return InvalidArgumentError(source + ": \"dcn_num_layers\" must be in [1, 64]");
      c.dcn_num_layers = static_cast<int>(layers);
    } else if (key == "dcn_low_rank_dim") {
      SR_RETURN_IF_ERROR(integer(&c.dcn_low_rank_dim));
    } else if (key == "deepfm_hidden_layer_size") {
      SR_RETURN_IF_ERROR(integer(&c.deepfm_hidden_layer_size));
    } else if (key == "deep_fm_dimension") {
      SR_RETURN_IF_ERROR(integer(&c.deep_fm_dimension));
    } else if (key == "position_weighted") {
      if (!value.is_object() || value.empty()) {
        return InvalidArgumentError(source + ": \"position_weighted\" must map feature names (or \"*\") to max ids "
                                    "per sample, e.g. {\"*\": 20}");
      }
      for (const auto& entry : value.items()) {
        if (!entry.value().is_number_integer() || entry.value().get<int64_t>() < 1 ||
            entry.value().get<int64_t>() > kMaxPositionWeightedLength) {
          return InvalidArgumentError(fmt::format("{}: \"position_weighted\" of \"{}\" must be an integer in [1, {}]",
                                                  source, entry.key(), kMaxPositionWeightedLength));
        }
        if (entry.key().empty()) return InvalidArgumentError(source + ": \"position_weighted\" has an empty feature name");
        c.position_weighted[entry.key()] = entry.value().get<int64_t>();
      }
    } else {
      return InvalidArgumentError(fmt::format(
          "{}: unknown key \"{}\"; a model config has model, dense_in_features, dense_arch_layer_sizes, "
          "over_arch_layer_sizes, dcn_num_layers, dcn_low_rank_dim, deepfm_hidden_layer_size, deep_fm_dimension, "
          "position_weighted",
          source, key));
    }
  }
  SR_RETURN_IF_ERROR(Positive(c.dense_arch_layer_sizes, "dense_arch_layer_sizes"));
  SR_RETURN_IF_ERROR(Positive(c.over_arch_layer_sizes, "over_arch_layer_sizes"));
  SR_RETURN_IF_ERROR(Positive({c.dense_in_features, c.dcn_low_rank_dim, c.deepfm_hidden_layer_size, c.deep_fm_dimension},
                              "dense_in_features, dcn_low_rank_dim, deepfm_hidden_layer_size and deep_fm_dimension"));
  return c;
}

nlohmann::json ModelConfig::ToJson() const {
  nlohmann::json j = {{"model", model}, {"dense_in_features", dense_in_features}};
  if (model != "deepfm") {
    j["dense_arch_layer_sizes"] = dense_arch_layer_sizes;
    j["over_arch_layer_sizes"] = over_arch_layer_sizes;
  }
  if (model == "dcn") {
    j["dcn_num_layers"] = dcn_num_layers;
    j["dcn_low_rank_dim"] = dcn_low_rank_dim;
  }
  if (model == "deepfm") {
    j["deepfm_hidden_layer_size"] = deepfm_hidden_layer_size;
    j["deep_fm_dimension"] = deep_fm_dimension;
  }
  if (!position_weighted.empty()) j["position_weighted"] = position_weighted;
  return j;
}

StatusOr<std::map<std::string, int64_t>> ModelConfig::PositionWeightedFeatures(
    const std::vector<std::string>& features) const {
  std::map<std::string, int64_t> out;
  for (const auto& [name, length] : position_weighted) {
    if (name == "*") continue;
    if (std::find(features.begin(), features.end(), name) == features.end()) {
      return InvalidArgumentError(fmt::format("model {}: position_weighted names feature '{}', which no table has "
                                              "(features: {})",
                                              model, name, fmt::join(features, ", ")));
    }
    out[name] = length;
  }
  auto all = position_weighted.find("*");
  if (all != position_weighted.end()) {
    for (const auto& f : features) out.emplace(f, all->second);
  }
  return out;
}

Status ModelConfig::Check(int64_t features, int64_t dim) const {
  if (features <= 0) return InvalidArgumentError("model " + model + ": needs at least one sparse feature");
  if (model == "deepfm") return Status::Ok();
  if (dense_arch_layer_sizes.back() != dim) {
    return InvalidArgumentError(fmt::format(
        "model {}: the dense arch's last layer size ({}) must equal the embedding dim ({}): every table of a {} has "
        "that dim (set \"dense_arch_layer_sizes\" in a model file, or use tables of dim {})",
        model, dense_arch_layer_sizes.back(), dim, model, dense_arch_layer_sizes.back()));
  }
  if (over_arch_layer_sizes.size() < 2 || over_arch_layer_sizes.back() != 1) {
    return InvalidArgumentError(fmt::format("model {}: over_arch_layer_sizes needs two or more sizes ending in 1 (one "
                                            "logit), got {}", model, nlohmann::json(over_arch_layer_sizes).dump()));
  }
  return Status::Ok();
}

}  // namespace shardrec
