// Forward (launch.h, LaunchForward): a group of `lanes` threads per bag, each
// lane owning 4 columns per step (one 16-byte load of an fp32 row, 8 of a
// 16-bit one; quantized rows dequantize their 4 values as they read them). The group loads up to `lanes` ids (and per-id weights) at
// once, one per lane, and broadcasts them with shuffles, so the row loads
// that follow are independent and many are in flight. Sums run in id order
// in float32: the result does not depend on scheduling.
//
//   pooled: for b: acc[0:D] = 0
//             for i in ids(b): r = indices[i]
//               if skip_invalid and r not in [0, rows): continue
//               acc += (w ? w[i] : 1) * float(W[r])
//             out[row(f, b), col(f):col(f)+D] = mean ? acc / max(len(b), 1) : acc
//   NONE:   out[row(f) + (i - first id of f)] = valid(r) ? float(W[r]) : 0
#include "launch.h"
#include "row_access.cuh"
#include "shardrec/abi/kernel.h"

namespace shardrec::kernel_cuda {
namespace {

constexpr int kThreads = 256;
// float4 accumulators per lane: a pass covers lanes * 4 * kChunks columns
// (512 with 32 lanes); wider rows take several passes over the bag.
constexpr int kChunks = 4;

// Writes columns [col, col + min(4, remaining)) of an output row (element
// (r, j) at row + j * col_stride); `vec`: col_stride 1 and 16-byte aligned.
__device__ __forceinline__ void StoreOutput(float* row, int64_t col, int64_t remaining,
                                            int64_t col_stride, bool vec, const float v[4]) {
  if (vec && remaining >= 4) {
    *reinterpret_cast<float4*>(row + col) = make_float4(v[0], v[1], v[2], v[3]);
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (e < remaining) row[(col + e) * col_stride] = v[e];
  }
}

template <int32_t kType>
__device__ void SequenceBag(const DeviceLookup& a, const DeviceMatrix& out,
                            const DeviceFeature& f, const DeviceTable& t, int64_t begin,
                            int64_t end, int lane, int lanes) {
  const bool vec = (t.dim & 3) == 0;
  const int64_t first = a.offsets[f.bag_begin];
  for (int64_t i = begin; i < end; ++i) {
    const int64_t r = a.indices[i];
    const bool valid = !a.skip_invalid || static_cast<uint64_t>(r) < static_cast<uint64_t>(t.num_rows);
    float* dst = out.data + (f.out_row + (i - first)) * out.row_stride;
    const auto* src = RowOf<kType>(t, valid ? r : 0);
    const float2 sb = valid ? ScaleBias<kType>(src) : make_float2(0.0f, 0.0f);
    for (int64_t c = static_cast<int64_t>(lane) * kColumnsPerLane; c < t.dim;
         c += static_cast<int64_t>(lanes) * kColumnsPerLane) {
      float v[4] = {0, 0, 0, 0};
      if (valid) LoadColumns<kType>(t, src, sb, c, vec, v);
      StoreOutput(dst, f.out_col + c, t.dim - c, out.col_stride, f.vector_out != 0, v);
    }
  }
}

template <int32_t kType>
__device__ void PooledBag(const DeviceLookup& a, const DeviceMatrix& out, const DeviceFeature& f,
                          const DeviceTable& t, int64_t b, int64_t begin, int64_t end, int lane,
                          int lanes, unsigned mask) {
  const bool vec = (t.dim & 3) == 0;
  const uint64_t rows = static_cast<uint64_t>(t.num_rows);
  const float divisor =
      f.pooling == SR_POOLING_MEAN ? static_cast<float>(end - begin > 1 ? end - begin : 1) : 1.0f;
  float* dst = out.data + (f.out_row + (b - f.bag_begin)) * out.row_stride;
  const int64_t pass_columns = static_cast<int64_t>(lanes) * kColumnsPerLane * kChunks;
  for (int64_t c0 = 0; c0 < t.dim; c0 += pass_columns) {
    float acc[kChunks][4] = {};
    for (int64_t base = begin; base < end; base += lanes) {
      const int64_t mine = base + lane;
      const long long my_id = mine < end ? a.indices[mine] : 0;
      const float my_w = a.weights != nullptr && mine < end ? a.weights[mine] : 1.0f;
      const int n = static_cast<int>(end - base < lanes ? end - base : lanes);
      for (int j = 0; j < n; ++j) {
        const int64_t r = __shfl_sync(mask, my_id, j, lanes);
        const float w = __shfl_sync(mask, my_w, j, lanes);
        if (a.skip_invalid && static_cast<uint64_t>(r) >= rows) continue;
        const auto* src = RowOf<kType>(t, r);
        const float2 sb = ScaleBias<kType>(src);
#pragma unroll
        for (int k = 0; k < kChunks; ++k) {
          const int64_t c = c0 + (static_cast<int64_t>(k) * lanes + lane) * kColumnsPerLane;
          if (c < t.dim) {
            float v[4];
            LoadColumns<kType>(t, src, sb, c, vec, v);
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[k][e] += w * v[e];
          }
        }
      }
    }
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      const int64_t c = c0 + (static_cast<int64_t>(k) * lanes + lane) * kColumnsPerLane;
      if (c < t.dim) {
        if (f.pooling == SR_POOLING_MEAN) {
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[k][e] = acc[k][e] / divisor;
        }
        StoreOutput(dst, f.out_col + c, t.dim - c, out.col_stride, f.vector_out != 0, acc[k]);
      }
    }
  }
}

// kQuantized: also tables of quantized rows. Compiled twice: the quantized
// path needs more registers, and one kernel for both would give the float
// tables' launches its register count (a third slower on an H200).
template <bool kQuantizedTables>
__global__ void ForwardKernel(DeviceLookup a, DeviceMatrix out, int lanes) {
  const int lane_in_warp = static_cast<int>(threadIdx.x & 31);
  const int lane = lane_in_warp & (lanes - 1);
  const unsigned mask =
      lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1) << (lane_in_warp & ~(lanes - 1));
  const int64_t b = static_cast<int64_t>(blockIdx.x) * (blockDim.x / lanes) + threadIdx.x / lanes;
  if (b >= a.num_bags) return;  // the whole group leaves together
  const DeviceFeature& f = a.features[FeatureOfBag(a.bag_starts, a.num_features, b)];
  const DeviceTable& t = a.tables[f.table];
  const int64_t begin = a.offsets[b];
  const int64_t end = a.offsets[b + 1];
  if (f.pooling == SR_POOLING_NONE) {
    if constexpr (kQuantizedTables) {
      if (t.type == kQuantized) return SequenceBag<kQuantized>(a, out, f, t, begin, end, lane, lanes);
    }
    switch (t.type) {
      case kF16: return SequenceBag<kF16>(a, out, f, t, begin, end, lane, lanes);
      case kBF16: return SequenceBag<kBF16>(a, out, f, t, begin, end, lane, lanes);
      default: return SequenceBag<kF32>(a, out, f, t, begin, end, lane, lanes);
    }
  }
  if constexpr (kQuantizedTables) {
    if (t.type == kQuantized) return PooledBag<kQuantized>(a, out, f, t, b, begin, end, lane, lanes, mask);
  }
  switch (t.type) {
    case kF16: return PooledBag<kF16>(a, out, f, t, b, begin, end, lane, lanes, mask);
    case kBF16: return PooledBag<kBF16>(a, out, f, t, b, begin, end, lane, lanes, mask);
    default: return PooledBag<kF32>(a, out, f, t, b, begin, end, lane, lanes, mask);
  }
}

}  // namespace

void LaunchForward(const DeviceLookup& lookup, DeviceMatrix output, int lanes, bool quantized,
                   cudaStream_t stream) {
  if (lookup.num_bags == 0) return;
  const int64_t bags_per_block = kThreads / lanes;
  const int64_t blocks = (lookup.num_bags + bags_per_block - 1) / bags_per_block;
  if (quantized) {
    ForwardKernel<true><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(lookup, output, lanes);
  } else {
    ForwardKernel<false><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(lookup, output, lanes);
  }
}

}  // namespace shardrec::kernel_cuda
