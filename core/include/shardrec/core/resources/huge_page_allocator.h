// An allocator for large arrays read at random (hash indexes, per-slot
// state): blocks of 2 MiB or more are 2 MiB-aligned and advised as
// transparent huge pages (madvise MADV_HUGEPAGE), so a random read costs a
// cache miss and not also a TLB miss and a page walk. Where THP is set to
// "madvise" (Debian's default) memory is otherwise left in 4 KiB pages
// unless advised (a heap region once advised keeps the advice when malloc
// reuses it); where it is "never" the advice is ignored and the memory
// works as any other. Smaller blocks come from operator new as usual.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

namespace shardrec {

inline constexpr size_t kHugePageBytes = size_t{2} << 20;

template <typename T>
struct HugePageAllocator {
  using value_type = T;
  HugePageAllocator() = default;
  template <typename U>
  HugePageAllocator(const HugePageAllocator<U>&) noexcept {}  // NOLINT: rebinding converts implicitly

  T* allocate(size_t n) {
    if (n > static_cast<size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    const size_t bytes = n * sizeof(T);
    if (bytes < kHugePageBytes) return static_cast<T*>(::operator new(bytes, std::align_val_t{alignof(T)}));
    if (bytes > static_cast<size_t>(-1) - kHugePageBytes) throw std::bad_alloc();  // rounding up would wrap
    const size_t rounded = (bytes + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
    void* p = std::aligned_alloc(kHugePageBytes, rounded);
    if (p == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, rounded, MADV_HUGEPAGE);  // advice only: a refusal leaves ordinary pages
#endif
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) noexcept {
    if (n * sizeof(T) < kHugePageBytes) {
      ::operator delete(p, std::align_val_t{alignof(T)});
    } else {
      std::free(p);
    }
  }
  template <typename U>
  bool operator==(const HugePageAllocator<U>&) const noexcept {
    return true;
  }
};

}  // namespace shardrec
