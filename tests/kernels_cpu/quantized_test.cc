// Row-wise quantized tables (INT8, INT4, INT2; ABI 1.4) in the CPU kernel,
// against references written here, independently of the SDK's code:
// - a table starts as its float32 initial weights quantized the FBGEMM way
//   (fp16 bias = min, fp16 scale = range / levels, round to nearest even),
//   byte for byte;
// - read_rows / write_rows move raw rows (uint8 [n, row_bytes]);
// - every pooling, weighted or not, over every dim class (odd ones too)
//   equals the scalar reference over the dequantized table;
// - refusals: an optimizer, a non-uint8 dtype, an unknown quantization,
//   backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "kernel_test_util.h"
#include "shardrec/core/reference_kernel.h"

namespace shardrec::testing {
namespace {

using reference::RefLookup;
using reference::RefTable;

constexpr DLDataType kU8{kDLUInt, 8, 1};
constexpr double kRelTol = 1e-5;

int Bits(int32_t q) { return q == SR_ROW_QUANT_INT8 ? 8 : q == SR_ROW_QUANT_INT4 ? 4 : 2; }
int64_t RowBytes(int32_t q, int64_t dim) { return (4 + (dim * Bits(q) + 7) / 8 + 3) / 4 * 4; }
std::string QuantLabel(int32_t q) { return "int" + std::to_string(Bits(q)); }

float Half(uint16_t h) { return reference::DecodeHalf(h, kF16); }
uint16_t ToHalf(float f) { return reference::EncodeHalf(f, kF16); }

// Element i of a raw quantized row, dequantized: scale * q + bias.
float Dequantized(int32_t q, const uint8_t* row, int64_t i) {
  uint16_t s, b;
  std::memcpy(&s, row, 2);
  std::memcpy(&b, row + 2, 2);
  const int bits = Bits(q);
  const int per_byte = 8 / bits;
  const uint8_t byte = row[4 + i / per_byte];
  const uint32_t value = (byte >> ((i % per_byte) * bits)) & ((1u << bits) - 1u);
  return Half(s) * static_cast<float>(value) + Half(b);
}

// FBGEMM's FloatToFusedNBitRowwiseQuantizedSBHalf, written out again.
std::vector<uint8_t> Quantized(int32_t q, const float* x, int64_t dim) {
  std::vector<uint8_t> row(static_cast<size_t>(RowBytes(q, dim)), 0);
  float lo = *std::min_element(x, x + dim), hi = *std::max_element(x, x + dim);
  const uint16_t bias_h = ToHalf(lo);
  lo = Half(bias_h);
  const float levels = static_cast<float>((1 << Bits(q)) - 1);
  uint16_t scale_h = ToHalf((hi - lo) / levels);
  float scale = Half(scale_h);
  if (scale == 0.0f || std::isinf(1.0f / scale)) {
    scale = 1.0f;
    scale_h = ToHalf(1.0f);
  }
  std::memcpy(row.data(), &scale_h, 2);
  std::memcpy(row.data() + 2, &bias_h, 2);
  const int per_byte = 8 / Bits(q);
  for (int64_t i = 0; i < dim; ++i) {
    const float v = std::min(std::max(std::nearbyint((x[i] - lo) * (1.0f / scale)), 0.0f), levels);
    row[static_cast<size_t>(4 + i / per_byte)] |= static_cast<uint8_t>(static_cast<uint32_t>(v) << ((i % per_byte) * Bits(q)));
  }
  return row;
}

// Random raw rows: fp16 scales in [1e-3, 0.1], biases in [-1, 1], random
// values, zero padding.
std::vector<uint8_t> RandomRaw(int32_t q, int64_t rows, int64_t dim, std::mt19937_64& rng) {
  const int64_t rb = RowBytes(q, dim);
  std::vector<uint8_t> raw(static_cast<size_t>(rows * rb), 0);
  std::uniform_real_distribution<float> scale(1e-3f, 0.1f), bias(-1.0f, 1.0f);
  std::uniform_int_distribution<uint32_t> value(0, (1u << Bits(q)) - 1u);
  const int per_byte = 8 / Bits(q);
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t* row = raw.data() + r * rb;
    const uint16_t s = ToHalf(scale(rng)), b = ToHalf(bias(rng));
    std::memcpy(row, &s, 2);
    std::memcpy(row + 2, &b, 2);
    for (int64_t i = 0; i < dim; ++i) row[4 + i / per_byte] |= static_cast<uint8_t>(value(rng) << ((i % per_byte) * Bits(q)));
  }
  return raw;
}

// The dequantized table as the scalar reference's float32 table.
RefTable Dequantize(int32_t q, const std::vector<uint8_t>& raw, int64_t rows, int64_t dim) {
  RefTable t;
  t.num_rows = rows;
  t.dim = dim;
  t.weights.resize(static_cast<size_t>(rows * dim));
  const int64_t rb = RowBytes(q, dim);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < dim; ++c) t.W(r, c) = Dequantized(q, raw.data() + r * rb, c);
  return t;
}

