// Device discovery and a smoke-test kernel (see device_probe.h).
#include <cuda_runtime.h>

#include "device_probe.h"
#include "shardrec/sdk/gpu_reason.hpp"

namespace shardrec::cuda {
namespace {

__global__ void WriteAnswer(int* out) { *out = 42; }

std::string Describe(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

}  // namespace

int CountDevices(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = sdk::NoGpuReason(static_cast<int>(e), Describe(e));
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  if (n == 0 && why) *why = sdk::NoGpuReason(0, "");
  return n;
}

std::string SmokeTest(int device) {
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess) return Describe(e);
  int* d = nullptr;
  if ((e = cudaMalloc(&d, sizeof(int))) != cudaSuccess) return Describe(e);
  WriteAnswer<<<1, 1>>>(d);
  int h = 0;
  e = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost);
  cudaFree(d);
  if (e != cudaSuccess) return Describe(e);
  return h == 42 ? std::string() : "smoke-test kernel wrote " + std::to_string(h);
}

}  // namespace shardrec::cuda
