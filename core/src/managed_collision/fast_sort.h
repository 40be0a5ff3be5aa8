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
// lfu: one per count), so this is four radix passes of 8 bits over (key's
// rank, top 24 bits of PlacementOrder) and an insertion pass for the rare
// equal prefixes: ~3 ms for 200k where std::sort by (key, id) took 13.
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
  struct Keyed {
    uint64_t order, at;  // order: the key's rank in the top 8 bits, then PlacementOrder's top 56
  };
  std::vector<Keyed> keyed(v.size()), tmp(v.size());
  for (size_t i = 0; i < v.size(); ++i) keyed[i] = {(rank_of[place[i]] << 56) | (hash(v[i]) >> 8), i};
  for (int shift = 32; shift < 64; shift += 8) {
    auto digit = [&](const Keyed& x) { return static_cast<size_t>((x.order >> shift) & 0xff); };
    size_t start[257] = {};
    for (const Keyed& x : keyed) ++start[digit(x) + 1];
    if (start[digit(keyed.front()) + 1] == keyed.size()) continue;  // one digit for all: nothing moves
    for (size_t d = 0; d < 256; ++d) start[d + 1] += start[d];
    for (const Keyed& x : keyed) tmp[start[digit(x)]++] = x;
    keyed.swap(tmp);
  }
  // Sorted on the top 32 bits; finish on the rest (few equal prefixes).
  auto less = [&](const Keyed& a, const Keyed& b) {
    return a.order != b.order ? a.order < b.order : hash(v[a.at]) < hash(v[b.at]);
  };
  for (size_t i = 1; i < keyed.size(); ++i) {
    if (!less(keyed[i], keyed[i - 1])) continue;
    const Keyed x = keyed[i];
    size_t j = i;
    for (; j > 0 && less(x, keyed[j - 1]); --j) keyed[j] = keyed[j - 1];
    keyed[j] = x;
  }
  std::vector<T> out;
  out.reserve(v.size());
  for (const Keyed& x : keyed) out.push_back(v[x.at]);
  v = std::move(out);
}

}  // namespace shardrec::mc
