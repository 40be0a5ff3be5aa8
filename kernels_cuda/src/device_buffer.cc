// DeviceBuffer and HostStaging (device_buffer.h) over sr_host_api.
#include "device_buffer.h"

#include <string>
#include <utility>

#include "shardrec/sdk/plugin.hpp"

namespace shardrec::kernel_cuda {
namespace {

constexpr size_t kAlignment = 256;  // cudaMalloc's, enough for any vector access

const sr_host_api& Host() {
  const sr_host_api* h = sdk::HostApi();
  if (h == nullptr || h->alloc == nullptr || h->free == nullptr) {
    throw sdk::Error(SR_FAILED_PRECONDITION,
                     "the host gave no allocator (initialize() was not called?)");
  }
  return *h;
}

}  // namespace

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    Release(nullptr);
    device_ = o.device_;
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

// Scratch grows by half again (Reserve), so a slowly growing batch does not
// reallocate on every call.
void DeviceBuffer::Grow(size_t bytes, size_t want, cudaStream_t stream, const char* what) {
  if (bytes <= bytes_ && data_ != nullptr) return;
  Release(stream);
  const sr_host_api& h = Host();
  data_ = h.alloc(h.ctx, DLDevice{kDLCUDA, device_}, want, kAlignment, stream);
  if (data_ == nullptr) {
    throw sdk::Error(SR_RESOURCE_EXHAUSTED, std::string("the host could not allocate ") +
                                                std::to_string(want) + " bytes on cuda:" +
                                                std::to_string(device_) + " for " + what);
  }
  bytes_ = want;
}

void DeviceBuffer::Release(cudaStream_t stream) {
  if (data_ == nullptr) return;
  const sr_host_api* h = sdk::HostApi();
  if (h != nullptr && h->free != nullptr) {
    h->free(h->ctx, DLDevice{kDLCUDA, device_}, data_, bytes_, stream);
  }
  data_ = nullptr;
  bytes_ = 0;
}

void HostStaging::Reserve(size_t bytes) {
  if (bytes <= bytes_ && data_ != nullptr) return;
  Release();
  const size_t want = bytes < 4096 ? 4096 : bytes + bytes / 2;
  const sr_host_api& h = Host();
  void* p = h.alloc(h.ctx, DLDevice{kDLCUDAHost, 0}, want, kAlignment, nullptr);
  if (p != nullptr) {
    data_ = static_cast<char*>(p);
    pinned_ = true;
  } else {
    pageable_.assign(want, 0);
    data_ = pageable_.data();
    pinned_ = false;
  }
  bytes_ = want;
}

void HostStaging::Release() {
  if (data_ != nullptr && pinned_) {
    const sr_host_api* h = sdk::HostApi();
    if (h != nullptr && h->free != nullptr) {
      h->free(h->ctx, DLDevice{kDLCUDAHost, 0}, data_, bytes_, nullptr);
    }
  }
  pageable_.clear();
  data_ = nullptr;
  bytes_ = 0;
  pinned_ = false;
}

}  // namespace shardrec::kernel_cuda
