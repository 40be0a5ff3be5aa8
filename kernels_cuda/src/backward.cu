// Backward fused with the optimizer (launch.h, LaunchBackward), without a
// single atomic on a row:
//
//   emit (a thread per bag):  for i in ids(b):
//       keys[i] = valid ? (table << row_bits) | row : num_tables << row_bits
//       positions[i] = i;  coef[i] = (w ? w[i] : 1) / (mean ? max(len, 1) : 1)  (NONE: 1)
//       grad_offset[i] = element offset of i's gradient row (its bag's, or its own with NONE)
//   sort:  cub::DeviceRadixSort::SortPairs on key_bits bits (stable: equal
//          keys keep position order)
//   update (a warp per sorted position k that starts a run of equal keys):
//       g[0:D] = sum over the run, in position order: coef[p] * grad[grad_offset[p] + c]
//       apply the optimizer to the row once (sdk/fused_optimizer.hpp formulas)
//
// Each row is owned by one warp and summed in a fixed order, so the result
// is deterministic, independent of batch order on the GPU, and equal to the
// CPU kernel's up to float rounding of the row-wise reduction.
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

template <int32_t kType, int32_t kOptimizer>
__device__ void UpdateRow(const sdk::OptimizerStep& p, const DeviceTable& t, int64_t row,
                          const BackwardScratch& s, const DeviceMatrix& grad, int64_t k_begin,
                          int64_t k_end, int lane) {
  float g[kChunks][4];
  const bool one_pass = t.dim <= kPassColumns;
  float squares = 0.0f;
  for (int64_t c0 = 0; c0 < t.dim; c0 += kPassColumns) {
    RunGradient(s, grad, k_begin, k_end, c0, t.dim, lane, g);
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
      if (!one_pass) RunGradient(s, grad, k_begin, k_end, c0, t.dim, lane, g);
#pragma unroll
      for (int k = 0; k < kChunks; ++k) {
        const int64_t c = c0 + (static_cast<int64_t>(k) * 32 + lane) * kColumnsPerLane;
        if (c < t.dim) ApplyChunk<kType, kOptimizer>(p, t, row, c, multiplier, g[k]);
      }
    }
  }
}

template <int32_t kOptimizer>
__device__ void UpdateRowOfType(const sdk::OptimizerStep& p, const DeviceTable& t, int64_t row,
                                const BackwardScratch& s, const DeviceMatrix& grad,
                                int64_t k_begin, int64_t k_end, int lane) {
  switch (t.type) {
    case kF16: return UpdateRow<kF16, kOptimizer>(p, t, row, s, grad, k_begin, k_end, lane);
    case kBF16: return UpdateRow<kBF16, kOptimizer>(p, t, row, s, grad, k_begin, k_end, lane);
    default: return UpdateRow<kF32, kOptimizer>(p, t, row, s, grad, k_begin, k_end, lane);
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
  // The run's end: the first later position with another key, 32 at a time.
  int64_t end = n;
  for (int64_t base = k + 1; base < n; base += 32) {
    const int64_t q = base + lane;
    const unsigned other = __ballot_sync(0xffffffffu, q >= n || s.sorted_keys[q] != key);
    if (other != 0) {
      end = base + __ffs(static_cast<int>(other)) - 1;
      break;
    }
  }
  if (end > n) end = n;
  const DeviceTable& t = tables[key >> row_bits];
  const int64_t row = static_cast<int64_t>(key & ((uint64_t{1} << row_bits) - 1));
  switch (p.optimizer) {
    case SR_OPTIMIZER_SGD:
      return UpdateRowOfType<SR_OPTIMIZER_SGD>(p, t, row, s, grad, k, end, lane);
    case SR_OPTIMIZER_ADAGRAD:
      return UpdateRowOfType<SR_OPTIMIZER_ADAGRAD>(p, t, row, s, grad, k, end, lane);
    case SR_OPTIMIZER_ROWWISE_ADAGRAD:
      return UpdateRowOfType<SR_OPTIMIZER_ROWWISE_ADAGRAD>(p, t, row, s, grad, k, end, lane);
    default: return UpdateRowOfType<SR_OPTIMIZER_ADAM>(p, t, row, s, grad, k, end, lane);
  }
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
