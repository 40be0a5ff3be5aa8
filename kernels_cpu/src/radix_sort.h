// Stable least-significant-digit radix sorts used to group the ids of a
// backward pass by row. Stability is the point: equal rows keep the order in
// which they occurred, so each row's gradient is summed in occurrence order
// and the result does not depend on the thread count. O(n) per digit; with
// at most 11-bit digits a table of up to 4M rows needs two passes.
//
// The input may be cut into `chunks` contiguous pieces that histogram and
// scatter independently (the caller's `run` may execute them in parallel):
// chunk c's items of a bucket are placed after chunk c-1's, so the result is
// the same for any chunk count.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace shardrec::kernel_cpu {

// Runs fn(c) for every c in [0, chunks), in any order, possibly in parallel.
using ChunkRunner = std::function<void(size_t chunks, const std::function<void(size_t)>& fn)>;
// Runs the chunks one after another on the calling thread.
void RunSerially(size_t chunks, const std::function<void(size_t)>& fn);

// Sorts items[0, n) by the unsigned key in bits [shift, shift + bits) of each
// item (bits in 1..64-shift), stably. `scratch` holds n items; `counts` is
// reused between calls. Returns whichever of items / scratch holds the result.
uint64_t* RadixSortBits(uint64_t* items, uint64_t* scratch, size_t n, int shift, int bits,
                        std::vector<size_t>& counts, size_t chunks = 1,
                        const ChunkRunner& run = RunSerially);

// A (row, position) pair for tables whose row and position bits do not fit
// together in 64 bits.
struct RowPosition {
  uint64_t row;
  uint64_t position;
};

// Sorts by row (whose values fit in `bits` bits), stably. As above.
RowPosition* RadixSortByRow(RowPosition* items, RowPosition* scratch, size_t n, int bits,
                            std::vector<size_t>& counts, size_t chunks = 1,
                            const ChunkRunner& run = RunSerially);

// Number of bits needed to represent every value below `bound` (>= 1).
int BitsFor(uint64_t bound);

}  // namespace shardrec::kernel_cpu
