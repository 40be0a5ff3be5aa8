// Element-type conversions between host tensors: the narrowing ones round to
// nearest-even (what PyTorch and the kernels do), the widening ones are exact.
// Used where files meet tables: a bf16 table is written to .npy as float32
// (NumPy has no bfloat16) and read back with the same rounding the kernel uses.
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/core/tensor/tensor.h"
#include "shardrec/sdk/half.hpp"

namespace shardrec {

// One element, round-to-nearest-even; NaN stays NaN (the SDK's, so host and
// plugins round alike).
using sdk::BFloat16ToFloat;
using sdk::FloatToBFloat16;
using sdk::FloatToHalf;
using sdk::HalfToFloat;

// Any float dtype (float16/bfloat16/float32/float64) to float32.
StatusOr<Tensor> ToFloat32(const Tensor& t, const std::string& what);
// float32 to float16/bfloat16/float32 (a copy), rounding to nearest-even.
StatusOr<Tensor> FromFloat32(const Tensor& t, DLDataType target, const std::string& what);
// int32 or int64 to int64 (ids and lengths files may be either).
StatusOr<Tensor> ToInt64(const Tensor& t, const std::string& what);

}  // namespace shardrec