class QuantizedSweep : public ::testing::TestWithParam<std::tuple<int32_t, int64_t>> {};

TEST_P(QuantizedSweep, StartsQuantizedAndPoolsLikeTheReference) {
  const auto [q, dim] = GetParam();
  constexpr int64_t kRows = 97;
  const TableSpec spec{.name = "q", .rows = kRows, .dim = dim, .dtype = kU8, .seed = 11, .row_quantization = q};
  auto k = CreateKernel({spec}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  auto info = k->TableInfo(0);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->row_bytes, RowBytes(q, dim));
  EXPECT_EQ(info->row_quantization, q);
  EXPECT_EQ(info->dim, dim);
  const int64_t rb = RowBytes(q, dim);

  // The initial rows: the float32 table's initial weights, quantized.
  auto f32 = CreateKernel({{.name = "q", .rows = kRows, .dim = dim, .seed = 11}}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(f32.ok());
  const RefTable initial = ReadTable(*f32, 0);
  const std::vector<uint8_t> raw = ReadRawRows(*k, kRows, rb);
  for (int64_t r = 0; r < kRows; ++r) {
    const std::vector<uint8_t> want = Quantized(q, &initial.weights[static_cast<size_t>(r * dim)], dim);
    ASSERT_EQ(0, std::memcmp(want.data(), raw.data() + r * rb, static_cast<size_t>(rb))) << "row " << r;
  }

  // Random rows written raw read back raw, and every lookup matches.
  std::mt19937_64 rng(static_cast<uint64_t>(q * 1000 + dim));
  const std::vector<uint8_t> written = RandomRaw(q, kRows, dim, rng);
  ASSERT_TRUE(WriteRawRows(*k, written, kRows, rb).ok());
  EXPECT_EQ(ReadRawRows(*k, kRows, rb), written);
  const std::vector<RefTable> tables = {Dequantize(q, written, kRows, dim)};
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "weighted" : "unweighted");
    RefLookup l;
    AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 29, 7, kRows, 0, 0, weighted);
    AddRandomFeature(l, rng, 0, SR_POOLING_MEAN, 17, 7, kRows, 1, dim + 1, weighted);
    AddRandomFeature(l, rng, 0, SR_POOLING_NONE, 9, 4, kRows, 2, 2 * dim + 3, weighted);
    int64_t rows = 0;
    for (size_t f = 0; f < 3; ++f) rows = std::max(rows, l.feature_output_row[f] + FeatureRows(l, f));
    const int64_t cols = 3 * dim + 4;
    GuardedOutput out(rows + 1, cols);
    ASSERT_TRUE(Forward(*k, l, out.tensor()).ok());
    const ExpectedOutput e = ReferenceOutput(tables, l, rows + 1, cols);
    EXPECT_TRUE(out.Matches(e.values, e.magnitude, kRelTol));
  }
}

INSTANTIATE_TEST_SUITE_P(
    BitsAndDims, QuantizedSweep,
    ::testing::Combine(::testing::Values(SR_ROW_QUANT_INT8, SR_ROW_QUANT_INT4, SR_ROW_QUANT_INT2),
                       ::testing::Values<int64_t>(1, 3, 5, 8, 17, 64, 127, 128, 256)),
    [](const auto& p) { return QuantLabel(std::get<0>(p.param)) + "_dim" + std::to_string(std::get<1>(p.param)); });

