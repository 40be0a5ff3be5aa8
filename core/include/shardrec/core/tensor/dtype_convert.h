// Element-type conversions between host tensors: the narrowing ones round to
// nearest-even (what PyTorch and the kernels do), the widening ones are exact.
// Used where files meet tables: a bf16 table is written to .npy as float32
// (NumPy has no bfloat16) and read back with the same rounding the kernel uses.
#pragma once

#include <bit>
#include <cstdint>
#include <string>

#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

// One element, round-to-nearest-even; NaN stays NaN.
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

// Any float dtype (float16/bfloat16/float32/float64) to float32.
StatusOr<Tensor> ToFloat32(const Tensor& t, const std::string& what);
// float32 to float16/bfloat16/float32 (a copy), rounding to nearest-even.
StatusOr<Tensor> FromFloat32(const Tensor& t, DLDataType target, const std::string& what);
// int32 or int64 to int64 (ids and lengths files may be either).
StatusOr<Tensor> ToInt64(const Tensor& t, const std::string& what);

}  // namespace shardrec
