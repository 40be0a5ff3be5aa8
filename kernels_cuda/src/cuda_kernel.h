// The CUDA compute kernel object behind sr_kernel (docs/kernels.md, "The
// CUDA kernel"): its tables' weights and optimizer state live on one GPU in
// memory from the host's allocator; every call checks its arguments (on the
// host, then offsets and ids in one pass on the device), enqueues its work
// on the caller's stream and returns. One stream synchronisation per lookup
// call brings the check's verdict back before anything is written, so a bad
// call changes nothing, as with the CPU kernel.
//
// Thread-safety: calls on one object are serialised by a mutex (they share
// scratch buffers); different objects run concurrently.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "device_buffer.h"
#include "device_layout.h"
#include "launch.h"
#include "shardrec/plugin_api.h"
#include "shardrec/sdk/fused_optimizer.hpp"
#include "shardrec/sdk/kernel_table.hpp"
#include "shardrec/sdk/lookup.hpp"

namespace shardrec::kernel_cuda {

// Devices found at initialize() (0 with the reason when there are none).
void SetDeviceCount(int devices, std::string why);

class CudaKernel {
 public:
  explicit CudaKernel(const sr_kernel_create_args& args);
  ~CudaKernel();

  void TableInfo(int32_t table, sr_kernel_table_info* out);
  void Forward(const sr_kernel_forward_args& args);
  void Backward(const sr_kernel_backward_args& args);
  void ReadRows(const sr_kernel_rows_args& args);
  void WriteRows(const sr_kernel_rows_args& args);
  void ResetRows(const sr_kernel_rows_args& args);

 private:
  // A lookup checked on the host and on the device, its metadata uploaded.
  struct PreparedLookup {
    DeviceLookup device;
    std::vector<sdk::LookupFeature> features;  // with id ranges
    int64_t max_dim = 0;
  };
  // Checks `a` and the 2-D float32 tensor `matrix` (output or grad_output)
  // fully, uploads the call's metadata and applies the bounds-check mode.
  // Throws before anything is written.
  PreparedLookup Prepare(const sr_kernel_lookup_args* a, const DLTensor* matrix,
                         const char* matrix_name, bool disjoint, const char* call,
                         DeviceMatrix* out_matrix);
  // Throws SR_OUT_OF_RANGE naming the first id outside its table.
  [[noreturn]] void ThrowOutOfRange(const PreparedLookup& p, int64_t bag, int64_t count,
                                    cudaStream_t stream);
  const sdk::KernelTableSpec& TableAt(int32_t table, const char* call) const;
  // Rows entries: the checked device rows of `a`, first out-of-range one
  // reported as SR_OUT_OF_RANGE.
  const int64_t* CheckedRows(const sr_kernel_rows_args& a, const sdk::KernelTableSpec& t,
                             const char* call, int64_t* n);
  // Orders this call's stream after the previous call's when they differ
  // (the scratch buffers are shared between calls).
  cudaStream_t Enter(void* stream);
  void SyncOrThrow(cudaStream_t stream, const char* what);
  // Carves sort_ into the buffers of a sort of `n` pairs, plus — for a
  // backward whose widest table has `gradient_width` columns (0: a
  // write_rows sort) — per-position coefficients and gradient offsets and
  // the long runs' partial rows.
  BackwardScratch ReserveSortScratch(int64_t n, int64_t gradient_width, cudaStream_t stream);

  int device_ = 0;
  std::vector<sdk::KernelTableSpec> specs_;
  std::vector<DeviceTable> tables_;
  std::vector<DeviceBuffer> weights_, state_;
  DeviceBuffer tables_device_;
  sdk::OptimizerConfig optimizer_;
  int row_bits_ = 1;  // bits of the largest local row index
  int key_bits_ = 2;  // row_bits_ + bits of num_tables (the invalid key)

  std::mutex mutex_;
  cudaStream_t last_stream_ = nullptr;
  bool any_call_ = false;
  HostStaging staging_;          // metadata of calls that synchronise
  std::vector<char> pageable_;   // metadata of calls that do not
  DeviceBuffer meta_;     // CheckResult, features, bag starts, feature ids
  DeviceBuffer sort_;     // backward / write_rows scratch
  std::vector<size_t> order_;
};

}  // namespace shardrec::kernel_cuda
