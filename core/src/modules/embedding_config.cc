// Table configs and the JSON tables file (see embedding_config.h).
#include "shardrec/core/modules/embedding_config.h"

#include "shardrec/abi/kernel.h"
#include "shardrec/core/io/names.h"
#include "shardrec/core/tensor/tensor.h"
#include "shardrec/sdk/quantized_rows.hpp"
#include "../io/json_number.h"

#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace shardrec {

const char* PoolingName(PoolingType p) {
  switch (p) {
    case PoolingType::kSum: return "sum";
    case PoolingType::kMean: return "mean";
    case PoolingType::kNone: return "none";
  }
  return "?";
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kFp32: return "fp32";
    case DataType::kFp16: return "fp16";
    case DataType::kBf16: return "bf16";
    case DataType::kInt8: return "int8";
    case DataType::kInt4: return "int4";
    case DataType::kInt2: return "int2";
  }
  return "?";
}

DLDataType ToDLDataType(DataType t) {
  switch (t) {
    case DataType::kFp16: return {kDLFloat, 16, 1};
    case DataType::kBf16: return {kDLBfloat, 16, 1};
    case DataType::kInt8:
    case DataType::kInt4:
    case DataType::kInt2: return {kDLUInt, 8, 1};
    case DataType::kFp32: break;
  }
  return {kDLFloat, 32, 1};
}

int32_t RowQuantization(DataType t) {
  switch (t) {
    case DataType::kInt8: return SR_ROW_QUANT_INT8;
    case DataType::kInt4: return SR_ROW_QUANT_INT4;
    case DataType::kInt2: return SR_ROW_QUANT_INT2;
    case DataType::kFp32:
    case DataType::kFp16:
    case DataType::kBf16: break;
  }
  return SR_ROW_QUANT_NONE;
}

bool IsRowQuantized(DataType t) { return RowQuantization(t) != SR_ROW_QUANT_NONE; }

int64_t EmbeddingTableConfig::WeightColumns() const {
  if (!IsRowQuantized(data_type)) return embedding_dim;
  return sdk::QuantRowBytes(static_cast<sdk::RowQuantization>(RowQuantization(data_type)), embedding_dim);
}

int64_t EmbeddingTableConfig::RowBytes() const {
  return WeightColumns() * static_cast<int64_t>(DTypeSize(ToDLDataType(data_type)));
}

StatusOr<PoolingType> ParsePooling(const std::string& s) {
  for (auto p : {PoolingType::kSum, PoolingType::kMean, PoolingType::kNone}) {
    if (s == PoolingName(p)) return p;
  }
  return InvalidArgumentError("unknown pooling '" + s + "' (expected sum, mean or none)");
}

StatusOr<DataType> ParseDataType(const std::string& s) {
  for (auto t : {DataType::kFp32, DataType::kFp16, DataType::kBf16, DataType::kInt8, DataType::kInt4, DataType::kInt2}) {
    if (s == DataTypeName(t)) return t;
  }
  return InvalidArgumentError("unknown data_type '" + s +
                              "' (expected fp32, fp16, bf16, or int8, int4, int2 for quantized inference tables)");
}

double EmbeddingTableConfig::init_min() const {
  return weight_init_min.value_or(-std::sqrt(1.0 / static_cast<double>(std::max<int64_t>(num_embeddings, 1))));
}
double EmbeddingTableConfig::init_max() const {
  return weight_init_max.value_or(std::sqrt(1.0 / static_cast<double>(std::max<int64_t>(num_embeddings, 1))));
}

Status ValidateTables(const std::vector<EmbeddingTableConfig>& tables) {
  std::set<std::string> names;
  std::map<std::string, std::string> feature_owner;
  for (const auto& t : tables) {
    const std::string where = "table '" + t.name + "'";
    if (t.name.empty()) return InvalidArgumentError("a table has no name");
    SR_RETURN_IF_ERROR(CheckName("table", t.name));
    if (!names.insert(t.name).second) return InvalidArgumentError("duplicate table name '" + t.name + "'");
    if (t.num_embeddings <= 0) return InvalidArgumentError(where + ": num_embeddings must be positive");
    if (t.embedding_dim <= 0) return InvalidArgumentError(where + ": embedding_dim must be positive");
    // Bounded so that every byte count derived from it (a row with Adam's
    // state is at most 12 bytes per element; shards, tables, ranks) fits
    // in int64 without checks further down.
    int64_t elements = 0;
    if (__builtin_mul_overflow(t.num_embeddings, t.embedding_dim, &elements) || elements > kMaxTableElements) {
      return InvalidArgumentError(fmt::format("{}: {} x {} elements is too large (at most 2^56)", where,
                                              t.num_embeddings, t.embedding_dim));
    }
    if (t.feature_names.empty()) return InvalidArgumentError(where + ": feature_names is empty");
    if (t.init_min() > t.init_max()) {
      return InvalidArgumentError(fmt::format("{}: weight_init_min {} > weight_init_max {}", where,
                                              t.init_min(), t.init_max()));
    }
    for (const auto& f : t.feature_names) {
      SR_RETURN_IF_ERROR(CheckName("feature", f).WithContext(where));
      const auto [it, inserted] = feature_owner.emplace(f, t.name);
      if (!inserted) {
        return InvalidArgumentError("feature '" + f + "' is listed by tables '" + it->second + "' and '" +
                                    t.name + "' (a feature looks up one table)");
      }
    }
  }
  return Status::Ok();
}

