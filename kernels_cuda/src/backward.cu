// Backward fused with the optimizer (launch.h, LaunchBackward), without a
// single atomic on a row:
//
//   emit (a thread per bag):  for i in ids(b):
//       keys[i] = valid ? (table << row_bits) | row : num_tables << row_bits
//       positions[i] = i;  coef[i] = (w ? w[i] : 1) / (mean ? max(len, 1) : 1)  (NONE: 1)
//       grad_offset[i] = element offset of i's gradient row (its bag's, or its own with NONE)
//   sort:  cub::DeviceRadixSort::SortPairs on key_bits bits (stable: equal
//          keys keep position order)
//   pieces (a warp per chunk of kLongRun sorted positions): the part of each
//       run longer than kLongRun that lies in the chunk is summed into a
//       partial gradient row (a hot id's thousands of occurrences are thus
//       summed by many warps, not one)
//   update (a warp per sorted position k that starts a run of equal keys):
//       g[0:D] = sum over the run, in position order: coef[p] * grad[grad_offset[p] + c]
//                (a long run: the sum of its pieces' partials, in chunk order)
//       apply the optimizer to the row once (sdk/fused_optimizer.hpp formulas)
//
// Each row is updated by one warp and every sum has a fixed order, so the
// result is deterministic and equal to the CPU kernel's up to float
// rounding (summation order, the row-wise reduction).
#include <cub/device/device_radix_sort.cuh>

#include "launch.h"
#include "row_access.cuh"
#include "shardrec/abi/kernel.h"

namespace shardrec::kernel_cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarpsPerBlock = kThreads / 32;
// float4 gradient chunks a lane keeps in registers: rows up to 512 columns
// are summed once; wider rows take passes (row-wise Adagrad then sums twice).
constexpr int kChunks = 4;
constexpr int64_t kPassColumns = 32 * kColumnsPerLane * kChunks;
// Runs longer than this are summed in pieces by several warps.
constexpr int64_t kLongRun = kLongRunOccurrences;

__global__ void EmitKernel(DeviceLookup a, uint64_t invalid_key, int row_bits, DeviceMatrix grad,
                           BackwardScratch s) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b >= a.num_bags) return;
  const DeviceFeature& f = a.features[FeatureOfBag(a.bag_starts, a.num_features, b)];
  const uint64_t rows = static_cast<uint64_t>(a.tables[f.table].num_rows);
  const int64_t begin = a.offsets[b];
  const int64_t end = a.offsets[b + 1];
  const float divisor =
      f.pooling == SR_POOLING_MEAN ? static_cast<float>(end - begin > 1 ? end - begin : 1) : 1.0f;
  const int64_t col_offset = f.out_col * grad.col_stride;
  const int64_t bag_offset = (f.out_row + (b - f.bag_begin)) * grad.row_stride + col_offset;
  const int64_t first = a.offsets[f.bag_begin];
  const uint64_t table_key = static_cast<uint64_t>(f.table) << row_bits;
  for (int64_t i = begin; i < end; ++i) {
    const uint64_t r = static_cast<uint64_t>(a.indices[i]);
    const bool valid = !a.skip_invalid || r < rows;
    s.keys[i] = valid ? (table_key | r) : invalid_key;
    s.positions[i] = static_cast<uint32_t>(i);
    if (f.pooling == SR_POOLING_NONE) {
      s.grad_offset[i] = (f.out_row + (i - first)) * grad.row_stride + col_offset;
      s.coef[i] = 1.0f;
    } else {
      s.grad_offset[i] = bag_offset;
      s.coef[i] = (a.weights != nullptr ? a.weights[i] : 1.0f) / divisor;
    }
  }
}

// g[k][e] = column c0 + (k * 32 + lane) * 4 + e of the run's summed
// gradient. The warp loads 32 occurrences' (coef, offset) at a time, one per
// lane, and broadcasts them, so every gradient load after is independent.
__device__ __forceinline__ void RunGradient(const BackwardScratch& s, const DeviceMatrix& grad,
                                            int64_t k_begin, int64_t k_end, int64_t c0,
                                            int64_t dim, int lane, float g[kChunks][4]) {
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
#pragma unroll
    for (int e = 0; e < 4; ++e) g[k][e] = 0.0f;
  }
  for (int64_t base = k_begin; base < k_end; base += 32) {
    const int64_t mine = base + lane;
    float my_coef = 0.0f;
    long long my_offset = 0;
    if (mine < k_end) {
      const uint32_t p = s.sorted_positions[mine];
      my_coef = s.coef[p];
      my_offset = s.grad_offset[p];
    }
    const int n = static_cast<int>(k_end - base < 32 ? k_end - base : 32);
    for (int j = 0; j < n; ++j) {
      const float coef = __shfl_sync(0xffffffffu, my_coef, j);
      const int64_t offset = __shfl_sync(0xffffffffu, my_offset, j);
      const float* row = grad.data + offset;
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int64_t c = c0 + (static_cast<int64_t>(k) * 32 + lane) * kColumnsPerLane;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (c + e < dim) g[k][e] += coef * row[(c + e) * grad.col_stride];
        }
      }
    }
  }
}

