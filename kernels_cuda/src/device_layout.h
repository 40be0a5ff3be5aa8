// Plain structs shared by the host code (g++) and the device code (nvcc) of
// the CUDA kernel: a table as the kernels see it, and one feature of a call.
// Only fixed-width fields and raw pointers, so both compilers lay them out
// alike and a call uploads them with one copy.
#pragma once

#include <cstdint>

namespace shardrec::kernel_cuda {

// How a table stores its weights. Accumulation is always float32.
// kQuantized: row-wise INT8/INT4/INT2 rows of row_bytes bytes
// (shardrec/sdk/quantized_rows.hpp), inference only.
enum WeightCode : int32_t { kF32 = 0, kF16 = 1, kBF16 = 2, kQuantized = 3 };

// One local table shard in device memory: row-major [num_rows, dim] weights
// of `type`, row-major [num_rows, state_dim] float32 optimizer state.
struct DeviceTable {
  void* weights = nullptr;
  float* state = nullptr;
  int64_t num_rows = 0;
  int64_t dim = 0;
  int64_t state_dim = 0;
  int32_t type = kF32;
  float state_init = 0;  // every state value after create / reset
  double init_min = 0;
  double init_max = 0;
  uint64_t init_seed = 0;
  int64_t global_row_offset = 0;
  int64_t global_col_offset = 0;
  int64_t row_bytes = 0;   // bytes per weight row (every type)
  int32_t quant_bits = 0;  // kQuantized: 8, 4 or 2
  int32_t pad = 0;
};

// One feature of a lookup as the device kernels read it. Its ids start at
// offsets[bag_begin] (read on the device; the host learns it from the check
// pass).
struct DeviceFeature {
  int64_t bag_begin = 0;  // global bags [bag_begin, bag_end)
  int64_t bag_end = 0;
  int64_t out_row = 0;    // first output row and column it writes
  int64_t out_col = 0;
  int32_t table = 0;
  int32_t pooling = 0;    // SR_POOLING_*
  int32_t vector_out = 0; // 1: 16-byte aligned float4 stores into the output are safe
  int32_t pad = 0;
};

// The per-call result of the argument check on the device, copied back in
// one transfer: which offsets are bad, how many ids are out of range and
// where the first one is. Bag and position fields are INT64_MAX when none.
struct CheckResult {
  int64_t first_negative_bag = 0;  // first bag with offsets[b+1] < offsets[b]
  int64_t first_invalid_bag = 0;   // first bag holding an out-of-range id
  int64_t invalid_ids = 0;         // out-of-range ids in the call
  int64_t first_offset = 0;        // offsets[0]
  int64_t last_offset = 0;         // offsets[num_bags]
};

}  // namespace shardrec::kernel_cuda
