// Borrowed DLTensor views of host memory, for handing std::vector data to
// plugins. The view points into the caller's storage and its own shape
// array; it is valid while both live and the view is not moved.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include <dlpack/dlpack.h>

#include "shardrec/sdk/dtype.hpp"

namespace shardrec {

// The DLPack dtype of a C++ element type (the SDK's table, shared with plugins).
template <class T>
constexpr DLDataType DLTypeOf() {
  return sdk::DTypeOf<std::remove_cv_t<T>>();
}

// A CPU view with up to 4 dimensions: contiguous, or 2-D with a row stride.
class DLView {
 public:
  template <class T>
  DLView(T* data, std::initializer_list<int64_t> shape) {
    int i = 0;
    for (int64_t e : shape) shape_[i++] = e;
    t_.data = const_cast<std::remove_cv_t<T>*>(data);
    t_.device = {kDLCPU, 0};
    t_.ndim = i;
    t_.dtype = DLTypeOf<T>();
    t_.shape = shape_.data();
    t_.strides = nullptr;
    t_.byte_offset = 0;
  }
  // Rows [rows, cols] of `dtype`, `row_stride` elements apart (a column
  // block of packed records: e.g. a cached row's weights or its state).
  DLView(void* data, DLDataType dtype, int64_t rows, int64_t cols, int64_t row_stride) {
    shape_[0] = rows;
    shape_[1] = cols;
    strides_[0] = row_stride;
    strides_[1] = 1;
    t_.data = data;
    t_.device = {kDLCPU, 0};
    t_.ndim = 2;
    t_.dtype = dtype;
    t_.shape = shape_.data();
    t_.strides = strides_.data();
    t_.byte_offset = 0;
  }
  DLView(const DLView&) = delete;
  DLView& operator=(const DLView&) = delete;

  DLTensor* get() { return &t_; }
  const DLTensor* get() const { return &t_; }
  DLTensor* operator->() { return &t_; }

 private:
  std::array<int64_t, 4> shape_{};
  std::array<int64_t, 2> strides_{};
  DLTensor t_{};
};

}  // namespace shardrec
