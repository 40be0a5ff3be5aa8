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

// Reorders `v` by key_of, the highest first, and within a key by
// PlacementOrder(id_of): an order that depends on the elements alone, not
// on the order they came in.
//
// A round's candidates share few keys (lru: one per step of the window,
// lfu: one per count), so this is three or four radix passes over (key's
// rank, top 24 bits of PlacementOrder) and an insertion pass for the rare
// equal prefixes: ~2 ms for 200k where std::sort by (key, id) took 13.
// With more than 255 distinct keys, std::sort.
template <typename T, typename KeyOf, typename IdOf>
void OrderByKeyThenPlacement(std::vector<T>& v, KeyOf key_of, IdOf id_of) {
  using Key = decltype(key_of(v.front()));
  auto hash = [&](const T& x) { return PlacementOrder(id_of(x)); };
  auto before = [&](const T& a, const T& b) {
    return key_of(a) != key_of(b) ? key_of(a) > key_of(b) : hash(a) < hash(b);
  };
  if (v.size() < 2) return;
  constexpr size_t kMaxDistinct = 255;
  // Each element's key's place among the distinct keys; the last one found
  // is tried first (runs of one key are common).
  std::vector<Key> keys;
  std::vector<uint8_t> place(v.size());
  size_t last = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const Key k = key_of(v[i]);
    if (last >= keys.size() || !(keys[last] == k)) {
      last = static_cast<size_t>(std::find(keys.begin(), keys.end(), k) - keys.begin());
      if (last == keys.size()) {
        if (keys.size() == kMaxDistinct) {
          std::sort(v.begin(), v.end(), before);
          return;
        }
        keys.push_back(k);
      }
    }
    place[i] = static_cast<uint8_t>(last);
  }
  std::vector<uint64_t> rank_of(keys.size());
  {
    std::vector<size_t> by_key(keys.size());
    for (size_t p = 0; p < keys.size(); ++p) by_key[p] = p;
    std::sort(by_key.begin(), by_key.end(), [&](size_t a, size_t b) { return keys[a] > keys[b]; });
    for (size_t r = 0; r < keys.size(); ++r) rank_of[by_key[r]] = r;
  }
  // Each element as one word: its key's rank (8 bits) and PlacementOrder's
  // top 24 bits, then its position; radix passes over the top half, their
  // counts taken in one pass. Eight bytes moved per element and pass where
  // a 16-byte pair took twice the time. Digits of 11 bits (three passes)
  // for a large round, of 8 (four passes) for a small one, where the
  // counts of wider digits cost more than the elements (a round every step
  // of a few thousand ids).
  if (v.size() >= (size_t{1} << 32)) {
    std::sort(v.begin(), v.end(), before);
    return;
  }
  std::vector<uint64_t> keyed(v.size()), tmp(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint64_t order = (rank_of[place[i]] << 24) | (hash(v[i]) >> 40);
    keyed[i] = (order << 32) | i;
  }
  const int bits = v.size() >= 65536 ? 11 : 8;
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
    keyed.swap(tmp);
  }
  // Sorted on the top 32 bits; finish on the whole hash (few equal prefixes).
  const auto at = [](uint64_t x) { return static_cast<size_t>(x & 0xffffffffu); };
  auto less = [&](uint64_t a, uint64_t b) {
    return (a >> 32) != (b >> 32) ? a < b : hash(v[at(a)]) < hash(v[at(b)]);
  };
  for (size_t i = 1; i < keyed.size(); ++i) {
    if ((keyed[i] >> 32) != (keyed[i - 1] >> 32) || !less(keyed[i], keyed[i - 1])) continue;
    const uint64_t x = keyed[i];
    size_t j = i;
    for (; j > 0 && less(x, keyed[j - 1]); --j) keyed[j] = keyed[j - 1];
    keyed[j] = x;
  }
  std::vector<T> out;
  out.reserve(v.size());
  // A gather in an order unrelated to v's: each element prefetched ahead.
  for (size_t i = 0; i < keyed.size(); ++i) {
    if (i + 16 < keyed.size()) __builtin_prefetch(&v[at(keyed[i + 16])]);
    out.push_back(v[at(keyed[i])]);
  }
  v = std::move(out);
}

}  // namespace shardrec::mc
