// The forward kernels' interface: one ForwardJob describes a feature (its
// table, its slice of the lookup, where its output goes); ForwardBags runs
// a contiguous range of its bags on the best SIMD target of this CPU
// (Highway dynamic dispatch). RunForward spreads all features' bags over the
// kernel's task arena.
#pragma once

#include <cstdint>
#include <vector>

#include <oneapi/tbb/task_arena.h>

#include "lookup_validation.h"
#include "row_convert.h"

namespace shardrec::kernel_cpu {

struct ForwardJob {
  const void* table = nullptr;  // row-major [num_rows, dim] of `type`
  WeightType type = WeightType::kFloat32;
  sdk::RowQuantization quantization = sdk::RowQuantization::kNone;  // with kRowQuantized
  int64_t row_bytes = 0;                                            // bytes per stored row
  uint64_t num_rows = 0;
  int64_t dim = 0;
  const int64_t* offsets = nullptr;  // global, [num_bags + 1]
  const int64_t* indices = nullptr;  // global, [nnz]
  const float* weights = nullptr;    // global per-id weights, or NULL (pooled only)
  int32_t pooling = 0;               // SR_POOLING_*
  bool skip_invalid = false;         // treat ids >= num_rows (or < 0) as absent
  int64_t prefetch = 0;              // ids ahead to prefetch; 0: none
  float* out = nullptr;              // element (0, 0) of this feature's region
  int64_t out_row_stride = 0;        // in elements
  int64_t out_col_stride = 1;
  int64_t bag_first = 0;  // the feature's first bag: output row 0
  int64_t id_first = 0;   // the feature's first id: output row 0 with NONE
};

// Computes bags [bag_begin, bag_end) of job (all of one feature).
//
//   pooled: for b: acc[0:D] = 0
//             for i in [offsets[b], offsets[b+1]): r = indices[i]
//               if skip_invalid and r not in [0, rows): continue
//               acc += (weights ? weights[i] : 1) * float(W[r, 0:D])
//             out[b - bag_first, 0:D] = mean ? acc / max(len(b), 1) : acc
//   NONE:   for i in ids(bags): out[i - id_first, 0:D] = valid(r) ? float(W[r]) : 0
void ForwardBags(const ForwardJob& job, int64_t bag_begin, int64_t bag_end);
// The same over a row-wise quantized table (forward_quantized_simd.cc).
void ForwardQuantizedBags(const ForwardJob& job, int64_t bag_begin, int64_t bag_end);

// Runs every feature of `lookup` into `out` (validated) inside `arena`;
// `jobs` is scratch reused between calls.
void RunForward(const std::vector<Table>& tables, const Lookup& lookup, float* out,
                int64_t out_row_stride, int64_t out_col_stride, int64_t prefetch,
                oneapi::tbb::task_arena& arena, std::vector<ForwardJob>& jobs);

}  // namespace shardrec::kernel_cpu
