// IdSlotIndex: raw id -> slot row, the hot path of managed collision.
//
// Open addressing with linear probing over a power-of-two array of {id,
// row} pairs, its ids at most a quarter full (IdIndexEntries; with a
// caller's marks, below, at most half: FindOrInsert doubles it), in
// transparent huge pages, with backward-shift deletion (no tombstones, so
// probe lengths stay short after millions of evictions). Batched calls
// prefetch each id's home a fixed distance ahead, so a lookup finds its
// line in the cache and many misses are in flight at once: 10-12 ns a
// lookup at 1M ids, within ~1.2x of a bare hashed read of an array the
// index's size (bench mc's probe).
// Besides slots, entries may hold a caller's marks (rows below kEmpty):
// managed collision files a window's new ids there, at the miss that
// finds them absent (FindOrInsert), while its rounds admit most of them.
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
  // An entry's row: a slot (>= 0), kEmpty, or a mark below it that a caller
  // files beside the slots (managed collision's window candidates, -2 - c:
  // a new id's miss files it while its line is in the cache, so the window
  // needs no index of its own).
  static constexpr int64_t kEmpty = -1;

  IdSlotIndex() = default;
  // Room for `capacity` ids, at most one in `spread` entries used (4: the
  // slot index; 2: an index for which memory weighs more).
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
  size_t entries() const { return entries_.size(); }

  // The row of `id` (a mark included), or kEmpty.
  int64_t Find(int64_t id) const { return FindFrom(Home(id), id); }

  // rows[i]: the slot of ids[i], or kEmpty (a mark reads as kEmpty: the id
  // holds no slot). Each id's home is prefetched kFindAhead ids early: a
  // lookup then finds its line in the cache, and many are in flight at
  // once (was: groups of 16 hashed and prefetched together, ~25% slower:
  // each group waited for its slowest line).
  void FindMany(std::span<const int64_t> ids, int64_t* rows) const {
    const size_t n = ids.size();
    for (size_t i = 0; i < n; ++i) {
      if (i + kFindAhead < n) Prefetch(ids[i + kFindAhead]);
      rows[i] = std::max(FindFrom(Home(ids[i]), ids[i]), kEmpty);
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
    while (entries_[b].row != kEmpty) b = (b + 1) & mask_;
    entries_[b] = {id, row};
    ++size_;
  }

  // The row of `id`; if absent, inserts it with `row` and returns `row`.
  // An insert past half full first doubles the index (a window of many new
  // ids; it keeps that size), so lookups stay short. A found id costs no
  // check of the size.
  int64_t FindOrInsert(int64_t id, int64_t row) {
    uint64_t b = Home(id);
    for (;; b = (b + 1) & mask_) {
      const Entry& e = entries_[b];
      if (e.row == kEmpty) break;
      if (e.id == id) return e.row;
    }
    if (2 * (size_ + 1) > static_cast<int64_t>(mask_ + 1)) {
      Rehash(2 * (mask_ + 1));
      Insert(id, row);
      return row;
    }
    entries_[b] = {id, row};
    ++size_;
    return row;
  }

  // Gives `id` (present) the row `row`.
  void Assign(int64_t id, int64_t row) { entries_[Locate(id)].row = row; }

  // Erases every id of `ids` (all present), each home and the entry after
  // it (the backward shift reads it; a quarter of homes end their line)
  // prefetched kEraseAhead early: 0.275 -> 0.235 s of a 3*10^7-id stream's
  // erases (2026-11-29).
  void EraseMany(std::span<const int64_t> ids) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + kEraseAhead < ids.size()) {
        const uint64_t home = Home(ids[i + kEraseAhead]);
        __builtin_prefetch(&entries_[home], 1);
        __builtin_prefetch(&entries_[(home + 1) & mask_], 1);
      }
      Erase(ids[i]);
    }
  }

  // Insert(ids[i], rows[i]) for each i (none present), each home
  // prefetched kAssignAhead early.
  void InsertMany(std::span<const int64_t> ids, const int64_t* rows) {
    EachHomeAhead(ids, rows, [this](int64_t id, int64_t row) { Insert(id, row); });
  }

  // Assign(ids[i], rows[i]) for each i (all present), each home prefetched
  // kAssignAhead early.
  void AssignMany(std::span<const int64_t> ids, const int64_t* rows) {
    EachHomeAhead(ids, rows, [this](int64_t id, int64_t row) { Assign(id, row); });
  }

  // Removes every entry holding a mark, in one pass over the array: each
  // run of entries between two empty ones is cleared and its other entries
  // put back from their homes, which never moves one forward or out of its
  // run. Cheaper than an Erase each once the marks are more than ~1 in 32
  // entries (a round that refuses most of millions of new ids).
  void EraseMarks() {
    const uint64_t n = mask_ + 1;
    uint64_t start = 0;
    while (entries_[start].row != kEmpty) ++start;  // never more than half full: one is near
    std::vector<Entry> run;
    for (uint64_t step = 1; step <= n;) {
      const uint64_t first = (start + step) & mask_;
      if (entries_[first].row == kEmpty) {
        ++step;
        continue;
      }
      run.clear();
      uint64_t len = 0;
      bool marked = false;
      for (uint64_t b = first; entries_[b].row != kEmpty; b = (b + 1) & mask_, ++len) {
        run.push_back(entries_[b]);
        marked = marked || entries_[b].row < kEmpty;
      }
      if (marked) {
        for (uint64_t k = 0; k < len; ++k) entries_[(first + k) & mask_] = Entry{};
        size_ -= static_cast<int64_t>(len);
        for (const Entry& e : run) {
          if (e.row >= 0) Insert(e.id, e.row);
        }
      }
      step += len;
    }
  }

  // Removes an id that is present (backward-shift deletion).
  void Erase(int64_t id) {
    uint64_t hole = Locate(id);
    for (uint64_t b = (hole + 1) & mask_; entries_[b].row != kEmpty; b = (b + 1) & mask_) {
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
    int64_t row = kEmpty;
  };
  // Measured with 1M ids in the index (2026-11-26): lookups 11-13 ns at 32
  // or 64 ids ahead, 15-20 ns at 4-16; erases 22-35 ns at 8-16 ahead, 28-50
  // ns at 32 or more. On the stream of 2026-11-29 (timers, 3*10^7 ids):
  // erases the same at 16 and 24 ahead, rewrites 0.136 s at 16, 0.123 at 32.
  static constexpr size_t kFindAhead = 32, kEraseAhead = 24, kAssignAhead = 32;

  uint64_t Home(int64_t id) const { return Fmix64(static_cast<uint64_t>(id)) & mask_; }
  int64_t FindFrom(uint64_t b, int64_t id) const {
    for (;; b = (b + 1) & mask_) {
      const Entry& e = entries_[b];
      if (e.row == kEmpty) return kEmpty;
      if (e.id == id) return e.row;
    }
  }
  // write(ids[i], rows[i]) for each i, each home prefetched for writing
  // kAssignAhead early (always inlined, as Prefetch is).
  template <typename Write>
  [[gnu::always_inline]] void EachHomeAhead(std::span<const int64_t> ids, const int64_t* rows, Write write) {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i + kAssignAhead < ids.size()) __builtin_prefetch(&entries_[Home(ids[i + kAssignAhead])], 1);
      write(ids[i], rows[i]);
    }
  }
  // The entry of an id that is present.
  uint64_t Locate(int64_t id) const {
    uint64_t b = Home(id);
    while (entries_[b].id != id || entries_[b].row == kEmpty) b = (b + 1) & mask_;
    return b;
  }
  void Rehash(uint64_t entries) {
    IdSlotIndex bigger;
    bigger.mask_ = entries - 1;
    bigger.spread_ = spread_;
    bigger.entries_.resize(entries);
    for (const Entry& e : entries_) {
      if (e.row != kEmpty) bigger.Insert(e.id, e.row);
    }
    *this = std::move(bigger);
  }

  uint64_t mask_ = 0, spread_ = 4;
  std::vector<Entry, HugePageAllocator<Entry>> entries_;
  int64_t size_ = 0;
};

}  // namespace shardrec::mc
