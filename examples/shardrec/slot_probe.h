// SlotProbe: the memory-latency limit of one slot lookup per id, the base
// that `bench mc`'s figures are divided by. A gather
// `out[i] = table[hash(id[i]) & mask].row` over an array of exactly the
// slot index's size (IdIndexEntries: a power of two, 16-byte {id, row}
// entries, in the same huge pages), prefetching 64 ids ahead. A remap does
// that lookup plus its bookkeeping, so remap / probe is how much of the
// limit it reaches; both move together when the machine's speed drifts.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "shardrec/core/managed_collision/id_hash.h"  // the probe scatters ids as the slot index does
#include "shardrec/core/resources/huge_page_allocator.h"  // and lives in the same pages

namespace shardrec::cli {

class SlotProbe {
 public:
  // The index IdSlotIndex builds for `slots` ids. Every entry holds a row,
  // so no probe runs past its home.
  explicit SlotProbe(int64_t slots) : mask_(mc::IdIndexEntries(slots) - 1), entries_(mask_ + 1) {
    for (size_t b = 0; b < entries_.size(); ++b) entries_[b] = {static_cast<int64_t>(b), static_cast<int64_t>(b)};
  }
  int64_t bytes() const { return static_cast<int64_t>(entries_.size() * sizeof(Entry)); }
  // What the probe for `slots` ids holds, before it is made.
  static int64_t Bytes(int64_t slots) { return static_cast<int64_t>(mc::IdIndexEntries(slots) * sizeof(Entry)); }

  // Returns seconds; out.size() >= ids.size(). Each id's slot is prefetched
  // kAhead ids early: of the simple loops tried (no prefetch, the index's
  // groups of 16, rolling prefetch 8..256 ahead), 64 ahead was the
  // fastest, ~3x the plain loop.
  double Run(const std::vector<int64_t>& ids, std::vector<int64_t>& out) const {
    constexpr size_t kAhead = 64;
    const auto start = std::chrono::steady_clock::now();
    const size_t n = ids.size();
    for (size_t i = 0; i < n; ++i) {
      if (i + kAhead < n) __builtin_prefetch(&entries_[mc::Fmix64(static_cast<uint64_t>(ids[i + kAhead])) & mask_]);
      out[i] = entries_[mc::Fmix64(static_cast<uint64_t>(ids[i])) & mask_].row;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

 private:
  struct Entry {
    int64_t id, row;
  };
  uint64_t mask_;
  std::vector<Entry, HugePageAllocator<Entry>> entries_;
};

}  // namespace shardrec::cli
