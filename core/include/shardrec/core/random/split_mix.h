// splitmix64 (Steele, Lea and Flood): a fast 64-bit mix of a counter, the
// building block of core's reproducible streams — dense initialisation by
// parameter name, the planted click log's samples, the reader's shuffle —
// which must come out the same on every rank, build and standard library
// (unlike std::shuffle and std::*_distribution).
#pragma once

#include <cstdint>

namespace shardrec {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace shardrec
