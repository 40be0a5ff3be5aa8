// The device side of the CUDA kernel as the host code calls it: one launch
// function per pass, defined in the .cu files, each enqueued on `stream` and
// returning at once (launch errors are reported by the caller's CudaCheck on
// cudaGetLastError). Everything a pass reads lives in device memory.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "device_layout.h"
#include "shardrec/sdk/fused_optimizer.hpp"

namespace shardrec::kernel_cuda {

// Columns each lane of a forward or update group handles per step (a float4).
constexpr int kColumnsPerLane = 4;

// Occurrences of one row a single warp sums in backward; the occurrences of
// a row that appears more often in a call are summed in pieces of this many
// sorted positions by several warps, then the pieces in order.
constexpr int64_t kLongRunOccurrences = 256;

// Partial gradient rows a backward of `n` occurrences needs (two per chunk
// of kLongRunOccurrences sorted positions).
constexpr int64_t PartialRows(int64_t n) {
  return 2 * ((n + kLongRunOccurrences - 1) / kLongRunOccurrences);
}

// One call's lookup, in device memory.
struct DeviceLookup {
  const DeviceTable* tables = nullptr;      // [num_tables]
  const DeviceFeature* features = nullptr;  // [num_features]
  const int64_t* bag_starts = nullptr;      // [num_features + 1]: bag_begin of each, then num_bags
  int32_t num_features = 0;
  int32_t skip_invalid = 0;  // ids outside [0, rows) count as absent
  const int64_t* offsets = nullptr;  // [num_bags + 1]
  const int64_t* indices = nullptr;  // [nnz]
  const float* weights = nullptr;    // [nnz] or NULL
  int64_t num_bags = 0;
  int64_t nnz = 0;
};

// A strided float32 [rows, cols] matrix in device memory.
struct DeviceMatrix {
  float* data = nullptr;
  int64_t row_stride = 0;
  int64_t col_stride = 1;
};

// Checks the offsets (negative bag lengths, the two ends) and, when
// `check_bounds`, counts the ids outside their table, into *result (whose
// bag fields the caller set to INT64_MAX and counts to 0); writes
// feature_ids[f] = offsets[bag_starts[f]] for f in [0, num_features].
void LaunchLookupCheck(const DeviceLookup& lookup, bool check_bounds, CheckResult* result,
                       int64_t* feature_ids, cudaStream_t stream);

// Pooled and sequence forward of every feature (lookup.h pseudocode), with
// `lanes` threads per bag (a power of two <= 32). `quantized`: some table
// holds quantized rows (a separate kernel, so the float tables' kernel keeps
// its register budget).
void LaunchForward(const DeviceLookup& lookup, DeviceMatrix output, int lanes, bool quantized,
                   cudaStream_t stream);

// Scratch of one backward call, sized for `nnz` occurrences.
struct BackwardScratch {
  uint64_t* keys = nullptr;         // (table << row_bits) | row, per position
  uint64_t* sorted_keys = nullptr;
  uint32_t* positions = nullptr;    // 0 .. nnz-1
  uint32_t* sorted_positions = nullptr;
  float* coef = nullptr;            // by position: w_i / (mean ? len : 1)
  int64_t* grad_offset = nullptr;   // by position: element offset of its gradient row
  float* partials = nullptr;        // [PartialRows(n)][partial_width]: long runs' pieces
  int64_t partial_width = 0;        // the widest table of the call
  void* sort_temp = nullptr;
  size_t sort_temp_bytes = 0;
};

// Bytes of CUB temporary storage a sort of `n` key/position pairs needs.
size_t SortTempBytes(int64_t n);

// Backward fused with the optimizer: emit (key, position) per occurrence,
// stable radix sort on `key_bits` bits, long runs summed in pieces, then one
// warp per distinct row sums its gradient in a fixed order and updates the
// row once.
// Invalid occurrences get the key num_tables << row_bits and are skipped.
void LaunchBackward(const DeviceLookup& lookup, int32_t num_tables, const DeviceMatrix& grad,
                    const sdk::OptimizerStep& step, int row_bits, int key_bits,
                    const BackwardScratch& scratch, cudaStream_t stream);

// Rows: `rows` are device int64 [n]. Sets *first_bad (preset to INT64_MAX)
// to the first i with rows[i] outside [0, num_rows).
void LaunchRowsCheck(const int64_t* rows, int64_t n, int64_t num_rows, int64_t* first_bad,
                     cudaStream_t stream);

// Weights as at creation and state = state_init for rows[0..n) (or rows
// 0..n-1 when rows is NULL).
void LaunchInitRows(const DeviceTable& table, const int64_t* rows, int64_t n,
                    cudaStream_t stream);

// A strided [n, cols] matrix of `element_bytes` elements in device memory.
struct DeviceRows {
  char* data = nullptr;
  int64_t row_stride = 0;  // in elements
  int64_t col_stride = 1;
  int element_bytes = 4;
};

// out[i, :] = table block row rows[i] (a block is [num_rows, cols] of
// element_bytes, contiguous: the weights or the state).
void LaunchGatherRows(const void* block, int64_t cols, const int64_t* rows, int64_t n,
                      DeviceRows out, cudaStream_t stream);

// block row keys[k] = in[positions[k], :] for the last k of each run of
// equal keys (keys sorted, positions ascending within a run: the last
// duplicate in the caller's order wins).
void LaunchScatterRows(void* block, int64_t cols, const uint64_t* keys,
                       const uint32_t* positions, int64_t n, DeviceRows in,
                       cudaStream_t stream);

// keys[i] = rows[i], positions[i] = i, then the stable sort of those pairs
// on `key_bits` bits into sorted_keys / sorted_positions.
void LaunchSortRows(const int64_t* rows, int64_t n, int key_bits, const BackwardScratch& scratch,
                    cudaStream_t stream);

}  // namespace shardrec::kernel_cuda