// The end of the run of keys[k] (the first later position with another
// key, or n) and its start, by exponential then binary search: O(log run).
__device__ int64_t RunEnd(const uint64_t* keys, int64_t n, int64_t k) {
  const uint64_t key = keys[k];
  int64_t lo = k, hi = k + 1, step = 1;  // keys[lo] == key
  while (hi < n && keys[hi] == key) {
    lo = hi;
    step *= 2;
    hi = k + step;
  }
  if (hi > n) hi = n;
  while (hi - lo > 1) {  // keys[lo] == key; hi == n or keys[hi] != key
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] == key) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return hi;
}

__device__ int64_t RunStart(const uint64_t* keys, int64_t k) {
  const uint64_t key = keys[k];
  int64_t hi = k, lo = k - 1, step = 1;  // keys[hi] == key
  while (lo >= 0 && keys[lo] == key) {
    hi = lo;
    step *= 2;
    lo = k - step;
  }
  if (lo < -1) lo = -1;
  while (hi - lo > 1) {  // keys[hi] == key; lo == -1 or keys[lo] != key
    const int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] == key) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return hi;
}

// Where a row's gradient comes from: its occurrences directly...
struct OccurrenceGradient {
  const BackwardScratch* s;
  const DeviceMatrix* grad;
  int64_t begin, end;
  __device__ void operator()(int64_t c0, int64_t dim, int lane, float g[kChunks][4]) const {
    RunGradient(*s, *grad, begin, end, c0, dim, lane, g);
  }
};

// ... or, for a long run, the partial sums of its pieces: chunk p's piece
// is in slot 0 when the run covers the chunk's first position, else (the
// run's first chunk, when the run starts inside it) in slot 1.
struct PartialGradient {
  const float* partials;  // [chunks][2][width]
  int64_t width;
  int64_t first_chunk, last_chunk;
  int first_slot;
  __device__ void operator()(int64_t c0, int64_t dim, int lane, float g[kChunks][4]) const {
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
#pragma unroll
      for (int e = 0; e < 4; ++e) g[k][e] = 0.0f;
    }
    for (int64_t p = first_chunk; p <= last_chunk; ++p) {
      const int slot = p == first_chunk ? first_slot : 0;
      const float* row = partials + (p * 2 + slot) * width;
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int64_t c = c0 + (static_cast<int64_t>(k) * 32 + lane) * kColumnsPerLane;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (c + e < dim) g[k][e] += row[c + e];
        }
      }
    }
  }
};

__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int d = 16; d > 0; d >>= 1) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// g' = g + weight_decay * w (skipped when 0, so an inf weight stays out of
// the gradient, as in the CPU kernel).
__device__ __forceinline__ float Decayed(const sdk::OptimizerStep& p, float w, float g) {
  return p.weight_decay != 0.0f ? p.weight_decay * w + g : g;
}

// Applies the optimizer to columns [c, c + 4) of the row; `multiplier` is
// row-wise Adagrad's lr / (sqrt(s) + eps).
template <int32_t kType, int32_t kOptimizer>
__device__ __forceinline__ void ApplyChunk(const sdk::OptimizerStep& p, const DeviceTable& t,
                                           int64_t row, int64_t c, float multiplier,
                                           const float g[4]) {
  auto* w_row = MutableRowOf<kType>(t, row);
  float w[4];
  Load4<kType>(w_row, c, t.dim, (t.dim & 3) == 0, w);
  float* state = t.state + row * t.state_dim;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (c + e >= t.dim) break;
    const float gd = Decayed(p, w[e], g[e]);
    if constexpr (kOptimizer == SR_OPTIMIZER_SGD) {
      w[e] = w[e] - p.learning_rate * gd;
    } else if constexpr (kOptimizer == SR_OPTIMIZER_ADAGRAD) {
      const float s = gd * gd + state[c + e];
      state[c + e] = s;
      w[e] = w[e] - p.learning_rate * (gd / (sqrtf(s) + p.eps));
    } else if constexpr (kOptimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD) {
      w[e] = w[e] - multiplier * gd;
    } else {
      float* m = state + c + e;
      float* v = state + t.dim + c + e;
      const float mn = p.one_minus_beta1 * gd + p.beta1 * *m;
      const float vn = p.one_minus_beta2 * (gd * gd) + p.beta2 * *v;
      *m = mn;
      *v = vn;
      const float denom = sqrtf(vn / p.bias_correction2) + p.eps;
      w[e] = w[e] - p.learning_rate * ((mn / p.bias_correction1) / denom);
    }
  }
  Store4<kType>(w_row, c, t.dim, w);
}

