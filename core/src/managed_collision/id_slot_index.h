// IdSlotIndex: raw id -> slot row, the hot path of managed collision.
//
// Open addressing with linear probing over a power-of-two array of {id,
// row} pairs, its ids at most a quarter full (IdIndexEntries; with a
// caller's marks, below, at most half: FindOrInsert doubles it), in
// transparent huge pages, with backward-shift deletion (no tombstones, so
// probe lengths stay short after millions of evictions). Batched calls
// hash each id once, a fixed distance ahead, and prefetch its home then, so
// a lookup finds its line in the cache, many misses are in flight at once,
// and no hash sits between a mispredicted probe and the next load. bench
// mc's inference remap runs at 0.72-0.79 of a bare hashed read of an array
// the index's size (its probe), against 0.38-0.41 the same hour when each
// lookup hashed its id again and the remap branched on hit or miss
// (2026-11-29; the two changes were measured together).
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
  int64_t Find(int64_t id) const { return FindAt(HashOf(id), id); }

  // rows[i]: the slot of ids[i], or kEmpty (a mark reads as kEmpty: the id
  // holds no slot). Each id's home is prefetched kFindAhead ids early: a
  // lookup then finds its line in the cache, and many are in flight at
  // once (was: groups of 16 hashed and prefetched together, ~25% slower:
  // each group waited for its slowest line).
  void FindMany(std::span<const int64_t> ids, int64_t* rows) const {
    EachHashedAhead<kFindAhead>(
        ids, [this](uint64_t hash) __attribute__((always_inline)) { PrefetchHash(hash); },
        [&](size_t i, uint64_t hash) __attribute__((always_inline)) { rows[i] = std::max(FindAt(hash, ids[i]), kEmpty); });
  }

  // Batched callers hash each id once, when they prefetch its home, and
  // pass the hash to the *At calls (Fmix64 is ~10 instructions, and a
  // second hash at the lookup was a tenth of a lookup's instructions). The
  // hash, not the home: an insert may double the index between the two.
  // A ring of the hashes computed ahead, for up to kRing ids in flight.
  static constexpr size_t kRing = 64;
  struct HashRing {
    uint64_t hash[kRing];
    uint64_t Put(size_t k, uint64_t h) { return hash[k % kRing] = h; }
    uint64_t At(size_t k) const { return hash[k % kRing]; }
  };
  static uint64_t HashOf(int64_t id) { return Fmix64(static_cast<uint64_t>(id)); }
  [[gnu::always_inline]] void PrefetchHash(uint64_t hash) const { __builtin_prefetch(&entries_[hash & mask_]); }
  // Find(id), given HashOf(id).
  int64_t FindAt(uint64_t hash, int64_t id) const { return FindFrom(hash & mask_, id); }

  // Brings the home bucket of `id` toward the cache, for an Insert, Erase or
  // Find a few ids later. Always inlined: GCC 12 finds a function that only
  // prefetches free of side effects and drops the calls it did not inline
  // first (FindMany lost every prefetch that way, and ran at half speed).
  [[gnu::always_inline]] void Prefetch(int64_t id) const { PrefetchHash(HashOf(id)); }

  // Inserts an id that is not present.
  void Insert(int64_t id, int64_t row) { InsertAt(HashOf(id), id, row); }
  // Insert(id, row), given HashOf(id).
  void InsertAt(uint64_t hash, int64_t id, int64_t row) {
    uint64_t b = hash & mask_;
    while (entries_[b].row != kEmpty) b = (b + 1) & mask_;
    entries_[b] = {id, row};
    ++size_;
  }

  // The row of `id`; if absent, inserts it with `row` and returns `row`.
  // An insert past half full first doubles the index (a window of many new
  // ids; it keeps that size), so lookups stay short. A found id costs no
  // check of the size. Always inlined, the doubling kept out of line: GCC
  // 12 called it out of line with the doubling inside, and saving and
  // restoring six registers around a lookup was ~20 of the ~130
  // instructions an id took in managed collision's lookup and count
  // (callgrind, bench mc --stream).
  [[gnu::always_inline]] int64_t FindOrInsert(int64_t id, int64_t row) { return FindOrInsertAt(HashOf(id), id, row); }
  // FindOrInsert(id, row), given HashOf(id).
  [[gnu::always_inline]] int64_t FindOrInsertAt(uint64_t hash, int64_t id, int64_t row) {
    uint64_t b = hash & mask_;
    for (;; b = (b + 1) & mask_) {
      const Entry& e = entries_[b];
      if (e.row == kEmpty) break;
      if (e.id == id) return e.row;
    }
    if (2 * (size_ + 1) > static_cast<int64_t>(mask_ + 1)) [[unlikely]] return GrowAndInsert(id, row);
    entries_[b] = {id, row};
    ++size_;
    return row;
  }

  // Gives `id` (present) the row `row`.
  void Assign(int64_t id, int64_t row) { AssignAt(HashOf(id), id, row); }
  // Assign(id, row), given HashOf(id).
  void AssignAt(uint64_t hash, int64_t id, int64_t row) { entries_[LocateFrom(hash & mask_, id)].row = row; }

  // Erases every id of `ids` (all present), each home and the entry after
  // it (the backward shift reads it; a quarter of homes end their line)
  // prefetched kEraseAhead early: 0.275 -> 0.235 s of a 3*10^7-id stream's
  // erases (2026-11-29).
  void EraseMany(std::span<const int64_t> ids) {
    EachHashedAhead<kEraseAhead>(
        ids,
        [this](uint64_t hash) __attribute__((always_inline)) {
          __builtin_prefetch(&entries_[hash & mask_], 1);
          __builtin_prefetch(&entries_[(hash + 1) & mask_], 1);
        },
        [&](size_t i, uint64_t hash) __attribute__((always_inline)) { EraseAt(hash, ids[i]); });
  }

  // Insert(ids[i], rows[i]) for each i (none present), each home
  // prefetched for writing kAssignAhead early.
  void InsertMany(std::span<const int64_t> ids, const int64_t* rows) {
    EachHashedAhead<kAssignAhead>(
        ids, [this](uint64_t hash) __attribute__((always_inline)) { __builtin_prefetch(&entries_[hash & mask_], 1); },
        [&](size_t i, uint64_t hash) __attribute__((always_inline)) { InsertAt(hash, ids[i], rows[i]); });
  }

  // Assign(ids[i], rows[i]) for each i (all present), each home prefetched
  // for writing kAssignAhead early.
  void AssignMany(std::span<const int64_t> ids, const int64_t* rows) {
    EachHashedAhead<kAssignAhead>(
        ids, [this](uint64_t hash) __attribute__((always_inline)) { __builtin_prefetch(&entries_[hash & mask_], 1); },
        [&](size_t i, uint64_t hash) __attribute__((always_inline)) { AssignAt(hash, ids[i], rows[i]); });
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
  void Erase(int64_t id) { EraseAt(HashOf(id), id); }
  // Erase(id), given HashOf(id).
  void EraseAt(uint64_t hash, int64_t id) {
    uint64_t hole = LocateFrom(hash & mask_, id);
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

  uint64_t Home(int64_t id) const { return HashOf(id) & mask_; }
  int64_t FindFrom(uint64_t b, int64_t id) const {
    for (;; b = (b + 1) & mask_) {
      const Entry& e = entries_[b];
      if (e.row == kEmpty) return kEmpty;
      if (e.id == id) return e.row;
    }
  }
  // The batched passes' pipeline: body(i, HashOf(ids[i])) for each i,
  // each id hashed kAhead ids early, when prefetch(hash) brings its home
  // toward the cache (always inlined, as Prefetch is, and so are the
  // callers' lambdas: a lambda that only prefetches would be dropped).
  template <size_t kAhead, typename PrefetchFn, typename Body>
  [[gnu::always_inline]] static void EachHashedAhead(std::span<const int64_t> ids, PrefetchFn prefetch, Body body) {
    static_assert(kAhead < kRing, "a hash is overwritten before use");
    HashRing hashes{};
    const size_t n = ids.size();
    for (size_t k = 0; k < std::min(n, kAhead); ++k) prefetch(hashes.Put(k, HashOf(ids[k])));
    for (size_t i = 0; i < n; ++i) {
      if (i + kAhead < n) prefetch(hashes.Put(i + kAhead, HashOf(ids[i + kAhead])));
      body(i, hashes.At(i));
    }
  }
  // The entry of an id that is present, from its home.
  uint64_t LocateFrom(uint64_t home, int64_t id) const {
    uint64_t b = home;
    while (entries_[b].id != id || entries_[b].row == kEmpty) b = (b + 1) & mask_;
    return b;
  }
  [[gnu::noinline, gnu::cold]] int64_t GrowAndInsert(int64_t id, int64_t row) {
    Rehash(2 * (mask_ + 1));
    Insert(id, row);
    return row;
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
