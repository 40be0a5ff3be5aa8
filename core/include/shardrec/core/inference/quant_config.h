// Which type each table is served in (TorchRec's QuantConfig, per table as
// its per-table dtype mapping allows): a default and per-table overrides,
// as `shardrec export --quantize int8 --per-table t0=int4,t3=fp16` gives
// them. And what quantizing a table cost: the error of its values.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/status.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

struct QuantConfig {
  DataType default_type = DataType::kInt8;
  std::map<std::string, DataType> per_table;

  DataType For(const std::string& table) const;
  // default: "int8" | "int4" | "int2" | "fp16" | "bf16" | "fp32";
  // per_table: "t0=int4,t3=fp16" (may be empty).
  static StatusOr<QuantConfig> Parse(const std::string& default_type, const std::string& per_table);
  // Every per-table name must be one of `tables` (a typo must not silently
  // serve the default): the error lists the names.
  Status CheckTables(const std::vector<EmbeddingTableConfig>& tables) const;
  // `tables` with each one's data_type set as this config says.
  std::vector<EmbeddingTableConfig> Apply(std::vector<EmbeddingTableConfig> tables) const;
};

// The error quantizing a table made: |served - trained| over every value.
struct QuantizationError {
  double max_abs = 0;
  double mean_abs = 0;
  int64_t values = 0;
};
// Both float32 of one shape.
StatusOr<QuantizationError> MeasureQuantizationError(const Tensor& trained, const Tensor& served);

}  // namespace shardrec