template <int32_t kType, int32_t kOptimizer, class Gradient>
__device__ void UpdateRow(const sdk::OptimizerStep& p, const DeviceTable& t, int64_t row,
                          const Gradient& gradient, int lane) {
  float g[kChunks][4];
  const bool one_pass = t.dim <= kPassColumns;
  float squares = 0.0f;
  for (int64_t c0 = 0; c0 < t.dim; c0 += kPassColumns) {
    gradient(c0, t.dim, lane, g);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int64_t c = c0 + (static_cast<int64_t>(k) * 32 + lane) * kColumnsPerLane;
      if (c >= t.dim) continue;
      if constexpr (kOptimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD) {
        float w[4];
        Load4<kType>(RowOf<kType>(t, row), c, t.dim, (t.dim & 3) == 0, w);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (c + e < t.dim) {
            const float gd = Decayed(p, w[e], g[k][e]);
            squares += gd * gd;
          }
        }
      } else {
        ApplyChunk<kType, kOptimizer>(p, t, row, c, 0.0f, g[k]);
      }
    }
  }
  if constexpr (kOptimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD) {
    float* state = t.state + row * t.state_dim;
    const float before = state[0];
    const float mean = WarpSum(squares) / static_cast<float>(t.dim);
    const float sum = before + mean;
    __syncwarp();
    if (lane == 0) state[0] = sum;
    const float multiplier = p.learning_rate / (sqrtf(sum) + p.eps);
    for (int64_t c0 = 0; c0 < t.dim; c0 += kPassColumns) {
      if (!one_pass) gradient(c0, t.dim, lane, g);
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int64_t c = c0 + (static_cast<int64_t>(k) * 32 + lane) * kColumnsPerLane;
        if (c < t.dim) ApplyChunk<kType, kOptimizer>(p, t, row, c, multiplier, g[k]);
      }
    }
  }
}

template <int32_t kOptimizer, class Gradient>
__device__ void UpdateRowOfType(const sdk::OptimizerStep& p, const DeviceTable& t, int64_t row,
                                const Gradient& gradient, int lane) {
  switch (t.type) {
    case kF16: return UpdateRow<kF16, kOptimizer>(p, t, row, gradient, lane);
    case kBF16: return UpdateRow<kBF16, kOptimizer>(p, t, row, gradient, lane);
    default: return UpdateRow<kF32, kOptimizer>(p, t, row, gradient, lane);
  }
}

template <class Gradient>
__device__ void UpdateWith(const sdk::OptimizerStep& p, const DeviceTable& t, int64_t row,
                           const Gradient& gradient, int lane) {
  switch (p.optimizer) {
    case SR_OPTIMIZER_SGD: return UpdateRowOfType<SR_OPTIMIZER_SGD>(p, t, row, gradient, lane);
    case SR_OPTIMIZER_ADAGRAD: return UpdateRowOfType<SR_OPTIMIZER_ADAGRAD>(p, t, row, gradient, lane);
    case SR_OPTIMIZER_ROWWISE_ADAGRAD:
      return UpdateRowOfType<SR_OPTIMIZER_ROWWISE_ADAGRAD>(p, t, row, gradient, lane);
    default: return UpdateRowOfType<SR_OPTIMIZER_ADAM>(p, t, row, gradient, lane);
  }
}

// A warp per chunk [c0, c1) of kLongRun sorted positions: the pieces of the
// (at most two) long runs in it — the run holding c0, and another run that
// starts inside the chunk — summed into slots 0 and 1 of its partial rows.
__global__ void PiecesKernel(const DeviceTable* tables, BackwardScratch s, DeviceMatrix grad,
                             int64_t n, uint64_t invalid_key, int row_bits) {
  const int64_t chunk = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x & 31);
  const int64_t c0 = chunk * kLongRun;
  if (c0 >= n) return;  // whole warps leave together
  const int64_t c1 = c0 + kLongRun < n ? c0 + kLongRun : n;
  float g[kChunks][4];
  auto piece = [&](int64_t begin, int64_t end, uint64_t key, int slot) {
    const int64_t dim = tables[key >> row_bits].dim;
    float* out = s.partials + (chunk * 2 + slot) * s.partial_width;
    for (int64_t col0 = 0; col0 < dim; col0 += kPassColumns) {
      RunGradient(s, grad, begin, end, col0, dim, lane, g);
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int64_t c = col0 + (static_cast<int64_t>(k) * 32 + lane) * kColumnsPerLane;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          if (c + e < dim) out[c + e] = g[k][e];
        }
      }
    }
  };
  const uint64_t first = s.sorted_keys[c0];
  if (first < invalid_key) {
    const int64_t end = RunEnd(s.sorted_keys, n, c0);
    if (end - RunStart(s.sorted_keys, c0) > kLongRun) piece(c0, end < c1 ? end : c1, first, 0);
  }
  const uint64_t last = s.sorted_keys[c1 - 1];
  if (last != first && last < invalid_key) {
    const int64_t start = RunStart(s.sorted_keys, c1 - 1);
    if (RunEnd(s.sorted_keys, n, c1 - 1) - start > kLongRun) piece(start, c1, last, 1);
  }
}

