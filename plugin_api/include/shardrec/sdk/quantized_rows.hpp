// shardrec plugin SDK — row-wise quantized embedding rows (ABI 1.4,
// sr_kernel_table.row_quantization), laid out as FBGEMM's IntN TBE lays its
// inference rows: every row is
//
//   [scale: fp16][bias: fp16][dim values of `bits` bits, packed][zero padding]
//
// INT8 holds one value per byte; INT4 two, element 2k in the low nibble of
// byte k; INT2 four, element 4k in the lowest two bits. The row is padded to
// a multiple of 4 bytes so that every row's scale/bias pair is aligned.
// A value dequantizes as float(scale) * q + float(bias), in float32.
//
// Quantizing a float32 row follows FBGEMM's FloatToFusedNBitRowwise
// QuantizedSBHalf: bias = fp16(min); scale = fp16((max - bias) / (2^bits - 1))
// (1 when that is 0 or its inverse overflows); q = clamp(round((x - bias) /
// scale), 0, 2^bits - 1). The host (export) and every kernel use these
// functions, so a table quantizes and dequantizes the same everywhere.
#ifndef SHARDREC_SDK_QUANTIZED_ROWS_HPP_
#define SHARDREC_SDK_QUANTIZED_ROWS_HPP_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "shardrec/sdk/half.hpp"

namespace shardrec::sdk {

// sr_kernel_table.row_quantization values (SR_ROW_QUANT_* in abi/kernel.h).
enum class RowQuantization : int32_t { kNone = 0, kInt8 = 1, kInt4 = 2, kInt2 = 3 };

constexpr int QuantBits(RowQuantization q) {
  return q == RowQuantization::kInt8 ? 8 : q == RowQuantization::kInt4 ? 4 : q == RowQuantization::kInt2 ? 2 : 0;
}

constexpr int64_t kQuantScaleBiasBytes = 4;

// Bytes of one quantized row of `dim` values (scale/bias included, padded).
constexpr int64_t QuantRowBytes(RowQuantization q, int64_t dim) {
  const int64_t bits = QuantBits(q);
  const int64_t packed = (dim * bits + 7) / 8;
  return (kQuantScaleBiasBytes + packed + 3) / 4 * 4;
}

// "int8_rowwise", ... as in the kernel attribute "weight_dtypes" and in
// tables files; "" for kNone.
constexpr const char* QuantName(RowQuantization q) {
  return q == RowQuantization::kInt8   ? "int8_rowwise"
         : q == RowQuantization::kInt4 ? "int4_rowwise"
         : q == RowQuantization::kInt2 ? "int2_rowwise"
                                       : "";
}

inline float QuantScale(const uint8_t* row) {
  uint16_t h;
  std::memcpy(&h, row, 2);
  return HalfToFloat(h);
}
inline float QuantBias(const uint8_t* row) {
  uint16_t h;
  std::memcpy(&h, row + 2, 2);
  return HalfToFloat(h);
}

// The quantized value of element i (0 .. 2^bits - 1).
inline uint32_t QuantValue(RowQuantization q, const uint8_t* row, int64_t i) {
  const uint8_t* data = row + kQuantScaleBiasBytes;
  switch (q) {
    case RowQuantization::kInt8: return data[i];
    case RowQuantization::kInt4: return (data[i >> 1] >> ((i & 1) * 4)) & 0xFu;
    case RowQuantization::kInt2: return (data[i >> 2] >> ((i & 3) * 2)) & 0x3u;
    case RowQuantization::kNone: break;
  }
  return 0;
}

// Element i of a quantized row, dequantized (the scalar reference).
inline float Dequantize(RowQuantization q, const uint8_t* row, int64_t i) {
  return QuantScale(row) * static_cast<float>(QuantValue(q, row, i)) + QuantBias(row);
}

// Quantizes `dim` float32 values into `row` (QuantRowBytes(q, dim) bytes,
// padding zeroed). Non-finite values are the caller's to refuse.
inline void QuantizeRow(RowQuantization q, const float* x, int64_t dim, uint8_t* row) {
  const int bits = QuantBits(q);
  std::memset(row, 0, static_cast<size_t>(QuantRowBytes(q, dim)));
  float lo = dim > 0 ? x[0] : 0.0f, hi = lo;
  for (int64_t i = 1; i < dim; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  const uint16_t bias_h = FloatToHalf(lo);
  const float bias = HalfToFloat(bias_h);
  const float levels = static_cast<float>((1u << bits) - 1u);
  uint16_t scale_h = FloatToHalf((hi - bias) / levels);
  float scale = HalfToFloat(scale_h);
  // As FBGEMM: a zero (constant row, underflow) or tiny scale becomes 1. A
  // negative one (the row's values all round below their fp16 bias) stays.
  if (scale == 0.0f || std::isinf(1.0f / scale)) {
    scale_h = FloatToHalf(1.0f);
    scale = 1.0f;
  }
  std::memcpy(row, &scale_h, 2);
  std::memcpy(row + 2, &bias_h, 2);
  const float inverse = 1.0f / scale;
  uint8_t* data = row + kQuantScaleBiasBytes;
  for (int64_t i = 0; i < dim; ++i) {
    const float v = std::nearbyint((x[i] - bias) * inverse);
    // NaN (a row beyond fp16's range: bias -inf) becomes 0, as CUDA's fmaxf does.
    const auto qv = static_cast<uint32_t>(v >= 0.0f ? std::min(v, levels) : 0.0f);
    switch (q) {
      case RowQuantization::kInt8: data[i] = static_cast<uint8_t>(qv); break;
      case RowQuantization::kInt4: data[i >> 1] = static_cast<uint8_t>(data[i >> 1] | (qv << ((i & 1) * 4))); break;
      case RowQuantization::kInt2: data[i >> 2] = static_cast<uint8_t>(data[i >> 2] | (qv << ((i & 3) * 2))); break;
      case RowQuantization::kNone: break;
    }
  }
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_QUANTIZED_ROWS_HPP_
