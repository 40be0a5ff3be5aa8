// shardrec plugin SDK — borrowed DLTensor checks and typed views.
// Every tensor argument is validated before a plugin touches it (dtype,
// device, rank, shape, strides, byte_offset) and a mismatch becomes an
// SR_INVALID_ARGUMENT that names the argument (ABI rule 7).
#ifndef SHARDREC_SDK_TENSOR_HPP_
#define SHARDREC_SDK_TENSOR_HPP_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
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

inline std::string DeviceName(DLDevice d) {
  switch (d.device_type) {
    case kDLCPU: return "cpu";
    case kDLCUDA: return "cuda:" + std::to_string(d.device_id);
    case kDLCUDAHost: return "cuda_host";
    default: return "device type " + std::to_string(d.device_type) + ":" + std::to_string(d.device_id);
  }
}

// A checked, strided view of a tensor of element type T with N dims, on the
// CPU (host-readable) or on one given device. Holds only pointers into the
// borrowed DLTensor; valid for the call. A device view's data() is a device
// address: use it in kernels, not in operator().
template <class T, int N>
class TensorView {
 public:
  // Validates `t` (named `what` in errors) as a CPU tensor. Each expected
  // extent may be -1 (any). Throws sdk::Error(SR_INVALID_ARGUMENT).
  TensorView(const DLTensor* t, const char* what,
             std::initializer_list<int64_t> expected = {}) {
    if (t == nullptr) throw InvalidArgument(std::string(what) + ": tensor is NULL");
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) {
      throw InvalidArgument(std::string(what) + ": expected a CPU tensor, got device type " +
                            std::to_string(t->device.device_type));
    }
    Init(t, what, expected);
  }
  // The same for a tensor that must live on `device` (a kernel's GPU).
  TensorView(const DLTensor* t, const char* what, DLDevice device,
             std::initializer_list<int64_t> expected = {}) {
    if (t == nullptr) throw InvalidArgument(std::string(what) + ": tensor is NULL");
    if (t->device.device_type != device.device_type || t->device.device_id != device.device_id) {
      throw InvalidArgument(std::string(what) + ": expected a tensor on " + DeviceName(device) +
                            ", got one on " + DeviceName(t->device));
    }
    Init(t, what, expected);
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
  void Init(const DLTensor* t, const char* what, std::initializer_list<int64_t> expected) {
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

  T* data_ = nullptr;
  int64_t shape_[N > 0 ? N : 1] = {};
  int64_t strides_[N > 0 ? N : 1] = {};
};

// The optional form, for tensors an ABI struct may leave NULL (a lookup's
// per_sample_weights): std::nullopt when `t` is NULL, else the checked
// view, e.g.
//   auto w = sdk::OptionalTensorView<const float, 1>(a.per_sample_weights, "per_sample_weights", {nnz});
//   const float weight = w ? (*w)(i) : 1.0f;
template <class T, int N>
std::optional<TensorView<T, N>> OptionalTensorView(const DLTensor* t, const char* what,
                                                   std::initializer_list<int64_t> expected = {}) {
  if (t == nullptr) return std::nullopt;
  return TensorView<T, N>(t, what, expected);
}
// The same for a tensor that must live on `device`.
template <class T, int N>
std::optional<TensorView<T, N>> OptionalTensorView(const DLTensor* t, const char* what, DLDevice device,
                                                   std::initializer_list<int64_t> expected = {}) {
  if (t == nullptr) return std::nullopt;
  return TensorView<T, N>(t, what, device, expected);
}

// A checked 2-D tensor of any element type (fp16/bf16 weight rows, which
// TensorView cannot name), addressed in bytes; on the CPU, or on `device`
// when one is given (then At() is a device address).
class MatrixView {
 public:
  // Validates `t` (named `what`) as a [rows, cols] tensor of `dtype`.
  MatrixView(const DLTensor* t, const char* what, DLDataType dtype, int64_t rows, int64_t cols,
             const DLDevice* device = nullptr) {
    if (t == nullptr) throw InvalidArgument(std::string(what) + ": tensor is NULL");
    if (device == nullptr && t->device.device_type != kDLCPU &&
        t->device.device_type != kDLCUDAHost) {
      throw InvalidArgument(std::string(what) + ": expected a CPU tensor, got device type " +
                            std::to_string(t->device.device_type));
    }
    if (device != nullptr && (t->device.device_type != device->device_type ||
                              t->device.device_id != device->device_id)) {
      throw InvalidArgument(std::string(what) + ": expected a tensor on " + DeviceName(*device) +
                            ", got one on " + DeviceName(t->device));
    }
    if (!SameDType(t->dtype, dtype)) {
      throw InvalidArgument(std::string(what) + ": expected dtype " + DTypeName(dtype) +
                                 ", got " + DTypeName(t->dtype));
    }
    if (t->ndim != 2 || t->shape == nullptr || t->shape[0] != rows || t->shape[1] != cols) {
      std::string got = t->ndim >= 0 && t->shape != nullptr ? ShapeString(*t) : "invalid";
      throw InvalidArgument(std::string(what) + ": expected shape [" + std::to_string(rows) +
                                 ", " + std::to_string(cols) + "], got " + got);
    }
    element_bytes_ = (dtype.bits / 8) * dtype.lanes;
    if (t->byte_offset % element_bytes_ != 0) {
      throw InvalidArgument(std::string(what) + ": byte_offset " +
                                 std::to_string(t->byte_offset) +
                                 " is not a multiple of the element size");
    }
    if (t->data == nullptr && rows * cols > 0) {
      throw InvalidArgument(std::string(what) + ": data is NULL for a non-empty tensor");
    }
    row_stride_ = t->strides ? t->strides[0] : cols;
    col_stride_ = t->strides ? t->strides[1] : 1;
    data_ = static_cast<char*>(t->data) + t->byte_offset;
  }

  // Address of element (r, c).
  char* At(int64_t r, int64_t c) const {
    return data_ + (r * row_stride_ + c * col_stride_) * element_bytes_;
  }
  int64_t row_stride() const { return row_stride_; }
  int64_t col_stride() const { return col_stride_; }

 private:
  char* data_ = nullptr;
  int64_t element_bytes_ = 1;
  int64_t row_stride_ = 0;
  int64_t col_stride_ = 1;
};

// A [rows, cols] tensor that a call writes must not have two elements at
// one address: positive strides, and the outer stride at least the inner
// extent. (Reads may alias: broadcasting strides of 0 are fine there.)
inline void CheckWritableLayout(const char* what, int64_t rows, int64_t cols, int64_t row_stride,
                                int64_t col_stride) {
  if (rows == 0 || cols == 0) return;  // nothing is written
  const std::string strides = "[" + std::to_string(row_stride) + ", " +
                              std::to_string(col_stride) + "]";
  if ((rows > 1 && row_stride <= 0) || (cols > 1 && col_stride <= 0)) {
    throw InvalidArgument(std::string(what) + ": strides " + strides +
                          " must be positive for a written tensor");
  }
  if (rows > 1 && cols > 1) {
    const bool row_major = row_stride >= col_stride;
    const int64_t inner_extent = row_major ? cols : rows;
    const int64_t inner = row_major ? col_stride : row_stride;
    const int64_t outer = row_major ? row_stride : col_stride;
    if (outer < inner * inner_extent) {
      throw InvalidArgument(std::string(what) + ": strides " + strides +
                            " make elements of a [" + std::to_string(rows) + ", " +
                            std::to_string(cols) + "] tensor overlap");
    }
  }
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_TENSOR_HPP_