__global__ void UpdateKernel(const DeviceTable* tables, BackwardScratch s, DeviceMatrix grad,
                             sdk::OptimizerStep p, int64_t n, uint64_t invalid_key,
                             int row_bits) {
  const int64_t k = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x & 31);
  if (k >= n) return;  // whole warps leave together
  const uint64_t key = s.sorted_keys[k];
  if (key >= invalid_key || (k > 0 && s.sorted_keys[k - 1] == key)) return;
  const int64_t end = RunEnd(s.sorted_keys, n, k);
  const DeviceTable& t = tables[key >> row_bits];
  const int64_t row = static_cast<int64_t>(key & ((uint64_t{1} << row_bits) - 1));
  if (end - k <= kLongRun) {
    return UpdateWith(p, t, row, OccurrenceGradient{&s, &grad, k, end}, lane);
  }
  const int64_t first_chunk = k / kLongRun;
  const int first_slot = k == first_chunk * kLongRun ? 0 : 1;
  UpdateWith(p, t, row,
             PartialGradient{s.partials, s.partial_width, first_chunk, (end - 1) / kLongRun, first_slot},
             lane);
}

__global__ void RowKeysKernel(const int64_t* rows, int64_t n, BackwardScratch s) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  s.keys[i] = static_cast<uint64_t>(rows[i]);
  s.positions[i] = static_cast<uint32_t>(i);
}

void Sort(const BackwardScratch& s, int64_t n, int key_bits, cudaStream_t stream) {
  size_t bytes = s.sort_temp_bytes;
  cub::DeviceRadixSort::SortPairs(s.sort_temp, bytes, s.keys, s.sorted_keys, s.positions,
                                  s.sorted_positions, static_cast<int>(n), 0, key_bits, stream);
}

unsigned Blocks(int64_t items, int64_t per_block) {
  return static_cast<unsigned>((items + per_block - 1) / per_block);
}

}  // namespace

size_t SortTempBytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint64_t*>(nullptr),
                                  static_cast<uint64_t*>(nullptr),
                                  static_cast<const uint32_t*>(nullptr),
                                  static_cast<uint32_t*>(nullptr), static_cast<int>(n));
  return bytes;
}

void LaunchBackward(const DeviceLookup& lookup, int32_t num_tables, const DeviceMatrix& grad,
                    const sdk::OptimizerStep& step, int row_bits, int key_bits,
                    const BackwardScratch& scratch, cudaStream_t stream) {
  if (lookup.nnz == 0) return;
  const uint64_t invalid_key = static_cast<uint64_t>(num_tables) << row_bits;
  EmitKernel<<<Blocks(lookup.num_bags, kThreads), kThreads, 0, stream>>>(lookup, invalid_key,
                                                                          row_bits, grad, scratch);
  Sort(scratch, lookup.nnz, key_bits, stream);
  const int64_t chunks = (lookup.nnz + kLongRun - 1) / kLongRun;
  PiecesKernel<<<Blocks(chunks, kWarpsPerBlock), kThreads, 0, stream>>>(lookup.tables, scratch, grad,
                                                                         lookup.nnz, invalid_key, row_bits);
  UpdateKernel<<<Blocks(lookup.nnz, kWarpsPerBlock), kThreads, 0, stream>>>(
      lookup.tables, scratch, grad, step, lookup.nnz, invalid_key, row_bits);
}

void LaunchSortRows(const int64_t* rows, int64_t n, int key_bits, const BackwardScratch& scratch,
                    cudaStream_t stream) {
  if (n == 0) return;
  RowKeysKernel<<<Blocks(n, kThreads), kThreads, 0, stream>>>(rows, n, scratch);
  Sort(scratch, n, key_bits, stream);
}

}  // namespace shardrec::kernel_cuda
