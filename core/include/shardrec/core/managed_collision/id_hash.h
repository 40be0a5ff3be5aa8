// The 64-bit mixer used wherever managed collision hashes an id: the
// finaliser of MurmurHash3 (fmix64), a bijection on 64-bit integers whose
// output bits each depend on every input bit. Bucket choice, the residual
// (mch) range, the optional input hash and the slot index all use it, so
// an id lands in the same place on every rank and every run.
#pragma once

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

}  // namespace shardrec::mc
