// Weights between float32 and a table's stored form (see table_weights.h).
#include "shardrec/core/modules/table_weights.h"

#include <cmath>

#include <fmt/format.h>

#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/sdk/quantized_rows.hpp"

namespace shardrec {

namespace {
sdk::RowQuantization QuantOf(const EmbeddingTableConfig& c) {
  return static_cast<sdk::RowQuantization>(RowQuantization(c.data_type));
}

Status ExpectShape(const Tensor& t, const std::string& what, DLDataType dtype, int64_t cols) {
  if (!SameDType(t.dtype(), dtype) || t.ndim() != 2 || t.size(1) != cols) {
    return InvalidArgumentError(fmt::format("{}: expected {} [rows, {}], got {} {}", what, DTypeName(dtype), cols,
                                            DTypeName(t.dtype()), ShapeString(t.shape())));
  }
  return Status::Ok();
}
}  // namespace

StatusOr<Tensor> EncodeWeights(const Tensor& f32, const EmbeddingTableConfig& config, const std::string& what) {
  if (!IsRowQuantized(config.data_type)) return FromFloat32(f32, ToDLDataType(config.data_type), what);
  SR_RETURN_IF_ERROR(ExpectShape(f32, what, dtype::kFloat32, config.embedding_dim));
  const int64_t rows = f32.size(0), dim = config.embedding_dim, bytes = config.WeightColumns();
  Tensor out = Tensor::Empty(dtype::kUInt8, {rows, bytes});
  const float* src = f32.data<float>();
  auto* dst = static_cast<uint8_t*>(out.raw_data());
  for (int64_t r = 0; r < rows; ++r) {
    const float* x = src + r * dim;
    for (int64_t c = 0; c < dim; ++c) {
      // Beyond fp16's range the row's bias and scale cannot hold it either.
      if (!std::isfinite(x[c]) || std::fabs(x[c]) > 65504.0f) {
        return InvalidArgumentError(fmt::format("{}: row {} column {} is {}, which an {} row cannot hold (scale and "
                                                "bias are fp16: finite values within +-65504)",
                                                what, r, c, x[c], DataTypeName(config.data_type)));
      }
    }
    sdk::QuantizeRow(QuantOf(config), x, dim, dst + r * bytes);
  }
  return out;
}

StatusOr<Tensor> DecodeWeights(const Tensor& stored, const EmbeddingTableConfig& config, const std::string& what) {
  if (!IsRowQuantized(config.data_type)) return ToFloat32(stored, what);
  SR_RETURN_IF_ERROR(ExpectShape(stored, what, dtype::kUInt8, config.WeightColumns()));
  const int64_t rows = stored.size(0), dim = config.embedding_dim, bytes = config.WeightColumns();
  Tensor out = Tensor::Empty(dtype::kFloat32, {rows, dim});
  const auto* src = static_cast<const uint8_t*>(stored.raw_data());
  float* dst = out.data<float>();
  const sdk::RowQuantization q = QuantOf(config);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < dim; ++c) dst[r * dim + c] = sdk::Dequantize(q, src + r * bytes, c);
  }
  return out;
}

}  // namespace shardrec
