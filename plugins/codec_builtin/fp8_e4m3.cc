// FP8 E4M3 conversions (fp8_e4m3.h), by arithmetic on the float's value:
// scaling by a power of two is exact, so nearbyint() rounds the mantissa
// (ties to even in the default rounding mode) without a table search.
#include "fp8_e4m3.h"

#include <array>
#include <cmath>

namespace shardrec::codecs {

uint8_t FloatToFp8E4M3(float x) {
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return static_cast<uint8_t>(sign | 0x7F);
  const float a = std::fabs(x);
  if (a >= kFp8E4M3Max) return static_cast<uint8_t>(sign | 0x7E);  // saturate (448 is 0x7E)
  if (a < 0x1p-6f) {
    // Subnormal: steps of 2^-9.
    const auto m = static_cast<int>(std::nearbyint(std::ldexp(a, 9)));
    return static_cast<uint8_t>(sign | m);  // m == 8 is the smallest normal, 0x08: the same bits
  }
  // Normal: 3 mantissa bits below the leading one.
  int e = 0;
  std::frexp(a, &e);  // a = f * 2^e, f in [0.5, 1): the leading bit is 2^(e-1)
  int exponent = e - 1 + 7;  // biased, >= 1 here
  auto m = static_cast<int>(std::nearbyint(std::ldexp(a, 3 - (e - 1)))) - 8;
  if (m == 8) {
    m = 0;
    ++exponent;
  }
  const int code = (exponent << 3) | m;
  return static_cast<uint8_t>(sign | (code > 0x7E ? 0x7E : code));
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
