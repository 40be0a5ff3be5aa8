// Element-type conversions (see dtype_convert.h).
#include "shardrec/core/tensor/dtype_convert.h"

namespace shardrec {

StatusOr<Tensor> ToFloat32(const Tensor& t, const std::string& what) {
  if (SameDType(t.dtype(), dtype::kFloat32)) return t.Clone();
  const bool convertible = SameDType(t.dtype(), dtype::kFloat64) || SameDType(t.dtype(), dtype::kFloat16) ||
                           SameDType(t.dtype(), dtype::kBFloat16);
  if (!convertible) {
    return InvalidArgumentError(what + ": expected a floating-point dtype, got " + DTypeName(t.dtype()));
  }
  Tensor out = Tensor::Empty(dtype::kFloat32, t.shape());
  float* dst = out.data<float>();
  const int64_t n = t.numel();
  if (SameDType(t.dtype(), dtype::kFloat64)) {
    const double* src = t.data<double>();
    for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
  } else if (SameDType(t.dtype(), dtype::kFloat16)) {
    const auto* src = static_cast<const uint16_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
  } else {  // bfloat16
    const auto* src = static_cast<const uint16_t*>(t.raw_data());
    for (int64_t i = 0; i < n; ++i) dst[i] = BFloat16ToFloat(src[i]);
  }
  return out;
}

StatusOr<Tensor> FromFloat32(const Tensor& t, DLDataType target, const std::string& what) {
  if (!SameDType(t.dtype(), dtype::kFloat32)) {
    return InvalidArgumentError(what + ": expected float32, got " + DTypeName(t.dtype()));
  }
  if (SameDType(target, dtype::kFloat32)) return t.Clone();
  const bool half = SameDType(target, dtype::kFloat16);
  if (!half && !SameDType(target, dtype::kBFloat16)) {
    return InvalidArgumentError(what + ": cannot convert float32 to " + DTypeName(target));
  }
  Tensor out = Tensor::Empty(target, t.shape());
  auto* dst = static_cast<uint16_t*>(out.raw_data());
  const float* src = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = half ? FloatToHalf(src[i]) : FloatToBFloat16(src[i]);
  return out;
}

StatusOr<Tensor> ToInt64(const Tensor& t, const std::string& what) {
  if (SameDType(t.dtype(), dtype::kInt64)) return t;
  if (!SameDType(t.dtype(), dtype::kInt32)) {
    return InvalidArgumentError(what + ": expected int64 (or int32), got " + DTypeName(t.dtype()));
  }
  Tensor out = Tensor::Empty(dtype::kInt64, t.shape());
  const int32_t* src = t.data<int32_t>();
  int64_t* dst = out.data<int64_t>();
  for (int64_t i = 0; i < t.numel(); ++i) dst[i] = src[i];
  return out;
}

}  // namespace shardrec
