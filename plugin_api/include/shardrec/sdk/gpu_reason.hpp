// shardrec plugin SDK — why no GPU can be used, in the user's terms, for
// the host and every GPU plugin alike. Without an NVIDIA driver the CUDA
// runtime answers cudaErrorInsufficientDriver ("CUDA driver version is
// insufficient for CUDA runtime version"), which reads as "update your
// driver" when the usual cause is that there is no driver, and no GPU, at
// all. This tells the two apart by trying to load the driver library.
// Header-only, no CUDA headers: the runtime's error codes are passed in.
#ifndef SHARDREC_SDK_GPU_REASON_HPP_
#define SHARDREC_SDK_GPU_REASON_HPP_

#include <dlfcn.h>

#include <string>

namespace shardrec::sdk {

// cudaError_t values (stable across CUDA releases).
inline constexpr int kCudaErrorInsufficientDriver = 35;
inline constexpr int kCudaErrorNoDevice = 100;

// `cuda_error`: what cudaGetDeviceCount returned (0 with `devices` == 0
// when it succeeded but found none); `runtime_text`: the runtime's name and
// text for it.
inline std::string NoGpuReason(int cuda_error, const std::string& runtime_text) {
  if (cuda_error == 0) return "no NVIDIA GPU found (the driver reports 0 devices)";
  if (cuda_error == kCudaErrorInsufficientDriver) {
    void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (driver == nullptr) return "no NVIDIA GPU/driver found (libcuda.so.1, the driver library, is not installed)";
    dlclose(driver);
    return "the NVIDIA driver is older than this build's CUDA runtime needs (" + runtime_text +
           "): update the driver";
  }
  if (cuda_error == kCudaErrorNoDevice) return "no NVIDIA GPU found (" + runtime_text + ")";
  return "no usable NVIDIA GPU (" + runtime_text + ")";
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_GPU_REASON_HPP_
