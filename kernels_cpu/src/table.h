// One local table shard as the CPU kernel stores it: a dense row-major
// [num_rows, dim] block of weights in the table's dtype (or of quantized
// rows of bytes_per_row bytes each), and a dense [num_rows, state_dim]
// float32 block of optimizer state.
#pragma once

#include <cstdint>
#include <string>

#include "row_convert.h"
#include "shardrec/abi/base.h"
#include "shardrec/sdk/kernel_table.hpp"
#include "table_memory.h"

namespace shardrec::kernel_cpu {

// The checked descriptor (name, shape, dtype, init, global offsets, state
// dim) plus the memory.
struct Table : sdk::KernelTableSpec {
  float state_init = 0;  // value of every state element after create / reset
  TableMemory weights;
  TableMemory state;

  size_t row_bytes() const { return static_cast<size_t>(bytes_per_row); }
  void* Row(int64_t r) const {
    return static_cast<char*>(weights.data()) + static_cast<size_t>(r) * row_bytes();
  }
  float* StateRow(int64_t r) const {
    return static_cast<float*>(state.data()) + r * state_dim;
  }
};

}  // namespace shardrec::kernel_cpu
