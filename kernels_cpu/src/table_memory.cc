// Table storage: host-allocated (or aligned_alloc'ed) blocks, 2 MiB-aligned
// and advised as huge pages when big. See table_memory.h.
#include "table_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "shardrec/sdk/plugin.hpp"

namespace shardrec::kernel_cpu {

TableMemory::TableMemory(size_t bytes, bool huge_pages, const char* what) : bytes_(bytes) {
  if (bytes == 0) return;
  const bool huge = huge_pages && bytes >= kHugePageBytes;
  const size_t alignment = huge ? kHugePageBytes : 64;
  const sr_host_api* host = sdk::HostApi();
  if (host != nullptr && host->alloc != nullptr && host->free != nullptr) {
    data_ = host->alloc(host->ctx, DLDevice{kDLCPU, 0}, bytes, alignment, nullptr);
    if (data_ != nullptr) host_ = host;
  } else {
    data_ = std::aligned_alloc(alignment, (bytes + alignment - 1) / alignment * alignment);
  }
  if (data_ == nullptr) {
    throw sdk::Error(SR_RESOURCE_EXHAUSTED, std::string("cannot allocate ") +
                                                std::to_string(bytes) + " bytes for " + what);
  }
#ifdef MADV_HUGEPAGE
  // Advice only: without THP (or with it disabled) the call fails harmlessly
  // and the table simply uses 4 KiB pages.
  if (huge) (void)madvise(data_, (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes,
                           MADV_HUGEPAGE);
#endif
}

TableMemory::TableMemory(TableMemory&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      host_(std::exchange(o.host_, nullptr)) {}

TableMemory& TableMemory::operator=(TableMemory&& o) noexcept {
  if (this != &o) {
    Release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    host_ = std::exchange(o.host_, nullptr);
  }
  return *this;
}

TableMemory::~TableMemory() { Release(); }

void TableMemory::Release() noexcept {
  if (data_ == nullptr) return;
  if (host_ != nullptr) {
    host_->free(host_->ctx, DLDevice{kDLCPU, 0}, data_, bytes_, nullptr);
  } else {
    std::free(data_);
  }
  data_ = nullptr;
}

}  // namespace shardrec::kernel_cpu
