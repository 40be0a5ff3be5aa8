// A table's weights between float32 [rows, dim] (what users, the sharded
// modules' ReadTable/WriteTable and exports see) and the form its kernel
// stores: the same values in fp16/bf16, or, for the row-wise quantized
// types (int8/int4/int2), raw rows of bytes [rows, config.WeightColumns()]
// quantized and dequantized exactly as every kernel does
// (sdk/quantized_rows.hpp).
#pragma once

#include <string>

#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/status.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

// float32 [n, dim] -> stored [n, WeightColumns()]; non-finite values of
// a quantized table are refused (naming `what` and the row).
StatusOr<Tensor> EncodeWeights(const Tensor& f32, const EmbeddingTableConfig& config, const std::string& what);
// stored [n, WeightColumns()] -> float32 [n, dim].
StatusOr<Tensor> DecodeWeights(const Tensor& stored, const EmbeddingTableConfig& config, const std::string& what);

}  // namespace shardrec
