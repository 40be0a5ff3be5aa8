// The built-in quantized comm codecs (abi/codec.h), TorchRec's
// CommType precisions:
//   fp16  float16, round to nearest even          2 bytes a value
//   bf16  bfloat16, round to nearest even         2 bytes a value
//   int8  8-bit row-wise: per row a float32 scale and bias after its
//         bytes, q = round((x - min) / scale), scale = (max - min) / 255
//         (FBGEMM's fused 8-bit row-wise layout)  1 byte a value + 8 a row
//   fp8   FP8 E4M3 row-wise: per row a float32 scale after its bytes,
//         scale = max|x| / 448 (0 rows: scale 1)   1 byte a value + 4 a row
// Encoded rows are packed back to back; the per-row floats are stored
// unaligned (memcpy), little-endian as the host is.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "fp8_e4m3.h"
#include "shardrec/sdk/codec.hpp"
#include "shardrec/sdk/half.hpp"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::codecs {
namespace {

class Fp16 {
 public:
  explicit Fp16(sdk::Options&) {}
  DLDataType QuantizedDtype() const { return {kDLFloat, 16, 1}; }
  int64_t QuantizedSize(int64_t rows, int64_t cols) const { return rows * cols; }
  void Encode(const float* in, int64_t rows, int64_t cols, void* out) const {
    auto* q = static_cast<uint16_t*>(out);
    for (int64_t i = 0; i < rows * cols; ++i) q[i] = sdk::FloatToHalf(in[i]);
  }
  void Decode(const void* in, int64_t rows, int64_t cols, float* out) const {
    const auto* q = static_cast<const uint16_t*>(in);
    for (int64_t i = 0; i < rows * cols; ++i) out[i] = sdk::HalfToFloat(q[i]);
  }
};

class Bf16 {
 public:
  explicit Bf16(sdk::Options&) {}
  DLDataType QuantizedDtype() const { return {kDLBfloat, 16, 1}; }
  int64_t QuantizedSize(int64_t rows, int64_t cols) const { return rows * cols; }
  void Encode(const float* in, int64_t rows, int64_t cols, void* out) const {
    auto* q = static_cast<uint16_t*>(out);
    for (int64_t i = 0; i < rows * cols; ++i) q[i] = sdk::FloatToBFloat16(in[i]);
  }
  void Decode(const void* in, int64_t rows, int64_t cols, float* out) const {
    const auto* q = static_cast<const uint16_t*>(in);
    for (int64_t i = 0; i < rows * cols; ++i) out[i] = sdk::BFloat16ToFloat(q[i]);
  }
};

class Int8RowWise {
 public:
  explicit Int8RowWise(sdk::Options&) {}
  static constexpr int64_t kRowExtra = 2 * sizeof(float);  // scale, bias
  DLDataType QuantizedDtype() const { return {kDLUInt, 8, 1}; }
  int64_t QuantizedSize(int64_t rows, int64_t cols) const { return rows * (cols + kRowExtra); }
  void Encode(const float* in, int64_t rows, int64_t cols, void* out) const {
    auto* q = static_cast<uint8_t*>(out);
    for (int64_t r = 0; r < rows; ++r, in += cols, q += cols + kRowExtra) {
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (int64_t c = 0; c < cols; ++c) {
        lo = std::min(lo, in[c]);
        hi = std::max(hi, in[c]);
      }
      if (cols == 0) lo = hi = 0.0f;
      const float range = hi - lo;
      const float scale = range / 255.0f;
      // The epsilon keeps a constant row (range 0) finite: every q is 0.
      const float inverse = 255.0f / (range + 1e-8f);
      for (int64_t c = 0; c < cols; ++c) {
        const float v = std::nearbyint((in[c] - lo) * inverse);
        q[c] = static_cast<uint8_t>(std::clamp(v, 0.0f, 255.0f));
      }
      std::memcpy(q + cols, &scale, sizeof(float));
      std::memcpy(q + cols + sizeof(float), &lo, sizeof(float));
    }
  }
  void Decode(const void* in, int64_t rows, int64_t cols, float* out) const {
    const auto* q = static_cast<const uint8_t*>(in);
    for (int64_t r = 0; r < rows; ++r, out += cols, q += cols + kRowExtra) {
      float scale, bias;
      std::memcpy(&scale, q + cols, sizeof(float));
      std::memcpy(&bias, q + cols + sizeof(float), sizeof(float));
      for (int64_t c = 0; c < cols; ++c) out[c] = static_cast<float>(q[c]) * scale + bias;
    }
  }
};

class Fp8RowWise {
 public:
  explicit Fp8RowWise(sdk::Options&) {}
  static constexpr int64_t kRowExtra = sizeof(float);  // scale
  DLDataType QuantizedDtype() const { return {kDLUInt, 8, 1}; }
  int64_t QuantizedSize(int64_t rows, int64_t cols) const { return rows * (cols + kRowExtra); }
  void Encode(const float* in, int64_t rows, int64_t cols, void* out) const {
    auto* q = static_cast<uint8_t*>(out);
    for (int64_t r = 0; r < rows; ++r, in += cols, q += cols + kRowExtra) {
      float amax = 0.0f;
      for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(in[c]));
      const float scale = amax > 0.0f && std::isfinite(amax) ? amax / kFp8E4M3Max : 1.0f;
      for (int64_t c = 0; c < cols; ++c) q[c] = FloatToFp8E4M3(in[c] / scale);
      std::memcpy(q + cols, &scale, sizeof(float));
    }
  }
  void Decode(const void* in, int64_t rows, int64_t cols, float* out) const {
    const auto* q = static_cast<const uint8_t*>(in);
    for (int64_t r = 0; r < rows; ++r, out += cols, q += cols + kRowExtra) {
      float scale;
      std::memcpy(&scale, q + cols, sizeof(float));
      for (int64_t c = 0; c < cols; ++c) out[c] = Fp8E4M3ToFloat(q[c]) * scale;
    }
  }
};

const sr_component kComponents[] = {
    sdk::Component(SR_KIND_CODEC, "fp16", "1.0", "float16, round to nearest even (2 bytes a value)",
                   &sdk::CodecVtable<Fp16>()),
    sdk::Component(SR_KIND_CODEC, "bf16", "1.0", "bfloat16, round to nearest even (2 bytes a value)",
                   &sdk::CodecVtable<Bf16>()),
    sdk::Component(SR_KIND_CODEC, "int8", "1.0",
                   "8-bit row-wise, a float32 scale and bias per row (1 byte a value + 8 a row)",
                   &sdk::CodecVtable<Int8RowWise>()),
    sdk::Component(SR_KIND_CODEC, "fp8", "1.0",
                   "FP8 E4M3 row-wise, a float32 scale per row (1 byte a value + 4 a row)",
                   &sdk::CodecVtable<Fp8RowWise>()),
};

}  // namespace
}  // namespace shardrec::codecs

SHARDREC_DEFINE_PLUGIN("builtin", "1.0", shardrec::codecs::kComponents)
