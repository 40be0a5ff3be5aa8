// CUDA runtime errors as sdk::Error, and the device a call runs on.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "shardrec/sdk/status.hpp"

namespace shardrec::kernel_cuda {

inline std::string CudaText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Throws SR_RESOURCE_EXHAUSTED (out of memory) or SR_INTERNAL naming `what`.
inline void CudaCheck(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so later calls report their own
  throw sdk::Error(e == cudaErrorMemoryAllocation ? SR_RESOURCE_EXHAUSTED : SR_INTERNAL,
                   std::string(what) + " failed (" + CudaText(e) + ")");
}

// Makes `device` current for a scope and restores the caller's device after,
// so a kernel object never changes which GPU its caller's thread talks to.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) {
      cudaGetLastError();
      previous_ = -1;
    }
    if (previous_ != device) CudaCheck(cudaSetDevice(device), "cudaSetDevice");
    device_ = device;
  }
  ~DeviceGuard() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
  int device_ = 0;
};

}  // namespace shardrec::kernel_cuda
