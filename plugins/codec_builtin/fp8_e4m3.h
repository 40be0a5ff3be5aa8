// FP8 E4M3 ("fn": no infinities, one NaN pattern per sign; the OCP FP8
// format PyTorch calls float8_e4m3fn): 1 sign bit, 4 exponent bits (bias
// 7), 3 mantissa bits; the largest finite value is 448, the smallest
// subnormal 2^-9.
#pragma once

#include <cstdint>

namespace shardrec::codecs {

inline constexpr float kFp8E4M3Max = 448.0f;

// Round to nearest, ties to even; |x| beyond 448 saturates to +-448 (the
// row-wise codec scales rows into range first); NaN stays NaN.
uint8_t FloatToFp8E4M3(float x);
// Exact.
float Fp8E4M3ToFloat(uint8_t q);

}  // namespace shardrec::codecs
