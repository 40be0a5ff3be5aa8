// shardrec plugin SDK — scalar float16 / bfloat16 conversions, rounding to
// nearest-even (what PyTorch, NCCL and the kernels do). Shared by the host
// and plugins so every component rounds the same way. Plain bit arithmetic:
// exact without compiler or F16C support, so cheap on every target.
#ifndef SHARDREC_SDK_HALF_HPP_
#define SHARDREC_SDK_HALF_HPP_

#include <bit>
#include <cstdint>

namespace shardrec::sdk {

// binary16 -> float32, exact for every input (subnormals, inf, NaN).
// After F. Giesen, "half_to_float" (public domain).
inline float HalfToFloat(uint16_t h) {
  constexpr uint32_t kShiftedExp = 0x7C00u << 13;  // exponent mask after shift
  uint32_t o = (static_cast<uint32_t>(h) & 0x7FFFu) << 13;
  const uint32_t exp = kShiftedExp & o;
  o += (127u - 15u) << 23;  // rebias
  if (exp == kShiftedExp) {
    o += (128u - 16u) << 23;  // inf / NaN: exponent to 255
  } else if (exp == 0) {
    // Zero / subnormal: renormalise through a float subtraction (exact).
    o += 1u << 23;
    o = std::bit_cast<uint32_t>(std::bit_cast<float>(o) - std::bit_cast<float>(113u << 23));
  }
  o |= (static_cast<uint32_t>(h) & 0x8000u) << 16;
  return std::bit_cast<float>(o);
}

// float32 -> binary16, round to nearest even; overflow gives inf, NaN stays
// a (quiet) NaN. After F. Giesen, "float_to_half_fast3_rtne" (public domain).
inline uint16_t FloatToHalf(float f) {
  constexpr uint32_t kF32Inf = 255u << 23;
  constexpr uint32_t kF16Max = (127u + 16u) << 23;  // 65536.0f: rounds to inf
  constexpr uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint32_t o;
  if (x >= kF16Max) {
    o = x > kF32Inf ? 0x7E00u : 0x7C00u;
  } else if (x < (113u << 23)) {
    // Result is subnormal or zero: let the FPU's round-to-nearest-even do
    // the work by adding a magic number that aligns the mantissa.
    const float sum = std::bit_cast<float>(x) + std::bit_cast<float>(kDenormMagic);
    o = std::bit_cast<uint32_t>(sum) - kDenormMagic;
  } else {
    const uint32_t mant_odd = (x >> 13) & 1u;
    x += ((15u - 127u) << 23) + 0xFFFu;  // rebias (wraps) and add half-ulp - 1
    x += mant_odd;                       // ties to even
    o = x >> 13;
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

inline float BFloat16ToFloat(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// float32 -> bfloat16, round to nearest even; NaN stays a quiet NaN.
inline uint16_t FloatToBFloat16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);
  const uint32_t rounded = x + 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(rounded >> 16);
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_HALF_HPP_
