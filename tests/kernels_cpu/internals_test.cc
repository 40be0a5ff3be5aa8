// White-box tests of two pieces of the CPU kernel the plugin interface
// cannot reach in full: its scalar 16-bit conversions (every fp16 and bf16
// pattern, and a sweep of floats, against the reference's independent
// rounding and, where the compiler has it, _Float16), and both radix sorts
// (stability included, and the (row, position) variant used only for
// tables too large to build here).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <random>

#include "radix_sort.h"
#include "row_convert.h"
#include "shardrec/core/reference_kernel.h"

namespace shardrec::kernel_cpu {
namespace {

constexpr DLDataType kF16{kDLFloat, 16, 1};
constexpr DLDataType kBF16{kDLBfloat, 16, 1};

bool SameFloat(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) ||
         std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

TEST(RowConvert, EverySixteenBitPatternDecodesLikeTheReference) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const uint16_t h = static_cast<uint16_t>(bits);
    ASSERT_TRUE(SameFloat(HalfToFloat(h), reference::DecodeHalf(h, kF16))) << std::hex << bits;
    ASSERT_TRUE(SameFloat(BFloat16ToFloat(h), reference::DecodeHalf(h, kBF16))) << std::hex << bits;
    // Decoding then encoding returns the pattern (NaNs stay NaNs).
    if (!std::isnan(HalfToFloat(h))) {
      ASSERT_EQ(FloatToHalf(HalfToFloat(h)), h) << std::hex << bits;
    }
    if (!std::isnan(BFloat16ToFloat(h))) {
      ASSERT_EQ(FloatToBFloat16(BFloat16ToFloat(h)), h) << std::hex << bits;
    }
  }
}

// Floats around every tie and boundary of both formats, plus random ones.
std::vector<float> Probes() {
  std::vector<float> v = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 65504.0f, 65519.99f, 65520.0f,
                          65536.0f, 1e-8f, 5.96e-8f, 2.98e-8f, 6.1e-5f, 3.4e38f, -3.39e38f,
                          1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048, 1.0f + 1.0f / 256, 1e-40f};
  std::mt19937 rng(1);
  for (int i = 0; i < 200000; ++i) {
    // Random bit patterns cover every exponent, subnormals and NaNs included.
    v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  }
  for (uint32_t h = 0; h < 0x7C00; h += 7) {  // exact midpoints between fp16 neighbours
    const float a = HalfToFloat(static_cast<uint16_t>(h));
    const float b = HalfToFloat(static_cast<uint16_t>(h + 1));
    v.push_back(static_cast<float>((static_cast<double>(a) + b) / 2));
  }
  return v;
}

TEST(RowConvert, RoundingToFp16AndBf16IsNearestEven) {
  for (float x : Probes()) {
    const float h = HalfToFloat(FloatToHalf(x));
    ASSERT_TRUE(SameFloat(h, reference::RoundToDType(x, kF16))) << x;
    const float b = BFloat16ToFloat(FloatToBFloat16(x));
    ASSERT_TRUE(SameFloat(b, reference::RoundToDType(x, kBF16))) << x;
    if (!std::isnan(x)) {
      ASSERT_EQ(FloatToHalf(x), reference::EncodeHalf(x, kF16)) << x;
      ASSERT_EQ(FloatToBFloat16(x), reference::EncodeHalf(x, kBF16)) << x;
    }
#ifdef __FLT16_MAX__
    // The compiler's own conversion is a third, independent opinion.
    ASSERT_TRUE(SameFloat(h, static_cast<float>(static_cast<_Float16>(x)))) << x;
#endif
  }
}

TEST(RadixSort, SortsPackedItemsByTheirKeyBitsStably) {
  for (int row_bits : {1, 5, 11, 12, 20, 23, 40}) {
    SCOPED_TRACE("row bits " + std::to_string(row_bits));
    std::mt19937_64 rng(static_cast<uint64_t>(row_bits));
    const int position_bits = 17;
    const size_t n = 5000;
    std::vector<uint64_t> items(n), scratch(n);
    std::vector<size_t> counts;
    const uint64_t rows = uint64_t{1} << row_bits;
    for (size_t i = 0; i < n; ++i) {
      // Few distinct rows so equal keys are common; positions ascend.
      const uint64_t row = (rng() % 37) * 7919 % rows;
      items[i] = (row << position_bits) | i;
    }
    std::vector<uint64_t> expected = items;
    std::stable_sort(expected.begin(), expected.end(), [&](uint64_t a, uint64_t b) {
      return (a >> position_bits) < (b >> position_bits);
    });
    const uint64_t* sorted =
        RadixSortBits(items.data(), scratch.data(), n, position_bits, row_bits, counts);
    ASSERT_TRUE(std::equal(expected.begin(), expected.end(), sorted));
  }
}

TEST(RadixSort, RowPositionPairsSortStablyEvenWithSixtyFourBitRows) {
  std::mt19937_64 rng(3);
  const size_t n = 3000;
  std::vector<RowPosition> items(n), scratch(n);
  std::vector<size_t> counts;
  for (size_t i = 0; i < n; ++i) items[i] = {rng() % 50 * 0x0123456789ABCDull, i};
  std::vector<RowPosition> expected = items;
  std::stable_sort(expected.begin(), expected.end(),
                   [](const RowPosition& a, const RowPosition& b) { return a.row < b.row; });
  const RowPosition* sorted = RadixSortByRow(items.data(), scratch.data(), n, 64, counts);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(sorted[i].row, expected[i].row) << i;
    ASSERT_EQ(sorted[i].position, expected[i].position) << i;
  }
  EXPECT_EQ(BitsFor(1), 1);
  EXPECT_EQ(BitsFor(2), 1);
  EXPECT_EQ(BitsFor(3), 2);
  EXPECT_EQ(BitsFor(1u << 20), 20);
  EXPECT_EQ(BitsFor((1u << 20) + 1), 21);
}

}  // namespace
}  // namespace shardrec::kernel_cpu
