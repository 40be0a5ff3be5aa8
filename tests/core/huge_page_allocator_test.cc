// HugePageAllocator: small blocks as operator new gives them, large ones
// 2 MiB-aligned; both usable and freed through the same allocator.
#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "shardrec/core/resources/huge_page_allocator.h"

namespace shardrec {
namespace {

TEST(HugePageAllocatorTest, LargeBlocksAreHugePageAlignedAndUsable) {
  std::vector<int64_t, HugePageAllocator<int64_t>> big(3 * kHugePageBytes / sizeof(int64_t) + 5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.data()) % kHugePageBytes, 0u);
  std::iota(big.begin(), big.end(), int64_t{0});
  EXPECT_EQ(big.back(), static_cast<int64_t>(big.size()) - 1);
  big.resize(big.size() * 2, 7);  // reallocation copies and frees the old block
  EXPECT_EQ(big[100], 100);
  EXPECT_EQ(big.back(), 7);
}

TEST(HugePageAllocatorTest, SmallBlocksAndOverAlignedTypes) {
  std::vector<char, HugePageAllocator<char>> small(100, 'x');
  EXPECT_EQ(small[99], 'x');
  struct alignas(64) Line {
    int64_t v[8];
  };
  std::vector<Line, HugePageAllocator<Line>> lines(10);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(lines.data()) % 64, 0u);
  HugePageAllocator<int64_t> a;
  EXPECT_THROW((void)a.allocate(static_cast<size_t>(-1) / 4), std::bad_array_new_length);
  HugePageAllocator<char> bytes;
  EXPECT_THROW((void)bytes.allocate(static_cast<size_t>(-1) - 100), std::bad_alloc);  // rounding up would wrap
  // Exactly 2 MiB: the huge-page path, freed through it.
  char* edge = bytes.allocate(kHugePageBytes);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(edge) % kHugePageBytes, 0u);
  edge[kHugePageBytes - 1] = 1;
  bytes.deallocate(edge, kHugePageBytes);
  char* below = bytes.allocate(kHugePageBytes - 1);
  below[kHugePageBytes - 2] = 1;
  bytes.deallocate(below, kHugePageBytes - 1);
}

}  // namespace
}  // namespace shardrec
