// shardrec plugin SDK — the initial value of every weight.
// sr_kernel_table promises that a shard starts with exactly the values the
// unsharded table has at the same (row, column). That only holds if every
// kernel (CPU, CUDA, third-party) draws from the same function, so the
// function is part of the SDK: a counter-based hash of (seed, global row,
// global column), uniform in [lo, hi). It needs no state and no order, so a
// kernel may fill rows in parallel, and reset_rows can redraw any row alone.
#ifndef SHARDREC_SDK_INIT_HPP_
#define SHARDREC_SDK_INIT_HPP_

#include <cstdint>

namespace shardrec::sdk {

// SplitMix64's finaliser (Steele, Lea, Flood 2014): a bijection on 64 bits
// whose output passes BigCrush when fed a counter.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The two halves of the hash below: the row's part, shared by its columns,
// and a column's weight from it (uniform in [lo, hi), as float32).
constexpr uint64_t InitialRowKey(uint64_t seed, int64_t global_row) {
  return Mix64(seed ^ Mix64(static_cast<uint64_t>(global_row)));
}
constexpr float InitialWeightFromRowKey(uint64_t row_key, int64_t global_col, double lo, double hi) {
  const uint64_t h = Mix64(row_key + static_cast<uint64_t>(global_col));
  const double unit = static_cast<double>(h >> 11) * 0x1.0p-53;  // [0, 1)
  return static_cast<float>(lo + (hi - lo) * unit);
}

// The initial weight at (global_row, global_col) of a table seeded `seed`,
// as float32; a kernel storing fp16/bf16 rounds it to nearest-even.
constexpr float InitialWeight(uint64_t seed, int64_t global_row, int64_t global_col, double lo,
                              double hi) {
  return InitialWeightFromRowKey(InitialRowKey(seed, global_row), global_col, lo, hi);
}

// InitialWeight at columns [first_col, first_col + n) of one row, into
// out[0, n): the row's part of the hash computed once (a reset of evicted
// rows redraws whole rows; per element it cost twice).
inline void InitialRowWeights(uint64_t seed, int64_t global_row, int64_t first_col, int64_t n, double lo,
                              double hi, float* out) {
  const uint64_t row_key = InitialRowKey(seed, global_row);
  for (int64_t c = 0; c < n; ++c) out[c] = InitialWeightFromRowKey(row_key, first_col + c, lo, hi);
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_INIT_HPP_
