// FP8 E4M3 conversions (fp8_e4m3.h) on the float's bits: a normal value
// keeps its exponent and has its mantissa rounded to 3 bits (ties to even)
// by one add; a subnormal one is |x| in steps of 2^-9, an exact scaling
// rounded by lrintf (ties to even in the default rounding mode).
#include "fp8_e4m3.h"

#include <array>
#include <bit>
#include <cmath>

namespace shardrec::codecs {

uint8_t FloatToFp8E4M3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const auto sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t a = bits & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return static_cast<uint8_t>(sign | 0x7F);  // NaN
  if (a >= 0x43E00000u) return static_cast<uint8_t>(sign | 0x7E);  // >= 448 (inf too): saturate
  if (a < 0x3C800000u) {                                             // below 2^-6: subnormal
    const long m = std::lrintf(std::bit_cast<float>(a) * 512.0f);    // 0..8; 8 is 2^-6, code 0x08
    return static_cast<uint8_t>(sign | m);
  }
  const uint32_t rounded = a + 0x7FFFFu + ((a >> 20) & 1u);  // ties to even on the 3-bit mantissa
  const uint32_t exponent = (rounded >> 23) - 127u + 7u;
  const uint32_t code = (exponent << 3) | ((rounded >> 20) & 7u);
  return static_cast<uint8_t>(sign | (code > 0x7Eu ? 0x7Eu : code));
}

float Fp8E4M3ToFloat(uint8_t q) {
  static const std::array<float, 256> kTable = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c) {
      const int exponent = (c >> 3) & 0xF, m = c & 7;
      float v;
      if ((c & 0x7F) == 0x7F) {
        v = std::nanf("");
      } else if (exponent == 0) {
        v = std::ldexp(static_cast<float>(m), -9);
      } else {
        v = std::ldexp(1.0f + static_cast<float>(m) / 8.0f, exponent - 7);
      }
      t[static_cast<size_t>(c)] = (c & 0x80) ? -v : v;
    }
    return t;
  }();
  return kTable[q];
}

}  // namespace shardrec::codecs
