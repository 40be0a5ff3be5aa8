// Device helpers shared by the CUDA passes: loads and stores of weight
// elements in fp32 / fp16 / bf16 (stores round to nearest even, like the
// CPU kernel), four columns at a time when a row's dim is a multiple of 4
// (then one 16- or 8-byte access), the initial weight of the SDK, and the
// feature that owns a bag.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "device_layout.h"
#include "launch.h"
#include "shardrec/sdk/init.hpp"

namespace shardrec::kernel_cuda {

template <int32_t kType>
struct Element;
template <>
struct Element<kF32> {
  using type = float;
};
template <>
struct Element<kF16> {
  using type = __half;
};
template <>
struct Element<kBF16> {
  using type = __nv_bfloat16;
};
template <>
struct Element<kQuantized> {
  using type = uint8_t;  // a row of row_bytes bytes
};

template <int32_t kType>
__device__ __forceinline__ const typename Element<kType>::type* RowOf(const DeviceTable& t,
                                                                      int64_t row) {
  if constexpr (kType == kQuantized) {
    return static_cast<const uint8_t*>(t.weights) + row * t.row_bytes;
  } else {
    return static_cast<const typename Element<kType>::type*>(t.weights) + row * t.dim;
  }
}
template <int32_t kType>
__device__ __forceinline__ typename Element<kType>::type* MutableRowOf(const DeviceTable& t,
                                                                       int64_t row) {
  return static_cast<typename Element<kType>::type*>(t.weights) + row * t.dim;
}

__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) { return __bfloat162float(v); }

template <int32_t kType>
__device__ __forceinline__ typename Element<kType>::type FromFloat(float v) {
  if constexpr (kType == kF16) {
    return __float2half_rn(v);
  } else if constexpr (kType == kBF16) {
    return __float2bfloat16_rn(v);
  } else {
    return v;
  }
}

// Columns [c, c + 4) of `row` as floats; columns at or past `dim` read 0.
// `vec` (dim % 4 == 0, so every row starts 4-element aligned) takes one
// aligned access.
template <int32_t kType>
__device__ __forceinline__ void Load4(const typename Element<kType>::type* row, int64_t c,
                                      int64_t dim, bool vec, float v[4]) {
  if (vec) {
    if constexpr (kType == kF32) {
      const float4 x = *reinterpret_cast<const float4*>(row + c);
      v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w;
    } else if constexpr (kType == kF16) {
      const uint2 raw = *reinterpret_cast<const uint2*>(row + c);
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
      v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    } else {
      const uint2 raw = *reinterpret_cast<const uint2*>(row + c);
      const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
      const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
      v[0] = a.x, v[1] = a.y, v[2] = b.x, v[3] = b.y;
    }
    return;
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = c + e < dim ? ToFloat(row[c + e]) : 0.0f;
}

// A quantized row's scale and bias ([scale fp16][bias fp16][values],
// sdk/quantized_rows.hpp); other types read as (1, 0).
template <int32_t kType>
__device__ __forceinline__ float2 ScaleBias(const typename Element<kType>::type* row) {
  if constexpr (kType == kQuantized) {
    return __half22float2(*reinterpret_cast<const __half2*>(row));
  } else {
    return make_float2(1.0f, 0.0f);
  }
}

// Columns [c, c + 4) of a quantized row, dequantized as scale * q + bias
// with one fused multiply-add, as the CPU kernel does; 0 past `dim`. c is a
// multiple of 4 and rows are 4-byte aligned, so four values in the row are
// one aligned 4-, 2- or 1-byte load unpacked by constant shifts; only the
// row's last, partial group reads value by value.
__device__ __forceinline__ void Load4Quantized(const uint8_t* row, float2 sb, int bits, int64_t c, int64_t dim,
                                               float v[4]) {
  const uint8_t* data = row + 4;
  uint32_t q[4] = {0, 0, 0, 0};
  if (c + 3 < dim) {
    if (bits == 8) {
      const uint32_t w = *reinterpret_cast<const uint32_t*>(data + c);
#pragma unroll
      for (int e = 0; e < 4; ++e) q[e] = (w >> (8 * e)) & 0xFFu;
    } else if (bits == 4) {
      const uint32_t w = *reinterpret_cast<const uint16_t*>(data + c / 2);
#pragma unroll
      for (int e = 0; e < 4; ++e) q[e] = (w >> (4 * e)) & 0xFu;
    } else {
      const uint32_t w = data[c / 4];
#pragma unroll
      for (int e = 0; e < 4; ++e) q[e] = (w >> (2 * e)) & 0x3u;
    }
  } else {
    const int per_byte = 8 / bits;
    for (int e = 0; c + e < dim; ++e) {
      const int64_t i = c + e;
      q[e] = (data[i / per_byte] >> ((i % per_byte) * bits)) & ((1u << bits) - 1u);
    }
  }
#pragma unroll
  for (int e = 0; e < 4; ++e) v[e] = c + e < dim ? __fmaf_rn(sb.x, static_cast<float>(q[e]), sb.y) : 0.0f;
}

// Columns [c, c + 4) of a row of any type as floats (0 past the dim); `sb`
// is the row's ScaleBias.
template <int32_t kType>
__device__ __forceinline__ void LoadColumns(const DeviceTable& t, const typename Element<kType>::type* row,
                                            float2 sb, int64_t c, bool vec, float v[4]) {
  if constexpr (kType == kQuantized) {
    Load4Quantized(row, sb, t.quant_bits, c, t.dim, v);
  } else {
    Load4<kType>(row, c, t.dim, vec, v);
  }
}

// Stores columns [c, min(c + 4, dim)) of `row`, rounding to nearest even.
template <int32_t kType>
__device__ __forceinline__ void Store4(typename Element<kType>::type* row, int64_t c, int64_t dim,
                                       const float v[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if (c + e < dim) row[c + e] = FromFloat<kType>(v[e]);
  }
}

// sdk::InitialWeight with every double operation rounded explicitly, so
// nvcc cannot contract it into an FMA and the GPU draws the CPU's bits.
__device__ __forceinline__ float InitialWeight(uint64_t seed, int64_t global_row,
                                               int64_t global_col, double lo, double hi) {
  const uint64_t h = sdk::Mix64(sdk::Mix64(seed ^ sdk::Mix64(static_cast<uint64_t>(global_row))) +
                                static_cast<uint64_t>(global_col));
  const double unit = __dmul_rn(static_cast<double>(h >> 11), 0x1.0p-53);
  return static_cast<float>(__dadd_rn(lo, __dmul_rn(__dadd_rn(hi, -lo), unit)));
}

// The feature owning global bag b: the last f < num_features with
// bag_starts[f] <= b (features without bags share a start with the next).
__device__ __forceinline__ int FeatureOfBag(const int64_t* bag_starts, int num_features,
                                            int64_t b) {
  int lo = 0, hi = num_features - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (bag_starts[mid] <= b) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

}  // namespace shardrec::kernel_cuda