namespace {

using nlohmann::json;

StatusOr<EmbeddingTableConfig> ParseTable(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgumentError(where + ": expected an object");
  static const std::set<std::string> kKnown = {
      "name", "num_embeddings", "embedding_dim", "feature_names", "pooling", "data_type",
      "weight_init_min", "weight_init_max", "is_weighted", "managed_collision"};
  for (const auto& [key, value] : j.items()) {
    if (!kKnown.contains(key)) {
      return InvalidArgumentError(fmt::format("{}: unknown key '{}' (known: name, num_embeddings, "
                                              "embedding_dim, feature_names, pooling, data_type, "
                                              "weight_init_min, weight_init_max, is_weighted, "
                                              "managed_collision)",
                                              where, key));
    }
  }
  EmbeddingTableConfig t;
  try {
    for (const char* required : {"name", "num_embeddings", "embedding_dim", "feature_names"}) {
      if (!j.contains(required)) return InvalidArgumentError(where + ": missing '" + required + "'");
    }
    t.name = j.at("name").get<std::string>();
    SR_ASSIGN_OR_RETURN(t.num_embeddings, JsonInteger(j.at("num_embeddings"), where + ": num_embeddings"));
    SR_ASSIGN_OR_RETURN(t.embedding_dim, JsonInteger(j.at("embedding_dim"), where + ": embedding_dim"));
    t.feature_names = j.at("feature_names").get<std::vector<std::string>>();
    if (j.contains("pooling")) {
      SR_ASSIGN_OR_RETURN(t.pooling, ParsePooling(j.at("pooling").get<std::string>()));
    }
    if (j.contains("data_type")) {
      SR_ASSIGN_OR_RETURN(t.data_type, ParseDataType(j.at("data_type").get<std::string>()));
    }
    if (j.contains("weight_init_min")) t.weight_init_min = j.at("weight_init_min").get<double>();
    if (j.contains("weight_init_max")) t.weight_init_max = j.at("weight_init_max").get<double>();
    if (j.contains("is_weighted")) t.is_weighted = j.at("is_weighted").get<bool>();
    if (j.contains("managed_collision")) {
      const json& mc = j.at("managed_collision");
      if (mc.is_string()) {
        t.managed_collision = mc.get<std::string>();
      } else if (mc.is_object()) {
        for (const auto& [key, value] : mc.items()) {
          t.managed_collision += (t.managed_collision.empty() ? "" : ",") + key + "=" +
                                 (value.is_string() ? value.get<std::string>() : value.dump());
        }
      } else {
        return InvalidArgumentError(where + ": managed_collision must be a string (\"zch_size=...,policy=lru\") "
                                            "or an object");
      }
    }
  } catch (const json::exception& e) {
    return InvalidArgumentError(where + ": " + e.what());
  }
  return t;
}

}  // namespace

StatusOr<std::vector<EmbeddingTableConfig>> ParseTablesJson(const std::string& json_text,
                                                            const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    return InvalidArgumentError(source + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("tables") || !doc.at("tables").is_array()) {
    return InvalidArgumentError(source + ": expected {\"tables\": [ ... ]}");
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "tables") return InvalidArgumentError(source + ": unknown top-level key '" + key + "'");
  }
  std::vector<EmbeddingTableConfig> tables;
  size_t i = 0;
  for (const auto& entry : doc.at("tables")) {
    const std::string where = fmt::format("{}: tables[{}]{}", source, i++,
                                          entry.is_object() && entry.contains("name") && entry["name"].is_string()
                                              ? " ('" + entry["name"].get<std::string>() + "')"
                                              : "");
    SR_ASSIGN_OR_RETURN(auto t, ParseTable(entry, where));
    tables.push_back(std::move(t));
  }
  if (tables.empty()) return InvalidArgumentError(source + ": \"tables\" is empty");
  SR_RETURN_IF_ERROR(ValidateTables(tables).WithContext(source));
  return tables;
}

StatusOr<std::vector<EmbeddingTableConfig>> LoadTablesFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Status(SR_NOT_FOUND, path.string() + ": cannot open the tables file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParseTablesJson(ss.str(), path.string());
}

std::string TablesToJson(const std::vector<EmbeddingTableConfig>& tables) {
  json doc = {{"tables", json::array()}};
  for (const auto& t : tables) {
    doc["tables"].push_back({{"name", t.name},
                             {"num_embeddings", t.num_embeddings},
                             {"embedding_dim", t.embedding_dim},
                             {"feature_names", t.feature_names},
                             {"pooling", PoolingName(t.pooling)},
                             {"data_type", DataTypeName(t.data_type)},
                             {"weight_init_min", t.init_min()},
                             {"weight_init_max", t.init_max()},
                             {"is_weighted", t.is_weighted}});
    if (!t.managed_collision.empty()) doc["tables"].back()["managed_collision"] = t.managed_collision;
  }
  return doc.dump(2);
}

}  // namespace shardrec
