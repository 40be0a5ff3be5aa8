// The services the host lends every plugin (sr_host_api): memory from the
// host's allocator, and log lines routed into the host's logger (spdlog).
// One HostServices serves all plugins of a process and must outlive them.
//
// Memory: CPU memory is aligned heap memory; device memory needs a device
// allocator, which the CUDA issue adds, so until then a device request
// returns NULL (the plugin then reports RESOURCE_EXHAUSTED). Bytes in use are
// counted so reports can show what plugins hold.
#pragma once

#include <atomic>
#include <cstdint>

#include "shardrec/abi/base.h"

namespace shardrec {

class HostServices {
 public:
  // min_log_level: SR_LOG_*; plugins skip formatting below it.
  explicit HostServices(int32_t min_log_level = SR_LOG_INFO);
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  const sr_host_api* api() const { return &api_; }
  // Set before plugins are loaded; plugins may cache it at initialize().
  void set_min_log_level(int32_t level) { api_.min_log_level = level; }
  int64_t bytes_in_use() const { return bytes_in_use_.load(std::memory_order_relaxed); }
  int64_t peak_bytes() const { return peak_bytes_.load(std::memory_order_relaxed); }

 private:
  static void* Alloc(void* ctx, DLDevice device, size_t bytes, size_t alignment, void* stream);
  static void Free(void* ctx, DLDevice device, void* ptr, size_t bytes, void* stream);
  static void Log(void* ctx, int32_t level, const char* source, const char* message);

  sr_host_api api_{};
  std::atomic<int64_t> bytes_in_use_{0};
  std::atomic<int64_t> peak_bytes_{0};
};

}  // namespace shardrec
