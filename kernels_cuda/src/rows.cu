// Row passes of the CUDA kernel (launch.h): the range check of a rows
// argument, initialisation (create and reset_rows: the SDK's initial weight
// per global (row, column), rounded to the table's dtype, and the state's
// initial value), and strided gathers and scatters for read_rows and
// write_rows. One thread per element: these move bytes, not FLOPs.
#include "launch.h"
#include "row_access.cuh"

namespace shardrec::kernel_cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t items) {
  const int64_t blocks = (items + kThreads - 1) / kThreads;
  // A grid-stride loop covers the rest of very large calls.
  return static_cast<unsigned>(blocks < (1 << 30) ? blocks : (1 << 30));
}

__global__ void RowsCheckKernel(const int64_t* rows, int64_t n, int64_t num_rows,
                                int64_t* first_bad) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (static_cast<uint64_t>(rows[i]) >= static_cast<uint64_t>(num_rows)) {
      atomicMin(reinterpret_cast<long long*>(first_bad), static_cast<long long>(i));
    }
  }
}

// A quantized table's initial rows, one thread per row: the initial
// weights drawn twice (once for the range, once to quantize), quantized as
// sdk::QuantizeRow does on the host, so both kernels start with the same
// bytes.
__global__ void InitQuantizedRowsKernel(DeviceTable t, const int64_t* rows, int64_t n) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = rows != nullptr ? rows[i] : i;
    const int64_t g = t.global_row_offset + r;
    auto weight = [&](int64_t c) {
      return InitialWeight(t.init_seed, g, t.global_col_offset + c, t.init_min, t.init_max);
    };
    float lo = weight(0), hi = lo;
    for (int64_t c = 1; c < t.dim; ++c) {
      const float w = weight(c);
      lo = fminf(lo, w);
      hi = fmaxf(hi, w);
    }
    const __half bias_h = __float2half_rn(lo);
    const float bias = __half2float(bias_h);
    const float levels = static_cast<float>((1 << t.quant_bits) - 1);
    __half scale_h = __float2half_rn(__fdiv_rn(__fsub_rn(hi, bias), levels));
    float scale = __half2float(scale_h);
    if (scale == 0.0f || isinf(__fdiv_rn(1.0f, scale))) {
      scale_h = __float2half_rn(1.0f);
      scale = 1.0f;
    }
    uint8_t* row = static_cast<uint8_t*>(t.weights) + r * t.row_bytes;
    reinterpret_cast<__half*>(row)[0] = scale_h;
    reinterpret_cast<__half*>(row)[1] = bias_h;
    // Each byte is built in a register and stored once (padding as 0): a
    // reset listing a row twice has two threads write the same bytes, which
    // a read-modify-write of shared nibbles would corrupt.
    const float inverse = __fdiv_rn(1.0f, scale);
    const int per_byte = 8 / t.quant_bits;
    for (int64_t b = 0; b + 4 < t.row_bytes; ++b) {
      uint32_t byte = 0;
      for (int e = 0; e < per_byte; ++e) {
        const int64_t c = b * per_byte + e;
        if (c >= t.dim) break;
        const float v = fminf(fmaxf(rintf(__fmul_rn(__fsub_rn(weight(c), bias), inverse)), 0.0f), levels);
        byte |= static_cast<uint32_t>(v) << (e * t.quant_bits);
      }
      row[4 + b] = static_cast<uint8_t>(byte);
    }
  }
}

template <int32_t kType>
__global__ void InitRowsKernel(DeviceTable t, const int64_t* rows, int64_t n) {
  const int64_t weight_elements = n * t.dim;
  const int64_t total = weight_elements + n * t.state_dim;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (x < weight_elements) {
      const int64_t i = x / t.dim;
      const int64_t c = x - i * t.dim;
      const int64_t r = rows != nullptr ? rows[i] : i;
      MutableRowOf<kType>(t, r)[c] = FromFloat<kType>(InitialWeight(
          t.init_seed, t.global_row_offset + r, t.global_col_offset + c, t.init_min, t.init_max));
    } else {
      const int64_t y = x - weight_elements;
      const int64_t i = y / t.state_dim;
      const int64_t c = y - i * t.state_dim;
      const int64_t r = rows != nullptr ? rows[i] : i;
      t.state[r * t.state_dim + c] = t.state_init;
    }
  }
}

