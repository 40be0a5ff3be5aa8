// shardrec plugin SDK — borrowed DLTensor checks and typed views.
// Every tensor argument is validated before a plugin touches it (dtype,
// device, rank, shape, strides, byte_offset) and a mismatch becomes an
// SR_INVALID_ARGUMENT that names the argument (ABI rule 7).
#ifndef SHARDREC_SDK_TENSOR_HPP_
#define SHARDREC_SDK_TENSOR_HPP_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "shardrec/sdk/dtype.hpp"
#include "shardrec/sdk/status.hpp"

namespace shardrec::sdk {

inline std::string ShapeString(const DLTensor& t) {
  std::string s = "[";
  for (int i = 0; i < t.ndim; ++i) {
    if (i) s += ", ";
    s += std::to_string(t.shape[i]);
  }
  return s + "]";
}

// A checked, strided view of a CPU tensor of element type T with N dims.
// Holds only pointers into the borrowed DLTensor; valid for the call.
template <class T, int N>
class TensorView {
 public:
  // Validates `t` (named `what` in errors). Each expected extent may be -1
  // (any). Throws sdk::Error(SR_INVALID_ARGUMENT) on mismatch.
  TensorView(const DLTensor* t, const char* what,
             std::initializer_list<int64_t> expected = {}) {
    if (t == nullptr) throw InvalidArgument(std::string(what) + ": tensor is NULL");
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) {
      throw InvalidArgument(std::string(what) + ": expected a CPU tensor, got device type " +
                            std::to_string(t->device.device_type));
    }
    if (!SameDType(t->dtype, DTypeOf<std::remove_cv_t<T>>())) {
      throw InvalidArgument(std::string(what) + ": expected dtype " + DTypeName(DTypeOf<std::remove_cv_t<T>>()) +
                            ", got " + DTypeName(t->dtype));
    }
    if (t->ndim != N) {
      throw InvalidArgument(std::string(what) + ": expected " + std::to_string(N) +
                            " dimensions, got shape " + ShapeString(*t));
    }
    int i = 0;
    for (int64_t e : expected) {
      if (i < N && e >= 0 && t->shape[i] != e) {
        throw InvalidArgument(std::string(what) + ": expected extent " + std::to_string(e) +
                              " in dimension " + std::to_string(i) + ", got shape " +
                              ShapeString(*t));
      }
      ++i;
    }
    int64_t contiguous = 1;
    for (int d = N - 1; d >= 0; --d) {
      if (t->shape[d] < 0) {
        throw InvalidArgument(std::string(what) + ": negative extent in shape " + ShapeString(*t));
      }
      shape_[d] = t->shape[d];
      strides_[d] = t->strides ? t->strides[d] : contiguous;
      contiguous *= t->shape[d];
    }
    if (t->byte_offset % sizeof(T) != 0) {
      throw InvalidArgument(std::string(what) + ": byte_offset " + std::to_string(t->byte_offset) +
                            " is not a multiple of the element size");
    }
    if (t->data == nullptr && Numel() > 0) {
      throw InvalidArgument(std::string(what) + ": data is NULL for a non-empty tensor");
    }
    data_ = reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
  }

  int64_t size(int d) const { return shape_[d]; }
  int64_t stride(int d) const { return strides_[d]; }
  int64_t Numel() const {
    int64_t n = 1;
    for (int d = 0; d < N; ++d) n *= shape_[d];
    return n;
  }
  bool IsContiguous() const {
    int64_t c = 1;
    for (int d = N - 1; d >= 0; --d) {
      if (shape_[d] != 1 && strides_[d] != c) return false;
      c *= shape_[d];
    }
    return true;
  }
  T* data() const { return data_; }

  template <class... I>
  T& operator()(I... idx) const {
    static_assert(sizeof...(I) == N, "index count must equal rank");
    const int64_t ix[] = {static_cast<int64_t>(idx)...};
    int64_t off = 0;
    for (int d = 0; d < N; ++d) off += ix[d] * strides_[d];
    return data_[off];
  }

 private:
  T* data_ = nullptr;
  int64_t shape_[N > 0 ? N : 1] = {};
  int64_t strides_[N > 0 ? N : 1] = {};
};

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_TENSOR_HPP_
