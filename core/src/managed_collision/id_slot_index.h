// IdSlotIndex: raw id -> slot row, the hot path of managed collision.
//
// Open addressing with linear probing over a power-of-two array of
// {id, row} pairs at most half full, with backward-shift deletion (no
// tombstones, so probe lengths stay short after millions of evictions).
// Lookups run in groups: hash and prefetch a group's home buckets first,
// then probe, so the memory latency of one id hides behind the next ones.
// TorchRec searches a sorted array instead (log2(zch) dependent loads per
// id); absl/boost hash maps have no batched prefetching lookup in the
// versions Debian ships, and this table needs nothing else: fixed
// capacity, no allocation after construction, int64 keys.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "shardrec/core/managed_collision/id_hash.h"

namespace shardrec::mc {

class IdSlotIndex {
 public:
  IdSlotIndex() = default;
  // Room for `capacity` ids.
  explicit IdSlotIndex(int64_t capacity)
      : mask_(std::bit_ceil(static_cast<uint64_t>(capacity < 4 ? 8 : 2 * capacity)) - 1),
        entries_(mask_ + 1) {}

  int64_t size() const { return size_; }
  // Ids it holds before it is more than half full.
  int64_t capacity() const { return static_cast<int64_t>((mask_ + 1) / 2); }
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

  // rows[i] = Find(ids[i]), a group at a time with prefetching.
  void FindMany(std::span<const int64_t> ids, int64_t* rows) const {
    constexpr size_t kGroup = 16;
    const size_t n = ids.size();
    size_t i = 0;
    uint64_t home[kGroup];
    for (; i + kGroup <= n; i += kGroup) {
      for (size_t j = 0; j < kGroup; ++j) {
        home[j] = Home(ids[i + j]);
        __builtin_prefetch(&entries_[home[j]]);
      }
      for (size_t j = 0; j < kGroup; ++j) rows[i + j] = FindFrom(home[j], ids[i + j]);
    }
    for (; i < n; ++i) rows[i] = Find(ids[i]);
  }

  // Brings the home bucket of `id` toward the cache, for an Insert, Erase or
  // Find a few ids later.
  void Prefetch(int64_t id) const { __builtin_prefetch(&entries_[Home(id)]); }

  // Inserts an id that is not present.
  void Insert(int64_t id, int64_t row) {
    uint64_t b = Home(id);
    while (entries_[b].row >= 0) b = (b + 1) & mask_;
    entries_[b] = {id, row};
    ++size_;
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
  uint64_t Home(int64_t id) const { return Fmix64(static_cast<uint64_t>(id)) & mask_; }
  int64_t FindFrom(uint64_t b, int64_t id) const {
    for (;; b = (b + 1) & mask_) {
      const Entry& e = entries_[b];
      if (e.row < 0) return -1;
      if (e.id == id) return e.row;
    }
  }

  uint64_t mask_ = 0;
  std::vector<Entry> entries_;
  int64_t size_ = 0;
};

}  // namespace shardrec::mc
