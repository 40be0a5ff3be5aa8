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
using sdk::CheckWritableLayout;

using sdk::MatrixView;  // a checked 2-D tensor of any element type, addressed in bytes

}  // namespace shardrec::kernel_cpu
