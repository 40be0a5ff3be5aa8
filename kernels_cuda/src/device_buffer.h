// Memory of the CUDA kernel, all of it from the host's allocator callbacks
// (ABI rule 6): DeviceBuffer for tables and scratch on the GPU, and
// HostStaging for the small per-call metadata copied to and from it (pinned
// when the host can pin, so the copies are truly asynchronous; pageable
// otherwise, which is slower but equally correct).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "shardrec/abi/base.h"

namespace shardrec::kernel_cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(int device) : device_(device) {}
  // Frees on the default stream: the owner must have synchronised with the
  // device first (CudaKernel's destructor does), since the streams of
  // earlier calls may already be gone.
  ~DeviceBuffer() { Release(nullptr); }
  DeviceBuffer(DeviceBuffer&& o) noexcept { *this = std::move(o); }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  // Makes the buffer hold at least `bytes` (contents are not kept when it
  // grows; the old block is freed in `stream` order, which is safe because
  // CudaKernel synchronises a previous call's stream when the stream
  // changes). Throws
  // SR_RESOURCE_EXHAUSTED naming `what` when the host cannot allocate.
  void Reserve(size_t bytes, cudaStream_t stream, const char* what) {
    Grow(bytes, bytes + bytes / 2, stream, what);
  }
  // The same without the slack of a growing scratch buffer (tables).
  void ReserveExact(size_t bytes, cudaStream_t stream, const char* what) {
    Grow(bytes, bytes, stream, what);
  }

  void* data() const { return data_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  size_t bytes() const { return bytes_; }

 private:
  void Grow(size_t bytes, size_t want, cudaStream_t stream, const char* what);
  void Release(cudaStream_t stream);

  int device_ = 0;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class HostStaging {
 public:
  HostStaging() = default;
  ~HostStaging() { Release(); }
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // At least `bytes` of host memory (contents not kept when it grows). The
  // caller must have synchronised with every copy that used the old block.
  void Reserve(size_t bytes);
  char* data() const { return data_; }

 private:
  void Release();

  char* data_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
  std::vector<char> pageable_;
};

}  // namespace shardrec::kernel_cuda
