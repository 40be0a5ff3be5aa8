// Table configs, as TorchRec's torchrec.modules.embedding_configs:
// EmbeddingBagConfig (pooled) and EmbeddingConfig (sequence, pooling none)
// share one struct here; `pooling` says which. A tables file is JSON whose
// keys are the configs' field names, enum values in lower case:
//   {"tables": [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 64,
//                "feature_names": ["f0"], "pooling": "sum", "data_type": "fp32",
//                "weight_init_min": -0.01, "weight_init_max": 0.01,
//                "is_weighted": false}]}
// An unknown key is an error naming it (a typo must not silently become a
// default). Omitted init bounds default to TorchRec's ±sqrt(1/num_embeddings).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

#include "shardrec/core/status.h"

namespace shardrec {

enum class PoolingType { kSum, kMean, kNone };
// kInt8/kInt4/kInt2: row-wise quantized tables for inference (TorchRec's
// DataType.INT8/INT4/INT2 under QuantEmbeddingBagCollection): each row is
// [scale fp16][bias fp16][packed values][padding], as FBGEMM's IntN TBE
// lays it out (sdk/quantized_rows.hpp). Their weights move as raw bytes,
// uint8 [rows, RowBytes()], they train no optimizer, and their rows cannot
// be split by column (column-wise plans are refused).
enum class DataType { kFp32, kFp16, kBf16, kInt8, kInt4, kInt2 };

const char* PoolingName(PoolingType p);        // "sum"
const char* DataTypeName(DataType t);          // "fp32"
// The weights' element type: uint8 for the quantized types (raw row bytes).
DLDataType ToDLDataType(DataType t);
// SR_ROW_QUANT_* of a type (SR_ROW_QUANT_NONE for the float types).
int32_t RowQuantization(DataType t);
bool IsRowQuantized(DataType t);
StatusOr<PoolingType> ParsePooling(const std::string& s);
StatusOr<DataType> ParseDataType(const std::string& s);

struct EmbeddingTableConfig {
  std::string name;
  int64_t num_embeddings = 0;
  int64_t embedding_dim = 0;
  std::vector<std::string> feature_names;
  PoolingType pooling = PoolingType::kSum;
  DataType data_type = DataType::kFp32;
  std::optional<double> weight_init_min;
  std::optional<double> weight_init_max;
  // The features of this table carry per-id weights (TorchRec's is_weighted).
  bool is_weighted = false;
  // Managed collision, as "zch_size=...,policy=lru,eviction_interval=..."
  // (see managed_collision_config.h); empty: ids are rows. In a tables
  // file: "managed_collision": that string, or an object of the same keys.
  std::string managed_collision;

  double init_min() const;  // the bound in effect (default ±sqrt(1/num_embeddings))
  double init_max() const;
  // Columns of the weights as they are stored and moved: embedding_dim,
  // or a quantized row's bytes (scale, bias, packed values, padding).
  int64_t WeightColumns() const;
  // Bytes of one row of weights.
  int64_t RowBytes() const;
};
using EmbeddingBagConfig = EmbeddingTableConfig;
using EmbeddingConfig = EmbeddingTableConfig;

// The most elements (rows x dim) one table may have: 2^56, so bytes per
// table, shard and rank (weights and optimizer state, at most 16 bytes per
// element) fit in int64 everywhere.
inline constexpr int64_t kMaxTableElements = int64_t{1} << 56;

// Checks one table (positive sizes, features present, min <= max) and a set
// (unique table names; a feature looks up exactly one table).
Status ValidateTables(const std::vector<EmbeddingTableConfig>& tables);

StatusOr<std::vector<EmbeddingTableConfig>> ParseTablesJson(const std::string& json_text,
                                                            const std::string& source);
StatusOr<std::vector<EmbeddingTableConfig>> LoadTablesFile(const std::filesystem::path& path);
std::string TablesToJson(const std::vector<EmbeddingTableConfig>& tables);

}  // namespace shardrec
