// One local table shard as the CPU kernel stores it: a dense row-major
// [num_rows, dim] block of weights in the table's dtype, and a dense
// [num_rows, state_dim] float32 block of optimizer state.
#pragma once

#include <cstdint>
#include <string>

#include "row_convert.h"
#include "shardrec/abi/base.h"
#include "table_memory.h"

namespace shardrec::kernel_cpu {

struct Table {
  std::string name;
  int64_t num_rows = 0;
  int64_t dim = 0;
  WeightType type = WeightType::kFloat32;
  DLDataType dtype{kDLFloat, 32, 1};
  double init_min = 0;
  double init_max = 0;
  uint64_t init_seed = 0;
  int64_t global_row_offset = 0;
  int64_t global_col_offset = 0;
  int64_t state_dim = 0;
  float state_init = 0;  // value of every state element after create / reset
  TableMemory weights;
  TableMemory state;

  size_t row_bytes() const { return static_cast<size_t>(dim) * ElementBytes(type); }
  void* Row(int64_t r) const {
    return static_cast<char*>(weights.data()) + static_cast<size_t>(r) * row_bytes();
  }
  float* StateRow(int64_t r) const {
    return static_cast<float*>(state.data()) + r * state_dim;
  }
};

}  // namespace shardrec::kernel_cpu