// Many ids run on the parallel path: the same bytes for 1 and 2 threads, and
// invalid ids are skipped under the ignore bounds check.
TEST(Quantized, ParallelEqualsSerialAndInvalidIdsAreSkipped) {
  constexpr int64_t kRows = 5000, kDim = 96;
  std::vector<float> outs[2];
  for (int threads : {1, 2}) {
    auto k = CreateKernel({{.name = "q", .rows = kRows, .dim = kDim, .dtype = kU8, .row_quantization = SR_ROW_QUANT_INT4}},
                          SR_OPTIMIZER_NONE, {}, {{"threads", std::to_string(threads)}});
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    std::mt19937_64 rng(5);
    RefLookup l;
    AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 2000, 12, kRows, 0, 0, true);
    l.indices[3] = kRows + 7;  // out of range
    GuardedOutput out(2000, kDim);
    int64_t invalid = -1;
    ASSERT_TRUE(Forward(*k, l, out.tensor(), SR_BOUNDS_CHECK_IGNORE, &invalid).ok());
    EXPECT_EQ(invalid, 1);
    for (int64_t r = 0; r < 2000; ++r)
      for (int64_t c = 0; c < kDim; ++c) outs[threads - 1].push_back(out.At(r, c));
    // The reference skips the invalid id too.
    l.indices[3] = -1;
    const RefTable t = Dequantize(SR_ROW_QUANT_INT4, ReadRawRows(*k, kRows, RowBytes(SR_ROW_QUANT_INT4, kDim)), kRows, kDim);
    const ExpectedOutput e = ReferenceOutput({t}, l, 2000, kDim);
    EXPECT_TRUE(out.Matches(e.values, e.magnitude, kRelTol));
  }
  EXPECT_EQ(0, std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)));
}

TEST(Quantized, RefusalsNameTheTable) {
  auto expect_refused = [](TableSpec spec, int32_t optimizer, const std::string& what) {
    auto k = CreateKernel({spec}, optimizer);
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), SR_INVALID_ARGUMENT);
    EXPECT_NE(k.status().message().find(what), std::string::npos) << k.status().message();
  };
  const TableSpec q{.name = "qt", .rows = 4, .dim = 8, .dtype = kU8, .row_quantization = SR_ROW_QUANT_INT8};
  expect_refused(q, SR_OPTIMIZER_SGD, "table 'qt': int8_rowwise rows are for inference: the optimizer must be none");
  TableSpec f32 = q;
  f32.dtype = kF32;
  expect_refused(f32, SR_OPTIMIZER_NONE, "int8_rowwise rows need weight dtype uint8, got float32");
  TableSpec unknown = q;
  unknown.row_quantization = 9;
  expect_refused(unknown, SR_OPTIMIZER_NONE, "row_quantization 9 is not one of");
  TableSpec huge = q;
  huge.init_min = -1e5;
  expect_refused(huge, SR_OPTIMIZER_NONE, "outside fp16's [-65504, 65504]");
  // uint8 without a quantization is not a weight type.
  TableSpec plain = q;
  plain.row_quantization = SR_ROW_QUANT_NONE;
  expect_refused(plain, SR_OPTIMIZER_NONE, "weight dtype uint8 is not supported");

  auto k = CreateKernel({q}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok());
  RefLookup l;
  std::mt19937_64 rng(1);
  AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 3, 2, 4, 0, 0);
  std::vector<float> grad(3 * 8, 1.0f);
  const Status s = Backward(*k, l, grad, 8);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("optimizer none"), std::string::npos) << s.message();
  // Raw rows of the wrong width are refused, nothing written.
  const std::vector<uint8_t> before = ReadRawRows(*k, 4, RowBytes(SR_ROW_QUANT_INT8, 8));
  EXPECT_FALSE(WriteRawRows(*k, std::vector<uint8_t>(4 * 8, 1), 4, 8).ok());
  EXPECT_EQ(ReadRawRows(*k, 4, RowBytes(SR_ROW_QUANT_INT8, 8)), before);
}

}  // namespace
}  // namespace shardrec::testing