__device__ __forceinline__ void CopyElement(char* dst, const char* src, int bytes) {
  if (bytes == 4) {
    *reinterpret_cast<uint32_t*>(dst) = *reinterpret_cast<const uint32_t*>(src);
  } else if (bytes == 1) {
    *dst = *src;
  } else {
    *reinterpret_cast<uint16_t*>(dst) = *reinterpret_cast<const uint16_t*>(src);
  }
}

__global__ void GatherRowsKernel(const char* block, int64_t cols, const int64_t* rows, int64_t n,
                                 DeviceRows out) {
  const int64_t total = n * cols;
  const int bytes = out.element_bytes;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t i = x / cols;
    const int64_t c = x - i * cols;
    CopyElement(out.data + (i * out.row_stride + c * out.col_stride) * bytes,
                block + (rows[i] * cols + c) * bytes, bytes);
  }
}

__global__ void ScatterRowsKernel(char* block, int64_t cols, const uint64_t* keys,
                                  const uint32_t* positions, int64_t n, DeviceRows in) {
  const int64_t total = n * cols;
  const int bytes = in.element_bytes;
  for (int64_t x = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; x < total;
       x += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t k = x / cols;
    if (k + 1 < n && keys[k + 1] == keys[k]) continue;  // a later duplicate wins
    const int64_t c = x - k * cols;
    const int64_t i = positions[k];
    CopyElement(block + (static_cast<int64_t>(keys[k]) * cols + c) * bytes,
                in.data + (i * in.row_stride + c * in.col_stride) * bytes, bytes);
  }
}

}  // namespace

void LaunchRowsCheck(const int64_t* rows, int64_t n, int64_t num_rows, int64_t* first_bad,
                     cudaStream_t stream) {
  if (n == 0) return;
  RowsCheckKernel<<<Blocks(n), kThreads, 0, stream>>>(rows, n, num_rows, first_bad);
}

void LaunchInitRows(const DeviceTable& table, const int64_t* rows, int64_t n,
                    cudaStream_t stream) {
  const int64_t total = n * (table.dim + table.state_dim);
  if (total == 0) return;
  switch (table.type) {
    case kQuantized:  // no optimizer state: inference only
      InitQuantizedRowsKernel<<<Blocks(n), kThreads, 0, stream>>>(table, rows, n);
      break;
    case kF16:
      InitRowsKernel<kF16><<<Blocks(total), kThreads, 0, stream>>>(table, rows, n);
      break;
    case kBF16:
      InitRowsKernel<kBF16><<<Blocks(total), kThreads, 0, stream>>>(table, rows, n);
      break;
    default:
      InitRowsKernel<kF32><<<Blocks(total), kThreads, 0, stream>>>(table, rows, n);
      break;
  }
}

void LaunchGatherRows(const void* block, int64_t cols, const int64_t* rows, int64_t n,
                      DeviceRows out, cudaStream_t stream) {
  if (n * cols == 0) return;
  GatherRowsKernel<<<Blocks(n * cols), kThreads, 0, stream>>>(static_cast<const char*>(block),
                                                               cols, rows, n, out);
}

void LaunchScatterRows(void* block, int64_t cols, const uint64_t* keys,
                       const uint32_t* positions, int64_t n, DeviceRows in,
                       cudaStream_t stream) {
  if (n * cols == 0) return;
  ScatterRowsKernel<<<Blocks(n * cols), kThreads, 0, stream>>>(static_cast<char*>(block), cols,
                                                                keys, positions, n, in);
}

}  // namespace shardrec::kernel_cuda
