// The 64-bit mixer used wherever managed collision hashes an id: the
// finaliser of MurmurHash3 (fmix64), a bijection on 64-bit integers whose
// output bits each depend on every input bit. Bucket choice, the residual
// (mch) range, the optional input hash and the slot index all use it, so
// an id lands in the same place on every rank and every run.
#pragma once

#include <bit>
#include <cstdint>

namespace shardrec::mc {

constexpr uint64_t Fmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  k *= 0xc4ceb9fe1a85ec53ULL;
  k ^= k >> 33;
  return k;
}

// A uniform value in [0, n) from a mixed id (multiply-high: no division).
__extension__ typedef unsigned __int128 Uint128;  // GCC and Clang on 64-bit targets
constexpr uint64_t ScaleToRange(uint64_t mixed, uint64_t n) {
  return static_cast<uint64_t>((static_cast<Uint128>(mixed) * n) >> 64);
}

// Entries of an id index (core/src/managed_collision/id_slot_index.h) for
// `ids` ids, at most one in `spread` entries used: a power of two. The slot
// index is at most a quarter full (spread 4): at half full (before
// 2026-11-26) lookups took ~20% longer, erases ~50%, as more of them ran
// past their home entry. Here so that `bench mc` sizes its probe as the
// slot index.
constexpr uint64_t IdIndexEntries(int64_t ids, int64_t spread = 4) {
  return std::bit_ceil(static_cast<uint64_t>(ids < 2 ? 8 : spread * ids));
}

}  // namespace shardrec::mc
