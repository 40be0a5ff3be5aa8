// `int4`: a 4-bit row-wise quantized comm codec, as a third party would
// ship one (one file, the SDK's codec adapter, no shardrec sources).
//
// Each row of `cols` float32 values becomes ceil(cols / 2) bytes, two
// values a byte (the even column in the low nibble), followed by the row's
// float32 scale and bias: q = round((x - min) / scale), scale = (max -
// min) / 15. It halves int8's bytes at a quarter of its precision: for
// the forward embeddings of wide tables, where the rows' ranges are small.
//
// ABI obligations (include/shardrec/abi/codec.h): stateless and
// thread-safe (every method is const and touches only its arguments);
// deterministic (same input, same bytes on every rank); quantized_size
// exact (the adapter checks the buffers against it).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "shardrec/sdk/codec.hpp"
#include "shardrec/sdk/plugin.hpp"

namespace {

using namespace shardrec;

class Int4RowWise {
 public:
  // No options: any --plugin-opt codec.int4.KEY=V is refused by the SDK.
  explicit Int4RowWise(sdk::Options&) {}
  DLDataType QuantizedDtype() const { return {kDLUInt, 8, 1}; }
  static int64_t RowBytes(int64_t cols) { return (cols + 1) / 2 + 2 * static_cast<int64_t>(sizeof(float)); }
  int64_t QuantizedSize(int64_t rows, int64_t cols) const { return rows * RowBytes(cols); }

  void Encode(const float* in, int64_t rows, int64_t cols, void* out) const {
    auto* q = static_cast<uint8_t*>(out);
    const int64_t packed = (cols + 1) / 2;
    for (int64_t r = 0; r < rows; ++r, in += cols, q += RowBytes(cols)) {
      float lo = cols > 0 ? in[0] : 0.0f, hi = lo;
      for (int64_t c = 1; c < cols; ++c) {
        lo = std::min(lo, in[c]);
        hi = std::max(hi, in[c]);
      }
      const float scale = (hi - lo) / 15.0f;
      const float inverse = 15.0f / (hi - lo + 1e-8f);
      std::memset(q, 0, static_cast<size_t>(packed));
      for (int64_t c = 0; c < cols; ++c) {
        const auto v = static_cast<uint8_t>(std::clamp(std::nearbyint((in[c] - lo) * inverse), 0.0f, 15.0f));
        q[c / 2] = static_cast<uint8_t>(q[c / 2] | (c % 2 == 0 ? v : v << 4));
      }
      std::memcpy(q + packed, &scale, sizeof(float));
      std::memcpy(q + packed + sizeof(float), &lo, sizeof(float));
    }
  }

  void Decode(const void* in, int64_t rows, int64_t cols, float* out) const {
    const auto* q = static_cast<const uint8_t*>(in);
    const int64_t packed = (cols + 1) / 2;
    for (int64_t r = 0; r < rows; ++r, out += cols, q += RowBytes(cols)) {
      float scale, bias;
      std::memcpy(&scale, q + packed, sizeof(float));
      std::memcpy(&bias, q + packed + sizeof(float), sizeof(float));
      for (int64_t c = 0; c < cols; ++c) {
        const int v = c % 2 == 0 ? q[c / 2] & 0xF : q[c / 2] >> 4;
        out[c] = static_cast<float>(v) * scale + bias;
      }
    }
  }
};

const sr_component kComponents[] = {
    sdk::Component(SR_KIND_CODEC, "int4", "1.0",
                   "4-bit row-wise, a float32 scale and bias per row (half a byte a value + 8 a row)",
                   &sdk::CodecVtable<Int4RowWise>()),
};

}  // namespace

SHARDREC_DEFINE_PLUGIN("int4", "1.0", kComponents)
