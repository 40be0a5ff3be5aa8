// A plain scalar reference of the compute-kernel contract (kernel.h): forward
// (sum / mean / none, per-id weights, out-of-range ids treated as absent),
// backward fused with each optimizer, and the initial table. Obviously
// correct loops over std::vector data, double-precision arithmetic, no SIMD
// and no threads: the yardstick the CPU kernel's tests and the conformance
// kit compare any kernel against. Not for speed.
//
// Rounding of 16-bit weights is done here independently of any kernel (by
// scaling and nearbyint, not bit tricks), so a kernel that rounds wrongly
// disagrees with it.
#pragma once

#include <cstdint>
#include <vector>

#include <dlpack/dlpack.h>

#include "shardrec/abi/kernel.h"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec::reference {

// `v` rounded to nearest even in `t` (float32: unchanged), overflow to inf.
float RoundToDType(float v, DLDataType t);
// The 16-bit pattern of `v` in float16 / bfloat16 (rounded to nearest even).
uint16_t EncodeHalf(float v, DLDataType t);
// The value of a 16-bit float16 / bfloat16 pattern.
float DecodeHalf(uint16_t bits, DLDataType t);

// Optimizer state values per row: none 0, sgd 0, adagrad dim,
// rowwise_adagrad 1, adam 2*dim (the SDK's, which every kernel uses).
using sdk::StateDim;

struct RefOptimizer {
  int32_t optimizer = SR_OPTIMIZER_SGD;
  double learning_rate = 0.01;
  double eps = 0;  // set per optimizer by DefaultOptimizer
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0;
  double initial_accumulator_value = 0;  // adagrad / rowwise_adagrad
};
// The documented defaults of `optimizer` (eps: adagrad 1e-10, rowwise 1e-8,
// adam 1e-8).
RefOptimizer DefaultOptimizer(int32_t optimizer);

// One table: weights as float values that are exactly representable in
// `dtype`, row-major [num_rows, dim]; state float32 [num_rows, state_dim].
struct RefTable {
  int64_t num_rows = 0;
  int64_t dim = 0;
  DLDataType dtype{kDLFloat, 32, 1};
  int64_t state_dim = 0;
  std::vector<float> weights;
  std::vector<float> state;

  float& W(int64_t r, int64_t c) { return weights[static_cast<size_t>(r * dim + c)]; }
  float W(int64_t r, int64_t c) const { return weights[static_cast<size_t>(r * dim + c)]; }
  float& S(int64_t r, int64_t c) { return state[static_cast<size_t>(r * state_dim + c)]; }
};

// The table a kernel must create from `desc` with `opt`: weight (r, c) is
// sdk::InitialWeight(seed, global_row_offset + r, global_col_offset + c,
// init_min, init_max) rounded to the dtype; state is 0, or
// initial_accumulator_value for the Adagrads.
RefTable InitialTable(const sr_kernel_table& desc, const RefOptimizer& opt);

// The bags of one call, as in sr_kernel_lookup_args.
struct RefLookup {
  std::vector<int32_t> feature_table;
  std::vector<int32_t> feature_pooling;
  std::vector<int64_t> feature_bag_offsets{0};
  std::vector<int64_t> feature_output_row;
  std::vector<int64_t> feature_output_col;
  std::vector<int64_t> offsets{0};
  std::vector<int64_t> indices;
  std::vector<float> per_sample_weights;  // empty: unweighted

  size_t num_features() const { return feature_table.size(); }
  // Appends a feature whose bags have `lengths` and whose ids are `ids`
  // (concatenated), writing at (out_row, out_col). `weights` empty or one
  // per id (then every feature must have them).
  void AddFeature(int32_t table, int32_t pooling, const std::vector<int64_t>& lengths,
                  const std::vector<int64_t>& ids, int64_t out_row, int64_t out_col,
                  const std::vector<float>& weights = {});
};

// Writes every region the lookup covers into `out`, row-major with `cols`
// columns (other elements untouched). Ids outside [0, num_rows) of their
// table are absent (bounds check WARNING / IGNORE); mean still divides by
// the full bag length. Pooling NONE ignores per-id weights.
//   pooled: out[row(f, b), col(f) + c] = sum_i w_i W[id_i][c] / (mean ? max(len, 1) : 1)
//   NONE:   out[row(f, i), col(f) + c] = W[id_i][c]  (0 for an absent id)
void Forward(const std::vector<RefTable>& tables, const RefLookup& lookup, std::vector<float>& out,
             int64_t cols);

// One backward step fused with `opt`: per table, each row's gradient is
// summed over all its occurrences, then the row is updated once:
//   g' = g + wd * w
//   sgd:       w -= lr g'
//   adagrad:   s += g'^2;        w -= lr g' / (sqrt(s) + eps)
//   rowwise:   s += mean(g'^2);  w -= lr g' / (sqrt(s) + eps)
//   adam:      m = b1 m + (1 - b1) g';  v = b2 v + (1 - b2) g'^2
//              w -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
// The gradient of occurrence i of a pooled bag b is
// w_i * grad[row(f, b)] / (mean ? max(len, 1) : 1); with NONE it is grad[row(f, i)].
// Weights are rounded to the table's dtype after the update.
void Backward(std::vector<RefTable>& tables, const RefLookup& lookup,
              const std::vector<float>& grad, int64_t cols, const RefOptimizer& opt,
              int64_t iteration);

}  // namespace shardrec::reference
