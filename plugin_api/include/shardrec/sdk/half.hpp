// shardrec plugin SDK — scalar float16 / bfloat16 conversions, rounding to
// nearest-even (what PyTorch, NCCL and the kernels do). Shared by the host
// and plugins so every component rounds the same way.
#ifndef SHARDREC_SDK_HALF_HPP_
#define SHARDREC_SDK_HALF_HPP_

#include <bit>
#include <cstdint>

namespace shardrec::sdk {

inline uint16_t FloatToBFloat16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}
inline float BFloat16ToFloat(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
// GCC and Clang on x86-64 and AArch64 implement _Float16 with IEEE
// round-to-nearest-even conversions (F16C instructions where present).
inline uint16_t FloatToHalf(float f) { return std::bit_cast<uint16_t>(static_cast<_Float16>(f)); }
inline float HalfToFloat(uint16_t h) { return static_cast<float>(std::bit_cast<_Float16>(h)); }

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_HALF_HPP_
