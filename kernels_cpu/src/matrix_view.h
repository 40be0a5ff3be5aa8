// Checks for the 2-D tensors the kernel writes or whose element type the
// SDK's TensorView cannot name (fp16/bf16 weight rows): dtype, CPU device,
// shape, byte_offset, and — for tensors the kernel writes, possibly from
// several threads — strides that are non-negative and never make two
// elements share memory.
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/sdk/tensor.hpp"

namespace shardrec::kernel_cpu {

// Throws SR_INVALID_ARGUMENT naming `what` unless a tensor of this shape and
// these (element) strides is safe to write element by element in parallel.
inline void CheckWritableLayout(const char* what, int64_t rows, int64_t cols, int64_t row_stride,
                                int64_t col_stride) {
  if (rows == 0 || cols == 0) return;  // nothing is written
  const std::string strides = "[" + std::to_string(row_stride) + ", " +
                              std::to_string(col_stride) + "]";
  if ((rows > 1 && row_stride <= 0) || (cols > 1 && col_stride <= 0)) {
    throw sdk::InvalidArgument(std::string(what) + ": strides " + strides +
                               " must be positive for a written tensor");
  }
  if (rows > 1 && cols > 1) {
    const bool row_major = row_stride >= col_stride;
    const int64_t inner_extent = row_major ? cols : rows;
    const int64_t inner = row_major ? col_stride : row_stride;
    const int64_t outer = row_major ? row_stride : col_stride;
    if (outer < inner * inner_extent) {
      throw sdk::InvalidArgument(std::string(what) + ": strides " + strides +
                                 " make elements of a [" + std::to_string(rows) + ", " +
                                 std::to_string(cols) + "] tensor overlap");
    }
  }
}

// A checked 2-D CPU tensor of any element type, addressed in bytes.
class MatrixView {
 public:
  // Validates `t` (named `what`) as a [rows, cols] tensor of `dtype`.
  MatrixView(const DLTensor* t, const char* what, DLDataType dtype, int64_t rows, int64_t cols) {
    if (t == nullptr) throw sdk::InvalidArgument(std::string(what) + ": tensor is NULL");
    if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) {
      throw sdk::InvalidArgument(std::string(what) + ": expected a CPU tensor, got device type " +
                                 std::to_string(t->device.device_type));
    }
    if (!sdk::SameDType(t->dtype, dtype)) {
      throw sdk::InvalidArgument(std::string(what) + ": expected dtype " + sdk::DTypeName(dtype) +
                                 ", got " + sdk::DTypeName(t->dtype));
    }
    if (t->ndim != 2 || t->shape == nullptr || t->shape[0] != rows || t->shape[1] != cols) {
      std::string got = t->ndim >= 0 && t->shape != nullptr ? sdk::ShapeString(*t) : "invalid";
      throw sdk::InvalidArgument(std::string(what) + ": expected shape [" + std::to_string(rows) +
                                 ", " + std::to_string(cols) + "], got " + got);
    }
    element_bytes_ = (dtype.bits / 8) * dtype.lanes;
    if (t->byte_offset % element_bytes_ != 0) {
      throw sdk::InvalidArgument(std::string(what) + ": byte_offset " +
                                 std::to_string(t->byte_offset) +
                                 " is not a multiple of the element size");
    }
    if (t->data == nullptr && rows * cols > 0) {
      throw sdk::InvalidArgument(std::string(what) + ": data is NULL for a non-empty tensor");
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

}  // namespace shardrec::kernel_cpu
