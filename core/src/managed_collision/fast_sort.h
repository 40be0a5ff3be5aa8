// Sorts for the eviction round, which orders ~200k candidates and slots a
// round on bench mc --stream: std::sort took 13 ms of a 60 ms interval.
// Each of these uses what it sorts: slots and rows are small integers in a
// known range (a bitmap); a round's candidates share few keys (radix
// passes over the key's rank and the id's hash).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "shardrec/core/managed_collision/id_hash.h"

namespace shardrec::mc {

// Sorts [first, last), every value in [lo, lo + range), and drops repeats;
// returns the new end. With a bitmap over the range: one pass over the
// values and one over the range's words, ~6x std::sort at 200k of 1M. `bits` is scratch, kept by the caller between calls.
template <typename It>
It SortUnique(It first, It last, int64_t lo, int64_t range, std::vector<uint64_t>& bits) {
  const auto n = static_cast<uint64_t>(last - first);
  const auto words = (static_cast<uint64_t>(range) + 63) / 64;
  if (n < 64 || words > 4 * n) {  // few values in a wide range: a comparison sort is cheaper
    std::sort(first, last);
    return std::unique(first, last);
  }
  bits.assign(words, 0);
  for (It it = first; it != last; ++it) {
    const auto v = static_cast<uint64_t>(*it - lo);
    bits[v / 64] |= uint64_t{1} << (v % 64);
  }
  It out = first;
  for (uint64_t w = 0; w < words; ++w) {
    for (uint64_t word = bits[w]; word != 0; word &= word - 1) {
      *out++ = lo + static_cast<int64_t>(w * 64 + static_cast<uint64_t>(std::countr_zero(word)));
    }
  }
  return out;
}

// The order the eviction round places a key's candidates in: a bijection
// of the id, so two ids never tie, and one whose top bits are not those
// that chose the id's bucket (BucketOf scales Fmix64's top bits): within a
// bucket they would all share a prefix, and the radix passes below would
// leave long runs to the insertion pass.
inline uint64_t PlacementOrder(int64_t id) { return std::rotr(Fmix64(static_cast<uint64_t>(id)), 32); }

// Reorders `positions` (indices of elements the caller holds, each below
// 2^32) by key_of(position), the highest first, and within a key by
// PlacementOrder(id_of(position)): an order that depends on the elements
// alone, not on the order they came in. Positions, not the elements, move:
// the round's candidates are read where they are, once, after the order is
// known (sorting 40-byte records moved ~9x the bytes, and the round is
// bound by bytes moved).
//
// A round's candidates share few keys (lru: one per step of the window,
// lfu: one per count), so this is three or four radix passes over (key's
// rank, top 24 bits of PlacementOrder) and an insertion pass for the rare
// equal prefixes: ~2 ms for 200k where std::sort by (key, id) took 13.
// With more than 255 distinct keys, std::sort.
template <typename KeyOf, typename IdOf>
void OrderByKeyThenPlacement(std::vector<uint32_t>& positions, KeyOf key_of, IdOf id_of) {
  using Key = decltype(key_of(positions.front()));
  auto hash = [&](uint32_t p) { return PlacementOrder(id_of(p)); };
  auto before = [&](uint32_t a, uint32_t b) {
    const Key ka = key_of(a), kb = key_of(b);
    return ka != kb ? ka > kb : hash(a) < hash(b);
  };
  if (positions.size() < 2) return;
  constexpr size_t kMaxDistinct = 255;
  // Each element as one word: its key's rank (8 bits) and PlacementOrder's
  // top 24 bits, then its position; radix passes over the top half, their
  // counts taken in one pass. The key's place among the distinct keys: the
  // last one found is tried first (runs of one key are common); ranks are
  // filled in once every key is known.
  std::vector<Key> keys;
  // (Not set to zero first: every word of either is written before it is read.)
  const auto keyed_words = std::make_unique_for_overwrite<uint64_t[]>(positions.size());
  const auto tmp_words = std::make_unique_for_overwrite<uint64_t[]>(positions.size());
  std::span<uint64_t> keyed(keyed_words.get(), positions.size()), tmp(tmp_words.get(), positions.size());
  size_t last = 0;
  for (size_t i = 0; i < positions.size(); ++i) {
    const uint32_t p = positions[i];
    const Key k = key_of(p);
    if (last >= keys.size() || !(keys[last] == k)) {
      last = static_cast<size_t>(std::find(keys.begin(), keys.end(), k) - keys.begin());
      if (last == keys.size()) {
        if (keys.size() == kMaxDistinct) {
          std::sort(positions.begin(), positions.end(), before);
          return;
        }
        keys.push_back(k);
      }
    }
    keyed[i] = (static_cast<uint64_t>(last) << 56) | ((hash(p) >> 40) << 32) | p;
  }
  std::vector<uint64_t> rank_of(keys.size());
  {
    std::vector<size_t> by_key(keys.size());
    for (size_t k = 0; k < keys.size(); ++k) by_key[k] = k;
    std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return keys[a] > keys[b]; });
    for (size_t r = 0; r < keys.size(); ++r) rank_of[by_key[r]] = r;
  }
  if (keys.size() > 1) {
    for (uint64_t& x : keyed) x = (rank_of[x >> 56] << 56) | (x & ((uint64_t{1} << 56) - 1));
  }
  // Digits of 11 bits (three passes) for a large round, of 8 (four passes)
  // for a small one, where the counts of wider digits cost more than the
  // elements (a round every step of a few thousand ids).
  const int bits = positions.size() >= 65536 ? 11 : 8;
  const int passes = (32 + bits - 1) / bits;
  const size_t digits = size_t{1} << bits;
  const uint64_t mask = digits - 1;
  std::vector<size_t> count(static_cast<size_t>(passes) * digits, 0);
  for (uint64_t x : keyed) {
    for (int p = 0; p < passes; ++p) ++count[static_cast<size_t>(p) * digits + ((x >> (32 + p * bits)) & mask)];
  }
  for (int p = 0; p < passes; ++p) {
    size_t* start = count.data() + static_cast<size_t>(p) * digits;
    const int shift = 32 + p * bits;
    const auto digit = [&](uint64_t x) { return static_cast<size_t>((x >> shift) & mask); };
    if (start[digit(keyed.front())] == keyed.size()) continue;  // one digit for all: nothing moves
    size_t sum = 0;
    for (size_t d = 0; d < digits; ++d) sum += std::exchange(start[d], sum);
    for (uint64_t x : keyed) tmp[start[digit(x)]++] = x;
    std::swap(keyed, tmp);
  }
  // Sorted on the top 32 bits; finish on the whole hash (few equal prefixes).
  const auto at = [](uint64_t x) { return static_cast<uint32_t>(x & 0xffffffffu); };
  auto less = [&](uint64_t a, uint64_t b) { return (a >> 32) != (b >> 32) ? a < b : hash(at(a)) < hash(at(b)); };
  for (size_t i = 1; i < keyed.size(); ++i) {
    if ((keyed[i] >> 32) != (keyed[i - 1] >> 32) || !less(keyed[i], keyed[i - 1])) continue;
    const uint64_t x = keyed[i];
    size_t j = i;
    for (; j > 0 && less(x, keyed[j - 1]); --j) keyed[j] = keyed[j - 1];
    keyed[j] = x;
  }
  for (size_t i = 0; i < keyed.size(); ++i) positions[i] = at(keyed[i]);
}

}  // namespace shardrec::mc
