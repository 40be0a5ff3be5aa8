// Scalar conversions between float32 and the 16-bit weight types (IEEE
// binary16 "fp16" and bfloat16), exact and round-to-nearest-even. The SIMD
// code uses Highway where the hardware rounds correctly and falls back to
// these where it does not (Highway 1.0.3's DemoteTo to bf16 truncates, and
// its software fp16 conversions on pre-F16C targets truncate and mishandle
// inf/NaN); row I/O and initialisation use them directly.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "shardrec/sdk/half.hpp"
#include "shardrec/sdk/kernel_table.hpp"

namespace shardrec::kernel_cpu {

// How a table stores its weights (the SDK's enum). Accumulation is always
// float32.
using WeightType = sdk::WeightDType;

// Bytes of one stored element; a quantized row is moved as bytes.
constexpr size_t ElementBytes(WeightType t) {
  return t == WeightType::kFloat32 ? 4 : t == WeightType::kRowQuantized ? 1 : 2;
}

// The scalar conversions are the SDK's, shared with the host.
using sdk::BFloat16ToFloat;
using sdk::FloatToBFloat16;
using sdk::FloatToHalf;
using sdk::HalfToFloat;

// Stores `v` as element `i` of a row of `type`, rounding to nearest even.
inline void StoreElement(void* row, WeightType type, int64_t i, float v) {
  switch (type) {
    case WeightType::kFloat32: static_cast<float*>(row)[i] = v; break;
    case WeightType::kFloat16: static_cast<uint16_t*>(row)[i] = FloatToHalf(v); break;
    case WeightType::kBFloat16: static_cast<uint16_t*>(row)[i] = FloatToBFloat16(v); break;
    case WeightType::kRowQuantized: break;  // rows are quantized whole (sdk::QuantizeRow)
  }
}

}  // namespace shardrec::kernel_cpu
