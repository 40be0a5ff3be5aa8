// Owning storage for one table's weights or optimizer state. Big blocks are
// 2 MiB-aligned and advised as transparent huge pages: embedding lookups are
// random row gathers, and with 4 KiB pages almost every row also misses the
// TLB (research/baselines §1b: THP plus prefetch gave 1.3-2.5x on gathers).
#pragma once

#include <cstddef>
#include <cstdint>

#include "shardrec/abi/base.h"

namespace shardrec::kernel_cpu {

// Tables at least this big are 2 MiB-aligned and madvise(MADV_HUGEPAGE)d.
inline constexpr size_t kHugePageBytes = size_t{2} << 20;

class TableMemory {
 public:
  TableMemory() = default;
  // Allocates `bytes` (uninitialised) through the host's allocator when it
  // has one (so the host can account for it), else aligned_alloc. Throws
  // sdk::Error(SR_RESOURCE_EXHAUSTED) naming `what` when it cannot.
  TableMemory(size_t bytes, bool huge_pages, const char* what);
  TableMemory(TableMemory&& o) noexcept;
  TableMemory& operator=(TableMemory&& o) noexcept;
  TableMemory(const TableMemory&) = delete;
  TableMemory& operator=(const TableMemory&) = delete;
  ~TableMemory();

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void Release() noexcept;

  void* data_ = nullptr;
  size_t bytes_ = 0;
  const sr_host_api* host_ = nullptr;  // allocator that owns data_, or NULL
};

}  // namespace shardrec::kernel_cpu
