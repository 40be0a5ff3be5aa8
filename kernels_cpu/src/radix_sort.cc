// LSD radix sorts for grouping backward occurrences by row (radix_sort.h).
//
//   digits = ceil(bits / 11); width = ceil(bits / digits)
//   per digit d (least significant first):
//     per chunk c: hist[c][b] = number of items of chunk c in bucket b
//     if one bucket holds all n items: skip the digit
//     start[c][b] = sum of hist[*][< b] + sum of hist[< c][b]   (stable order)
//     per chunk c, in order: dst[start[c][bucket(x)]++] = x
#include "radix_sort.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace shardrec::kernel_cpu {
namespace {

constexpr int kMaxDigitBits = 11;

template <class Item, class KeyOf>
Item* LsdSort(Item* items, Item* scratch, size_t n, int bits, std::vector<size_t>& counts,
              size_t chunks, const ChunkRunner& run, KeyOf key_of) {
  if (n < 2 || bits <= 0) return items;
  chunks = std::clamp<size_t>(chunks, 1, n);
  const int digits = (bits + kMaxDigitBits - 1) / kMaxDigitBits;
  const int width = (bits + digits - 1) / digits;
  const size_t buckets = size_t{1} << width;
  const uint64_t mask = buckets - 1;
  auto chunk_begin = [&](size_t c) { return n * c / chunks; };
  counts.resize(buckets * chunks);
  Item* src = items;
  Item* dst = scratch;
  for (int d = 0; d < digits; ++d) {
    const int shift = d * width;
    run(chunks, [&](size_t c) {
      size_t* h = counts.data() + c * buckets;
      std::fill(h, h + buckets, 0);
      for (size_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i)
        ++h[(key_of(src[i]) >> shift) & mask];
    });
    // A digit on which every item agrees would copy the array unchanged.
    bool trivial = false;
    for (size_t b = 0; b < buckets && !trivial; ++b) {
      size_t total = 0;
      for (size_t c = 0; c < chunks; ++c) total += counts[c * buckets + b];
      trivial = total == n;
    }
    if (trivial) continue;
    size_t sum = 0;
    for (size_t b = 0; b < buckets; ++b) {
      for (size_t c = 0; c < chunks; ++c) sum += std::exchange(counts[c * buckets + b], sum);
    }
    run(chunks, [&](size_t c) {
      size_t* start = counts.data() + c * buckets;
      for (size_t i = chunk_begin(c); i < chunk_begin(c + 1); ++i) {
        dst[start[(key_of(src[i]) >> shift) & mask]++] = src[i];
      }
    });
    std::swap(src, dst);
  }
  return src;
}

}  // namespace

void RunSerially(size_t chunks, const std::function<void(size_t)>& fn) {
  for (size_t c = 0; c < chunks; ++c) fn(c);
}

int BitsFor(uint64_t bound) {
  return bound <= 1 ? 1 : static_cast<int>(std::bit_width(bound - 1));
}

uint64_t* RadixSortBits(uint64_t* items, uint64_t* scratch, size_t n, int shift, int bits,
                        std::vector<size_t>& counts, size_t chunks, const ChunkRunner& run) {
  const uint64_t key_mask = bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1;
  return LsdSort(items, scratch, n, bits, counts, chunks, run,
                 [shift, key_mask](uint64_t v) { return (v >> shift) & key_mask; });
}

RowPosition* RadixSortByRow(RowPosition* items, RowPosition* scratch, size_t n, int bits,
                            std::vector<size_t>& counts, size_t chunks, const ChunkRunner& run) {
  return LsdSort(items, scratch, n, bits, counts, chunks, run,
                 [](const RowPosition& v) { return v.row; });
}

}  // namespace shardrec::kernel_cpu
