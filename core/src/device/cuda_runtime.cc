// cuda_runtime.h over the CUDA runtime API, or, in a build without the
// toolkit (SHARDREC_CORE_CUDA undefined), answers that say so.
#include "shardrec/core/device/cuda_runtime.h"

#include <algorithm>

#include "shardrec/sdk/gpu_reason.hpp"

#ifdef SHARDREC_CORE_CUDA
#include <cuda_runtime.h>
#endif

namespace shardrec::device {

int DeviceForRank(int rank) {
  static const int devices = CudaDeviceCount();
  return devices > 0 ? rank % devices : 0;
}

#ifdef SHARDREC_CORE_CUDA
namespace {

std::string Text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

Status Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::Ok();
  cudaGetLastError();
  return Status(e == cudaErrorMemoryAllocation ? SR_RESOURCE_EXHAUSTED : SR_INTERNAL,
                std::string(what) + " failed (" + Text(e) + ")");
}

bool Use(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return true;
  if (cudaSetDevice(device) == cudaSuccess) return true;
  cudaGetLastError();
  return false;
}

cudaStream_t S(void* stream) { return static_cast<cudaStream_t>(stream); }


}  // namespace

bool CudaBuilt() { return true; }

int CudaDeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (why) *why = sdk::NoGpuReason(e, Text(e));
    return 0;
  }
  if (n == 0 && why) *why = sdk::NoGpuReason(0, "");
  return n;
}

void* CudaAlloc(int device, size_t bytes, void* stream) {
  if (!Use(device)) return nullptr;
  void* p = nullptr;
  if (cudaMallocAsync(&p, std::max<size_t>(bytes, 1), S(stream)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void CudaFree(int device, void* ptr, void* stream) {
  if (ptr == nullptr || !Use(device)) return;
  if (cudaFreeAsync(ptr, S(stream)) != cudaSuccess) cudaGetLastError();
}

void* CudaHostAlloc(size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, std::max<size_t>(bytes, 1)) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return p;
}

void CudaHostFree(void* ptr) {
  if (ptr != nullptr && cudaFreeHost(ptr) != cudaSuccess) cudaGetLastError();
}

StatusOr<void*> CreateStream(int device) {
  SR_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
  cudaStream_t s = nullptr;
  SR_RETURN_IF_ERROR(Check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"));
  return static_cast<void*>(s);
}

void DestroyStream(int device, void* stream) {
  if (stream != nullptr && Use(device)) cudaStreamDestroy(S(stream));
}

Status CopyToDevice(int device, void* dst, const void* src, size_t bytes, void* stream) {
  SR_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
  return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, S(stream)),
               "cudaMemcpyAsync (host to device)");
}

Status CopyToHost(int device, void* dst, const void* src, size_t bytes, void* stream) {
  SR_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
  return Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, S(stream)),
               "cudaMemcpyAsync (device to host)");
}

Status Synchronize(int device, void* stream) {
  SR_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
  return Check(cudaStreamSynchronize(S(stream)), "cudaStreamSynchronize");
}

StatusOr<double> DeviceCopyBandwidth(int device, size_t bytes, int repeats) {
  SR_RETURN_IF_ERROR(Check(cudaSetDevice(device), "cudaSetDevice"));
  void* a = nullptr;
  void* b = nullptr;
  SR_RETURN_IF_ERROR(Check(cudaMalloc(&a, bytes), "cudaMalloc (copy probe)"));
  Status s = Check(cudaMalloc(&b, bytes), "cudaMalloc (copy probe)");
  cudaEvent_t start = nullptr, stop = nullptr;
  double best = 0;
  if (s.ok()) s = Check(cudaEventCreate(&start), "cudaEventCreate");
  if (s.ok()) s = Check(cudaEventCreate(&stop), "cudaEventCreate");
  if (s.ok()) s = Check(cudaMemset(a, 1, bytes), "cudaMemset");
  for (int r = 0; s.ok() && r < repeats + 1; ++r) {  // the first copy warms up
    s = Check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    if (s.ok()) s = Check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync");
    if (s.ok()) s = Check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    if (s.ok()) s = Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    if (s.ok()) s = Check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (s.ok() && r > 0 && ms > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / (ms * 1e-3));
  }
  if (start) cudaEventDestroy(start);
  if (stop) cudaEventDestroy(stop);
  cudaFree(a);
  if (b) cudaFree(b);
  if (!s.ok()) return s;
  return best;
}

#else  // no CUDA in this build

namespace {
Status NoCuda() { return Status(SR_UNAVAILABLE, "this build of shardrec has no CUDA (configure found no toolkit)"); }
}  // namespace

bool CudaBuilt() { return false; }
int CudaDeviceCount(std::string* why) {
  if (why) *why = "this build of shardrec has no CUDA";
  return 0;
}
void* CudaAlloc(int, size_t, void*) { return nullptr; }
void CudaFree(int, void*, void*) {}
void* CudaHostAlloc(size_t) { return nullptr; }
void CudaHostFree(void*) {}
StatusOr<void*> CreateStream(int) { return NoCuda(); }
void DestroyStream(int, void*) {}
Status CopyToDevice(int, void*, const void*, size_t, void*) { return NoCuda(); }
Status CopyToHost(int, void*, const void*, size_t, void*) { return NoCuda(); }
Status Synchronize(int, void*) { return NoCuda(); }
StatusOr<double> DeviceCopyBandwidth(int, size_t, int) { return NoCuda(); }

#endif

}  // namespace shardrec::device
