// sr_host_api callbacks. They are called from plugin code through C function
// pointers, so none of them may throw.
#include "shardrec/core/host_services.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "shardrec/core/device/cuda_runtime.h"
#include "shardrec/core/version.h"

namespace shardrec {

HostServices::HostServices(int32_t min_log_level) {
  api_.struct_size = SR_STRUCT_SIZE(sr_host_api, min_log_level);
  api_.ext = nullptr;
  api_.abi_major = SR_ABI_MAJOR;
  api_.abi_minor = SR_ABI_MINOR;
  api_.host_version = kShardrecVersion;
  api_.ctx = this;
  api_.alloc = &HostServices::Alloc;
  api_.free = &HostServices::Free;
  api_.log = &HostServices::Log;
  api_.min_log_level = min_log_level;
}

void* HostServices::Alloc(void* ctx, DLDevice device, size_t bytes, size_t alignment,
                          void* stream) {
  // GPU memory (cudaMallocAsync is 256-byte aligned, more than any kernel
  // asks) and pinned host memory for staging copies.
  if (device.device_type == kDLCUDA) {
    return alignment <= 256 ? device::CudaAlloc(device.device_id, bytes, stream) : nullptr;
  }
  if (device.device_type == kDLCUDAHost) return alignment <= 4096 ? device::CudaHostAlloc(bytes) : nullptr;
  if (device.device_type != kDLCPU) return nullptr;
  if (alignment < alignof(std::max_align_t)) alignment = alignof(std::max_align_t);
  if ((alignment & (alignment - 1)) != 0) return nullptr;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded == 0 ? alignment : rounded);
  if (p == nullptr) return nullptr;
  auto* self = static_cast<HostServices*>(ctx);
  const int64_t now = self->bytes_in_use_.fetch_add(static_cast<int64_t>(bytes)) +
                      static_cast<int64_t>(bytes);
  int64_t peak = self->peak_bytes_.load();
  while (now > peak && !self->peak_bytes_.compare_exchange_weak(peak, now)) {
  }
  return p;
}

void HostServices::Free(void* ctx, DLDevice device, void* ptr, size_t bytes, void* stream) {
  if (ptr == nullptr) return;
  if (device.device_type == kDLCUDA) return device::CudaFree(device.device_id, ptr, stream);
  if (device.device_type == kDLCUDAHost) return device::CudaHostFree(ptr);
  if (device.device_type != kDLCPU) return;
  std::free(ptr);
  static_cast<HostServices*>(ctx)->bytes_in_use_.fetch_sub(static_cast<int64_t>(bytes));
}

void HostServices::Log(void* /*ctx*/, int32_t level, const char* source, const char* message) {
  try {
    const spdlog::level::level_enum lvl =
        level <= SR_LOG_TRACE   ? spdlog::level::trace
        : level == SR_LOG_DEBUG ? spdlog::level::debug
        : level == SR_LOG_INFO  ? spdlog::level::info
        : level == SR_LOG_WARN  ? spdlog::level::warn
                                : spdlog::level::err;
    spdlog::log(lvl, "[{}] {}", source ? source : "plugin", message ? message : "");
  } catch (...) {
    // A failing logger must not unwind into plugin code.
  }
}

}  // namespace shardrec
