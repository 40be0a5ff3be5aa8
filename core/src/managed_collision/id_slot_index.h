// IdSlotIndex: raw id -> slot row, the hot path of managed collision.
//
// Open addressing with linear probing over a power-of-two array of {id,
// row} pairs at most a quarter full (IdIndexEntries), in transparent huge
// pages, with backward-shift deletion (no tombstones, so probe lengths stay
// short after millions of evictions). Batched calls prefetch each id's home
// a fixed distance ahead, so a lookup finds its line in the cache and many
// misses are in flight at once: 10-12 ns a lookup at 1M ids, within ~1.2x
// of a bare hashed read of an array the index's size (bench mc's probe).
//
// Measured against the alternatives the issue named (2026-11-26, 1M ids,
// 4M lookups): Abseil's flat_hash_map (Debian 20220623) 30-35 ns a lookup,
// 29-31 ns with its own prefetch(): its control bytes and its slots are two
// lines, two misses. Buckets of four entries on one cache line, compared
// without branches (the layout a SIMD probe needs), 15-19 ns: more work per
// id than the probe it saves at a quarter full. TorchRec searches a sorted
// array (log2(zch) dependent loads per id).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardrec/core/managed_collision/id_hash.h"
#include "shardrec/core/resources/huge_page_allocator.h"

namespace shardrec::mc {

class IdSlotIndex {
 public:
  IdSlotIndex() = default;
  // Room for `capacity` ids, at most one in `spread` entries used (4: the
  // slot index; 2: the window's candidates, for which memory weighs more:
  // 2M new ids in a window would take 128 MiB at a quarter full).
  explicit IdSlotIndex(int64_t capacity, int64_t spread = 4)
      : mask_(IdIndexEntries(capacity, spread) - 1), spread_(static_cast<uint64_t>(spread)), entries_(mask_ + 1) {}

  int64_t size() const { return size_; }
  // Ids it holds before more than one in `spread` entries is used.
  int64_t capacity() const { return static_cast<int64_t>((mask_ + 1) / spread_); }
  void Clear() {
    std::fill(entries_.begin(), entries_.end(), Entry{});
    size_ = 0;
  }
  size_t bytes() const { return entries_.size() * sizeof(Entry); }

  // The row of `id`, or -1.
  int64_t Find(int64_t id) const {
    for (uint64_t b = Home(id);; b = (b + 1) & mask_) {
      const Entry& e = entries_[b];
      if (e.row < 0) return -1;
      if (e.id == id) return e.row;
    }
  }

  // rows[i] = Find(ids[i]). Each id's home is prefetched kFindAhead ids
  // early: a lookup then finds its line in the cache, and many are in
  // flight at once (was: groups of 16 hashed and prefetched together,
  // ~25% slower: each group waited for its slowest line).
  void FindMany(std::span<const int64_t> ids, int64_t* rows) const {
    const size_t n = ids.size();
    for (size_t i = 0; i < n; ++i) {
      if (i + kFindAhead < n) Prefetch(ids[i + kFindAhead]);
      rows[i] = FindFrom(Home(ids[i]), ids[i]);
    }
  }

  // Brings the home bucket of `id` toward the cache, for an Insert, Erase or
  // Find a few ids later. Always inlined: GCC 12 finds a function that only
  // prefetches free of side effects and drops the calls it did not inline
  // first (FindMany lost every prefetch that way, and ran at half speed).
  [[gnu::always_inline]] void Prefetch(int64_t id) const { __builtin_prefetch(&entries_[Home(id)]); }

  // Inserts an id that is not present.
  void Insert(int64_t id, int64_t row) {
    uint64_t b = Home(id);
    while (entries_[b].row >= 0) b = (b + 1) & mask_;
    entries_[b] = {id, row};
    ++size_;
  }

  // Erases every id of `gone` (all present), then inserts ids[i] -> rows[i]
  // (none present, none in `gone`), each home prefetched kWriteAhead early.
  // Two passes, not one interleaving erases and inserts: on bench mc
  // --stream that was 3-4% slower (2026-11-27), and the erases, which
  // shift entries back, leave shorter runs for the inserts to probe.
  void ReplaceMany(std::span<const int64_t> gone, std::span<const int64_t> ids, const int64_t* rows) {
    for (size_t i = 0; i < gone.size(); ++i) {
      if (i + kWriteAhead < gone.size()) __builtin_prefetch(&entries_[Home(gone[i + kWriteAhead])], 1);
      Erase(gone[i]);
    }
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + kWriteAhead < ids.size()) __builtin_prefetch(&entries_[Home(ids[i + kWriteAhead])], 1);
      Insert(ids[i], rows[i]);
    }
  }

  // Removes an id that is present (backward-shift deletion).
  void Erase(int64_t id) {
    uint64_t hole = Home(id);
    while (entries_[hole].id != id || entries_[hole].row < 0) hole = (hole + 1) & mask_;
    for (uint64_t b = (hole + 1) & mask_; entries_[b].row >= 0; b = (b + 1) & mask_) {
      // An entry may move into the hole when its home is not in (hole, b].
      const uint64_t h = Home(entries_[b].id);
      if (((b - h) & mask_) >= ((b - hole) & mask_)) {
        entries_[hole] = entries_[b];
        hole = b;
      }
    }
    entries_[hole] = Entry{};
    --size_;
  }

 private:
  struct Entry {
    int64_t id = 0;
    int64_t row = -1;  // -1: empty
  };
  // Measured with 1M ids in the index (this machine, 2026-11-26): lookups
  // 11-13 ns at 32 or 64 ids ahead, 15-20 ns at 4-16; erases 22-35 ns at
  // 8-16 ahead, 28-50 ns at 32 or more.
  static constexpr size_t kFindAhead = 32, kWriteAhead = 16;

  uint64_t Home(int64_t id) const { return Fmix64(static_cast<uint64_t>(id)) & mask_; }
  int64_t FindFrom(uint64_t b, int64_t id) const {
    for (;; b = (b + 1) & mask_) {
      const Entry& e = entries_[b];
      if (e.row < 0) return -1;
      if (e.id == id) return e.row;
    }
  }

  uint64_t mask_ = 0, spread_ = 4;
  std::vector<Entry, HugePageAllocator<Entry>> entries_;
  int64_t size_ = 0;
};

}  // namespace shardrec::mc
