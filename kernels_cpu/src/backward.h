// Backward fused with the optimizer. RunBackward groups the occurrences of
// every row of every table (stable radix sort on the row, so each row's
// gradient is summed in occurrence order), then updates each unique row once
// in a parallel loop over row-aligned ranges of the sorted occurrences: no
// atomics, no Hogwild races, and the same bits for any thread count.
// UpdateRows is the per-row SIMD part, dispatched to the best target of this
// CPU.
#pragma once

#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/task_arena.h>

#include <cstdint>
#include <vector>

#include "lookup_validation.h"
#include "kernel_config.h"
#include "radix_sort.h"
#include "row_convert.h"
#include "table.h"

namespace shardrec::kernel_cpu {

// The occurrences of one table's rows in one call, sorted by row (and, for
// equal rows, by position: occurrence order).
struct SegmentJob {
  void* table = nullptr;  // row-major [rows, dim] of `type`
  WeightType type = WeightType::kFloat32;
  int64_t dim = 0;
  float* state = nullptr;  // [rows, state_dim]
  int64_t state_dim = 0;
  // Occurrence k: row keys[k] >> shift, position in indices
  // positions ? positions[k] : keys[k] & mask.
  const uint64_t* keys = nullptr;
  const uint64_t* positions = nullptr;
  int shift = 0;
  uint64_t mask = 0;
  int64_t count = 0;                     // occurrences
  const int64_t* grad_offset = nullptr;  // by position: element offset in grad
  const float* coef = nullptr;           // by position: w_i / (mean ? len : 1)
  const float* grad = nullptr;           // grad_output
  int64_t grad_col_stride = 1;
  OptimizerStep step;
  int64_t prefetch = 0;  // occurrences ahead; 0: none

  uint64_t Row(int64_t k) const { return keys[k] >> shift; }
  uint64_t Position(int64_t k) const {
    return positions != nullptr ? positions[k] : keys[k] & mask;
  }
};

// Floats a gradient buffer for rows of `dim` must hold (padded to whole
// vectors of any target).
inline size_t GradBufferSize(int64_t dim) { return (static_cast<size_t>(dim) + 63) / 64 * 64; }

// For the occurrences [k_begin, k_end) (which start and end at row
// boundaries), each row once:
//   g[0:D] = sum over its occurrences k, in order: coef[p] * grad[grad_offset[p] + c]
//   g' = g + weight_decay * w                      (w = float(W[row]))
//   SGD:             w -= lr * g'
//   Adagrad:         s += g'^2;            w -= lr * g' / (sqrt(s) + eps)
//   row-wise:        s += mean_j(g'_j^2);  w -= lr / (sqrt(s) + eps) * g'
//   Adam:            m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2
//                    w -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
//   W[row] = round_to_nearest_even(w)
// `g` holds GradBufferSize(dim) floats.
void UpdateRows(const SegmentJob& job, int64_t k_begin, int64_t k_end, float* g);

// Bags of one feature whose occurrences one task emits.
struct EmitChunk {
  size_t feature = 0;
  int64_t bag_begin = 0;
  int64_t bag_end = 0;
  size_t count = 0;  // valid ids
  size_t base = 0;   // where its first item goes
};

// Buffers reused between calls (the kernel keeps one, under its mutex).
struct BackwardScratch {
  std::vector<int64_t> grad_offset;  // by position in indices
  std::vector<float> coef;
  std::vector<EmitChunk> chunks;
  std::vector<uint64_t> items, items_tmp;     // (row << position_bits) | position
  std::vector<RowPosition> pairs, pairs_tmp;  // when that does not fit 64 bits
  std::vector<uint64_t> sorted_rows, sorted_positions;
  std::vector<size_t> counts;
  oneapi::tbb::enumerable_thread_specific<std::vector<float>> grad_rows;
};

// Applies the gradient `grad` (laid out like forward's output) of every
// feature of `lookup` to the tables, one table after another.
void RunBackward(const std::vector<Table>& tables, const Lookup& lookup, const float* grad,
                 int64_t grad_row_stride, int64_t grad_col_stride, const OptimizerStep& step,
                 int64_t prefetch, oneapi::tbb::task_arena& arena, BackwardScratch& scratch);

}  // namespace shardrec::kernel_cpu
