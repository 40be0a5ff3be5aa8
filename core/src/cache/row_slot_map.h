// RowSlotMap: row -> slot of a row cache, as one array indexed by row (-1:
// not cached). The directory's alternative to managed collision's hashed
// IdSlotIndex when the table's rows are known and few enough: 4 bytes a row
// against the index's 16 an entry at 2 to 4 entries a slot (at most half
// full, a power of two), so it is the smaller of the two once the cache
// holds a sixteenth to an eighth of the rows, and a lookup is one load with
// no probe. CacheDirectory picks whichever is smaller (cache_directory.cc).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shardrec {

class RowSlotMap {
 public:
  RowSlotMap() = default;
  // Rows [0, rows); slots below 2^31.
  explicit RowSlotMap(int64_t rows) : slots_(static_cast<size_t>(rows), -1) {}

  size_t bytes() const { return slots_.size() * sizeof(int32_t); }
  void Clear() { std::fill(slots_.begin(), slots_.end(), -1); }

  // The slot of `row` (in range), or -1.
  int64_t Find(int64_t row) const { return slots_[static_cast<size_t>(row)]; }
  // slots[i] = Find(rows[i]), each row's entry prefetched a few rows early.
  void FindMany(std::span<const int64_t> rows, int64_t* slots) const {
    constexpr size_t kAhead = 16;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (i + kAhead < rows.size()) Prefetch(rows[i + kAhead]);
      slots[i] = Find(rows[i]);
    }
  }
  [[gnu::always_inline]] void Prefetch(int64_t row) const { __builtin_prefetch(&slots_[static_cast<size_t>(row)]); }
  void Insert(int64_t row, int64_t slot) { slots_[static_cast<size_t>(row)] = static_cast<int32_t>(slot); }
  void Erase(int64_t row) { slots_[static_cast<size_t>(row)] = -1; }

 private:
  std::vector<int32_t> slots_;
};

}  // namespace shardrec
