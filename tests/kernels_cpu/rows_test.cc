// Creation, layout and row I/O of the CPU kernel: initial weights equal the
// SDK initializer (so shards equal blocks of the whole table), read/write
// round trips in every dtype and layout, reset restores the initial values
// and state, rows out of range change nothing, bad arguments to create are
// refused by name, the capability attributes, and concurrent calls on one
// object.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <functional>
#include <map>
#include <numeric>
#include <cmath>
#include <cstring>
#include <random>
#include <string_view>
#include <thread>

#include "kernel_test_util.h"
#include "shardrec/sdk/init.hpp"

namespace shardrec::testing {
namespace {

using reference::RefLookup;
using reference::RefTable;

sr_kernel_rows_args RowsArgs(int32_t table, Tensor& rows, Tensor* weights, Tensor* state) {
  sr_kernel_rows_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
  a.table = table;
  a.rows = rows.get();
  a.weights = weights ? weights->get() : nullptr;
  a.state = state ? state->get() : nullptr;
  return a;
}

constexpr DLDataType kI64{kDLInt, 64, 1};

class InitialTable : public ::testing::TestWithParam<DLDataType> {};

TEST_P(InitialTable, EqualsTheSdkInitializerAndShardsEqualBlocksOfTheWholeTable) {
  const DLDataType dtype = GetParam();
  const TableSpec whole{.name = "whole", .rows = 30, .dim = 9, .dtype = dtype, .init_min = -0.3,
                        .init_max = 0.7, .seed = 99};
  TableSpec shard = whole;
  shard.name = "shard";
  shard.rows = 11;
  shard.dim = 4;
  shard.global_row_offset = 13;
  shard.global_col_offset = 5;
  for (int32_t optimizer : {SR_OPTIMIZER_NONE, SR_OPTIMIZER_ADAGRAD}) {
    auto k = CreateKernel({whole, shard}, optimizer, {});
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    const RefTable got_whole = ReadTable(*k, 0);
    const RefTable got_shard = ReadTable(*k, 1);
    const std::vector<sr_kernel_table> descs = Describe({whole, shard});
    const reference::RefOptimizer opt = reference::DefaultOptimizer(optimizer);
    EXPECT_EQ(got_whole.weights, reference::InitialTable(descs[0], opt).weights);
    EXPECT_EQ(got_shard.weights, reference::InitialTable(descs[1], opt).weights);
    for (int64_t r = 0; r < shard.rows; ++r) {
      for (int64_t c = 0; c < shard.dim; ++c) {
        ASSERT_EQ(got_shard.W(r, c), got_whole.W(r + 13, c + 5)) << r << ", " << c;
      }
    }
    for (int64_t r = 0; r < 3; ++r) {  // spot-check against the SDK directly
      const float w = sdk::InitialWeight(99, r, 0, -0.3, 0.7);
      EXPECT_EQ(got_whole.W(r, 0), reference::RoundToDType(w, dtype));
      EXPECT_GE(got_whole.W(r, 0), -0.3f);
      EXPECT_LE(got_whole.W(r, 0), 0.7f);
    }
    for (float s : got_whole.state) EXPECT_EQ(s, 0.0f);
  }
}

// The kernel draws whole rows with SIMD lanes (initial_weights_simd.cc):
// every element must still be the SDK's scalar value, bit for bit, at any
// width (full vectors and tails), column offset, range and seed, at
// creation and after a reset.
TEST(InitialWeights, EveryElementIsTheSdkValueBitForBitAtAnyWidth) {
  std::mt19937_64 rng(5);
  for (int64_t dim : {1, 3, 7, 8, 9, 15, 16, 17, 33, 64, 100}) {
    const double lo = -std::ldexp(1.0, -static_cast<int>(rng() % 8)) * (1 + static_cast<double>(rng() % 97) / 97);
    const double hi = lo + std::ldexp(1.0, -static_cast<int>(rng() % 5)) * (1 + static_cast<double>(rng() % 89) / 89);
    const TableSpec spec{.name = "t", .rows = 40, .dim = dim, .dtype = kF32, .init_min = lo, .init_max = hi,
                         .seed = rng(), .global_row_offset = static_cast<int64_t>(rng() % 1000000),
                         .global_col_offset = static_cast<int64_t>(rng() % 50)};
    SCOPED_TRACE(::testing::Message() << "dim " << dim << ", [" << lo << ", " << hi << ")");
    auto k = CreateKernel({spec}, SR_OPTIMIZER_ADAGRAD);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    auto expect_sdk = [&](const char* when) {
      const RefTable got = ReadTable(*k, 0);
      for (int64_t r = 0; r < spec.rows; ++r) {
        for (int64_t c = 0; c < dim; ++c) {
          const float want = sdk::InitialWeight(spec.seed, spec.global_row_offset + r, spec.global_col_offset + c, lo, hi);
          ASSERT_EQ(std::bit_cast<uint32_t>(got.W(r, c)), std::bit_cast<uint32_t>(want))
              << when << ": row " << r << ", column " << c;
        }
      }
    };
    expect_sdk("created");
    // Scribble over every row, then reset them all.
    std::vector<int64_t> rows(static_cast<size_t>(spec.rows));
    std::iota(rows.begin(), rows.end(), 0);
    std::vector<float> junk(static_cast<size_t>(spec.rows * dim), 42.0f);
    std::vector<float> state(static_cast<size_t>(spec.rows * dim), 3.0f);
    Tensor rows_t(rows.data(), kI64, {spec.rows});
    Tensor junk_t(junk.data(), kF32, {spec.rows, dim});
    Tensor state_t(state.data(), kF32, {spec.rows, dim});
    ASSERT_TRUE(k->WriteRows(RowsArgs(0, rows_t, &junk_t, &state_t)).ok());
    ASSERT_TRUE(k->ResetRows(RowsArgs(0, rows_t, nullptr, nullptr)).ok());
    expect_sdk("reset");
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, InitialTable, ::testing::Values(kF32, kF16, kBF16),
                         [](const auto& p) { return DTypeLabel(p.param); });

TEST(Rows, WriteThenReadRoundTripsInAnyLayoutAndTheLastDuplicateWins) {
  auto k = CreateKernel({{.name = "a", .rows = 10, .dim = 5}}, SR_OPTIMIZER_ADAM);
  ASSERT_TRUE(k.ok());
  const RefTable before = ReadTable(*k, 0);
  std::vector<int64_t> rows = {7, 2, 7};
  // Weights [3, 5] with column stride 2 and row stride 11; state [3, 10].
  std::vector<float> wbuf(3 * 11, -1.0f), state(3 * 10);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t c = 0; c < 5; ++c) wbuf[static_cast<size_t>(i * 11 + 2 * c)] = 10.0f * i + c;
    for (int64_t c = 0; c < 10; ++c) state[static_cast<size_t>(i * 10 + c)] = 100.0f * i + c;
  }
  Tensor rows_t(rows.data(), kI64, {3});
  Tensor w(wbuf.data(), kF32, {3, 5}, {11, 2});
  Tensor s(state.data(), kF32, {3, 10});
  ASSERT_TRUE(k->WriteRows(RowsArgs(0, rows_t, &w, &s)).ok());
  const RefTable after = ReadTable(*k, 0);
  for (int64_t c = 0; c < 5; ++c) {
    EXPECT_EQ(after.W(7, c), 20.0f + c) << "the last write of row 7 wins";
    EXPECT_EQ(after.W(2, c), 10.0f + c);
    EXPECT_EQ(after.W(3, c), before.W(3, c));
  }
  EXPECT_EQ(after.state[7 * 10 + 9], 209.0f);
  // Read back through a column-major tensor.
  std::vector<float> out(2 * 5, 0.0f);
  std::vector<int64_t> read_rows = {2, 7};
  Tensor read_t(read_rows.data(), kI64, {2});
  Tensor o(out.data(), kF32, {2, 5}, {1, 2});
  ASSERT_TRUE(k->ReadRows(RowsArgs(0, read_t, &o, nullptr)).ok());
  for (int64_t c = 0; c < 5; ++c) {
    EXPECT_EQ(out[static_cast<size_t>(c * 2)], 10.0f + c);
    EXPECT_EQ(out[static_cast<size_t>(c * 2 + 1)], 20.0f + c);
  }
}

// Calls of thousands of rows copy on the kernel's threads (a row cache's
// loads and write-backs): the same rows as one thread, the last copy of a
// duplicate still winning, in contiguous and strided layouts.
TEST(Rows, ThousandsOfRowsCopyOnThreadsAsOneAndTheLastDuplicateWins) {
  constexpr int64_t kRows = 5000, kDim = 7, kN = 4000;
  auto k = CreateKernel({{.name = "a", .rows = kRows, .dim = kDim}}, SR_OPTIMIZER_ADAM);
  ASSERT_TRUE(k.ok());
  const RefTable before = ReadTable(*k, 0);
  const int64_t sd = before.state_dim;
  std::mt19937_64 rng(5);
  std::vector<int64_t> rows(kN);
  for (auto& r : rows) r = static_cast<int64_t>(rng() % 1500) * 3 + static_cast<int64_t>(rng() % 2);  // duplicates
  for (const bool strided : {false, true}) {
    SCOPED_TRACE(strided ? "strided" : "contiguous");
    const float base = strided ? 0.5f : 0.0f;
    // Weights with column stride 2 when strided; state column-major when strided.
    std::vector<float> wbuf(static_cast<size_t>(kN * kDim * 2)), sbuf(static_cast<size_t>(kN * sd));
    std::map<int64_t, int64_t> last;  // row -> the entry that wins
    for (int64_t i = 0; i < kN; ++i) {
      last[rows[static_cast<size_t>(i)]] = i;
      for (int64_t c = 0; c < kDim; ++c) wbuf[static_cast<size_t>(strided ? i * kDim * 2 + 2 * c : i * kDim + c)] = base + 10.0f * i + c;
      for (int64_t c = 0; c < sd; ++c) sbuf[static_cast<size_t>(strided ? c * kN + i : i * sd + c)] = base - 10.0f * i - c;
    }
    Tensor rows_t(rows.data(), kI64, {kN});
    Tensor w = strided ? Tensor(wbuf.data(), kF32, {kN, kDim}, {kDim * 2, 2}) : Tensor(wbuf.data(), kF32, {kN, kDim});
    Tensor st = strided ? Tensor(sbuf.data(), kF32, {kN, sd}, {1, kN}) : Tensor(sbuf.data(), kF32, {kN, sd});
    ASSERT_TRUE(k->WriteRows(RowsArgs(0, rows_t, &w, &st)).ok());
    const RefTable after = ReadTable(*k, 0);
    for (int64_t r = 0; r < kRows; ++r) {
      const auto it = last.find(r);
      for (int64_t c = 0; c < kDim; ++c) {
        ASSERT_EQ(after.W(r, c), it == last.end() ? before.W(r, c) : base + 10.0f * it->second + c) << r;
      }
      for (int64_t c = 0; c < sd && it != last.end(); ++c) {
        ASSERT_EQ(after.state[static_cast<size_t>(r * sd + c)], base - 10.0f * it->second - c) << r;
      }
    }
    // Read them back, duplicates and all, through the same layouts.
    std::vector<float> wout(wbuf.size(), -1.0f), sout(sbuf.size(), -1.0f);
    Tensor wo = strided ? Tensor(wout.data(), kF32, {kN, kDim}, {kDim * 2, 2}) : Tensor(wout.data(), kF32, {kN, kDim});
    Tensor so = strided ? Tensor(sout.data(), kF32, {kN, sd}, {1, kN}) : Tensor(sout.data(), kF32, {kN, sd});
    ASSERT_TRUE(k->ReadRows(RowsArgs(0, rows_t, &wo, &so)).ok());
    for (int64_t i = 0; i < kN; ++i) {
      const int64_t winner = last[rows[static_cast<size_t>(i)]];
      for (int64_t c = 0; c < kDim; ++c) {
        ASSERT_EQ(wout[static_cast<size_t>(strided ? i * kDim * 2 + 2 * c : i * kDim + c)], base + 10.0f * winner + c) << i;
      }
      for (int64_t c = 0; c < sd; ++c) {
        ASSERT_EQ(sout[static_cast<size_t>(strided ? c * kN + i : i * sd + c)], base - 10.0f * winner - c) << i;
      }
    }
  }
}

class HalfRows : public ::testing::TestWithParam<DLDataType> {};

TEST_P(HalfRows, SixteenBitPatternsRoundTripUnchanged) {
  const DLDataType dtype = GetParam();
  auto k = CreateKernel({{.rows = 4, .dim = 6, .dtype = dtype}}, SR_OPTIMIZER_SGD);
  ASSERT_TRUE(k.ok());
  // Normal, subnormal, zero, -zero, inf, NaN patterns.
  std::vector<uint16_t> bits = {0x3C00, 0x0001, 0x0000, 0x8000, 0x7C00, 0x7E01,
                                0x7F80, 0x0040, 0xFF80, 0x1234, 0xBEEF, 0x7FC1};
  std::vector<int64_t> rows = {3, 1};
  Tensor rows_t(rows.data(), kI64, {2});
  Tensor w(bits.data(), dtype, {2, 6});
  ASSERT_TRUE(k->WriteRows(RowsArgs(0, rows_t, &w, nullptr)).ok());
  std::vector<uint16_t> back(12, 0);
  Tensor b(back.data(), dtype, {2, 6});
  ASSERT_TRUE(k->ReadRows(RowsArgs(0, rows_t, &b, nullptr)).ok());
  EXPECT_EQ(back, bits);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfRows, ::testing::Values(kF16, kBF16),
                         [](const auto& p) { return DTypeLabel(p.param); });

TEST(Rows, ResetRestoresInitialWeightsAndOptimizerState) {
  for (int32_t optimizer :
       {SR_OPTIMIZER_ADAGRAD, SR_OPTIMIZER_ROWWISE_ADAGRAD, SR_OPTIMIZER_ADAM}) {
    SCOPED_TRACE("optimizer " + std::to_string(optimizer));
    const bool adagrad = optimizer != SR_OPTIMIZER_ADAM;
    const OptionList params = adagrad ? OptionList{{"initial_accumulator_value", "0.3"}}
                                      : OptionList{};
    auto k = CreateKernel({{.rows = 600, .dim = 6, .dtype = kBF16}}, optimizer, params);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    const RefTable initial = ReadTable(*k, 0);
    for (float s : initial.state) ASSERT_EQ(s, adagrad ? 0.3f : 0.0f);
    // Train every row once, so every row differs from its initial value.
    RefLookup l;
    l.AddFeature(0, SR_POOLING_SUM, {600}, Iota(600), 0, 0);
    std::vector<float> grad = {1.0f, -1.0f, 0.5f, 2.0f, -0.5f, 0.25f};
    ASSERT_TRUE(Backward(*k, l, grad, 6).ok());
    const RefTable trained = ReadTable(*k, 0);
    // A few rows (serial path), then many with duplicates (parallel path).
    std::vector<int64_t> few = {5, 0, 5};
    Tensor few_t(few.data(), kI64, {3});
    ASSERT_TRUE(k->ResetRows(RowsArgs(0, few_t, nullptr, nullptr)).ok());
    std::vector<int64_t> many;
    for (int64_t r = 100; r < 500; ++r) many.push_back(r % 2 ? r : 599 - r);
    many.push_back(100);
    Tensor many_t(many.data(), kI64, {static_cast<int64_t>(many.size())});
    ASSERT_TRUE(k->ResetRows(RowsArgs(0, many_t, nullptr, nullptr)).ok());
    const RefTable after = ReadTable(*k, 0);
    auto is_reset = [&](int64_t r) {
      return r == 0 || r == 5 || std::find(many.begin(), many.end(), r) != many.end();
    };
    for (int64_t r = 0; r < 600; ++r) {
      const RefTable& want = is_reset(r) ? initial : trained;
      for (int64_t c = 0; c < 6; ++c) ASSERT_EQ(after.W(r, c), want.W(r, c)) << r;
      for (int64_t c = 0; c < after.state_dim; ++c) {
        const size_t i = static_cast<size_t>(r * after.state_dim + c);
        ASSERT_EQ(after.state[i], want.state[i]) << r;
      }
      if (!is_reset(r)) {
        ASSERT_NE(after.W(r, 0), initial.W(r, 0)) << r;
      }
    }
  }
}

TEST(Rows, RowsOutOfRangeOrBadTensorsChangeNothing) {
  auto k = CreateKernel({{.name = "a", .rows = 10, .dim = 4, .dtype = kF16}},
                        SR_OPTIMIZER_ROWWISE_ADAGRAD);
  ASSERT_TRUE(k.ok());
  const RefTable before = ReadTable(*k, 0);
  std::vector<int64_t> rows = {1, 10};
  Tensor rows_t(rows.data(), kI64, {2});
  std::vector<uint16_t> w16(8, 0x3C00);
  std::vector<float> w32(8, 1.0f), st(2, 5.0f), st_bad(4, 5.0f);
  Tensor w(w16.data(), kF16, {2, 4});
  Tensor s(st.data(), kF32, {2, 1});
  struct Case {
    const char* name;
    std::function<Status()> call;
    int32_t code;
    const char* message;
  };
  std::vector<int64_t> ok_rows = {1, 2}, negative = {-1};
  Tensor ok_t(ok_rows.data(), kI64, {2});
  Tensor neg_t(negative.data(), kI64, {1});
  Tensor w_f32(w32.data(), kF32, {2, 4});
  Tensor w_wide(w16.data(), kF16, {2, 3});
  Tensor s_wide(st_bad.data(), kF32, {2, 2});
  Tensor rows_i32(rows.data(), DLDataType{kDLInt, 32, 1}, {2});
  const std::vector<Case> cases = {
      {"write row 10", [&] { return k->WriteRows(RowsArgs(0, rows_t, &w, &s)); }, SR_OUT_OF_RANGE,
       "write_rows: rows[1] = 10 is out of range for table 'a' with 10 rows"},
      {"read row -1", [&] { return k->ReadRows(RowsArgs(0, neg_t, &w, nullptr)); },
       SR_OUT_OF_RANGE, "read_rows: rows[0] = -1 is out of range"},
      {"reset row 10", [&] { return k->ResetRows(RowsArgs(0, rows_t, nullptr, nullptr)); },
       SR_OUT_OF_RANGE, "reset_rows: rows[1] = 10 is out of range"},
      {"weights dtype", [&] { return k->WriteRows(RowsArgs(0, ok_t, &w_f32, &s)); },
       SR_INVALID_ARGUMENT, "weights: expected dtype float16, got float32"},
      {"weights shape", [&] { return k->WriteRows(RowsArgs(0, ok_t, &w_wide, &s)); },
       SR_INVALID_ARGUMENT, "weights: expected shape [2, 4], got [2, 3]"},
      {"state shape", [&] { return k->WriteRows(RowsArgs(0, ok_t, &w, &s_wide)); },
       SR_INVALID_ARGUMENT, "state: expected extent 1 in dimension 1"},
      {"table index", [&] { return k->WriteRows(RowsArgs(3, ok_t, &w, &s)); },
       SR_INVALID_ARGUMENT, "write_rows: table 3 is out of range (the kernel holds 1 tables)"},
      {"rows dtype", [&] { return k->WriteRows(RowsArgs(0, rows_i32, &w, &s)); },
       SR_INVALID_ARGUMENT, "rows: expected dtype int64, got int32"},
      {"reset with weights", [&] { return k->ResetRows(RowsArgs(0, ok_t, &w, nullptr)); },
       SR_INVALID_ARGUMENT, "reset_rows: weights and state must be NULL"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Status st_result = c.call();
    EXPECT_EQ(st_result.code(), c.code) << st_result.ToString();
    EXPECT_NE(st_result.message().find(c.message), std::string::npos) << st_result.message();
    const RefTable now = ReadTable(*k, 0);
    EXPECT_EQ(now.weights, before.weights);
    EXPECT_EQ(now.state, before.state);
  }
}

TEST(Rows, TableInfoDescribesTheLayoutOfEachOptimizer) {
  struct Want {
    int32_t optimizer;
    int64_t state_dim;
  };
  for (const Want& want : {Want{SR_OPTIMIZER_NONE, 0}, Want{SR_OPTIMIZER_SGD, 0},
                           Want{SR_OPTIMIZER_ADAGRAD, 12}, Want{SR_OPTIMIZER_ROWWISE_ADAGRAD, 1},
                           Want{SR_OPTIMIZER_ADAM, 24}}) {
    auto k = CreateKernel({{.rows = 7, .dim = 12, .dtype = kBF16}, {.rows = 0, .dim = 3}},
                          want.optimizer);
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    auto info = k->TableInfo(0);
    ASSERT_TRUE(info.ok());
    EXPECT_EQ(info->num_rows, 7);
    EXPECT_EQ(info->dim, 12);
    EXPECT_EQ(info->weight_dtype.code, kDLBfloat);
    EXPECT_EQ(info->state_dim, want.state_dim);
    EXPECT_EQ(info->state_dtype.code, kDLFloat);
    EXPECT_EQ(info->state_dtype.bits, 32);
    EXPECT_EQ(info->bytes, 7 * 12 * 2 + 7 * want.state_dim * 4);
    auto empty = k->TableInfo(1);
    ASSERT_TRUE(empty.ok());
    EXPECT_EQ(empty->bytes, 0);
    const Status bad = k->TableInfo(2).status();
    EXPECT_EQ(bad.code(), SR_INVALID_ARGUMENT);
    EXPECT_NE(bad.message().find("get_table_info: table 2 is out of range"), std::string::npos);
  }
}

TEST(Create, BadArgumentsAreRefusedByName) {
  struct Case {
    const char* name;
    std::vector<TableSpec> tables;
    int32_t optimizer;
    OptionList params;
    OptionList options;
    const char* message;
  };
  const TableSpec good{.name = "t", .rows = 4, .dim = 2};
  const std::vector<Case> cases = {
      {"dim 0", {{.name = "t", .rows = 4, .dim = 0}}, SR_OPTIMIZER_SGD, {}, {},
       "table 't': dim 0 < 1"},
      {"negative rows", {{.name = "t", .rows = -1, .dim = 2}}, SR_OPTIMIZER_SGD, {}, {},
       "table 't': num_rows -1 < 0"},
      {"float64 weights", {{.name = "t", .rows = 4, .dim = 2, .dtype = {kDLFloat, 64, 1}}},
       SR_OPTIMIZER_SGD, {}, {},
       "table 't': weight dtype float64 is not supported (float32, float16, bfloat16)"},
      {"init range", {{.name = "t", .rows = 4, .dim = 2, .init_min = 1, .init_max = 0}},
       SR_OPTIMIZER_SGD, {}, {}, "table 't': init range [1.000000, 0.000000] is not"},
      {"unknown option", {good}, SR_OPTIMIZER_SGD, {}, {{"thread", "2"}},
       "unknown option 'thread' (accepted: huge_pages, prefetch_distance, threads)"},
      {"threads", {good}, SR_OPTIMIZER_SGD, {}, {{"threads", "-1"}},
       "option 'threads' must be in [0, 4096]"},
      {"threads text", {good}, SR_OPTIMIZER_SGD, {}, {{"threads", "two"}},
       "option 'threads' must be an integer, got 'two'"},
      {"prefetch", {good}, SR_OPTIMIZER_SGD, {}, {{"prefetch_distance", "5000"}},
       "option 'prefetch_distance' must be in [0, 1024]"},
      {"huge_pages", {good}, SR_OPTIMIZER_SGD, {}, {{"huge_pages", "maybe"}},
       "option 'huge_pages' must be true or false, got 'maybe'"},
      {"unknown param", {good}, SR_OPTIMIZER_ADAM, {{"momentum", "0.9"}}, {},
       "optimizer adam: unknown option 'momentum' (accepted: beta1, beta2, eps, learning_rate, "
       "weight_decay)"},
      {"param of adam given to sgd", {good}, SR_OPTIMIZER_SGD, {{"beta1", "0.8"}}, {},
       "optimizer sgd: parameter 'beta1' does not apply to this optimizer (accepted: "
       "learning_rate, weight_decay)"},
      {"eps for sgd", {good}, SR_OPTIMIZER_SGD, {{"eps", "1e-3"}}, {},
       "parameter 'eps' does not apply"},
      {"lr without optimizer", {good}, SR_OPTIMIZER_NONE, {{"learning_rate", "0.1"}}, {},
       "optimizer none: parameter 'learning_rate' does not apply to this optimizer (accepted: "
       "none)"},
      {"optimizer 9", {good}, 9, {}, {}, "optimizer 9 is not one of none (0), sgd (1)"},
      {"negative lr", {good}, SR_OPTIMIZER_SGD, {{"learning_rate", "-0.1"}}, {},
       "learning_rate must be a finite number >= 0"},
      {"lr text", {good}, SR_OPTIMIZER_SGD, {{"learning_rate", "fast"}}, {},
       "option 'learning_rate' must be a number, got 'fast'"},
      {"beta1 of 1", {good}, SR_OPTIMIZER_ADAM, {{"beta1", "1"}}, {}, "beta1 must be in [0, 1)"},
      {"initial accumulator", {good}, SR_OPTIMIZER_ADAGRAD,
       {{"initial_accumulator_value", "-1"}}, {}, "initial_accumulator_value must be a finite"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto k = CreateKernel(c.tables, c.optimizer, c.params, c.options);
    ASSERT_FALSE(k.ok());
    EXPECT_EQ(k.status().code(), SR_INVALID_ARGUMENT);
    EXPECT_NE(k.status().message().find(c.message), std::string::npos) << k.status().message();
  }
}

TEST(Create, OnlyTheCpuDeviceIsAccepted) {
  const std::vector<sr_kernel_table> descs = Describe({{.rows = 4, .dim = 2}});
  sr_kernel_create_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_kernel_create_args, options);
  a.device = {kDLCUDA, 1};
  a.tables = descs.data();
  a.num_tables = 1;
  a.optimizer = SR_OPTIMIZER_SGD;
  auto k = Kernel::Create(CpuKernelRef(), a);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(k.status().message().find("device: the cpu kernel runs on kDLCPU (device type 1), got "
                                      "device type 2 id 1"),
            std::string::npos)
      << k.status().message();
}

TEST(Create, OptionsAreAcceptedAndBigTablesUseHugePagesOrNot) {
  for (const char* huge : {"true", "false"}) {
    // 5000 x 128 float32 = 2.4 MiB, above the huge-page threshold.
    auto k = CreateKernel({{.rows = 5000, .dim = 128}}, SR_OPTIMIZER_ROWWISE_ADAGRAD, {},
                          {{"threads", "1"}, {"prefetch_distance", "0"}, {"huge_pages", huge}});
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    RefLookup l;
    l.AddFeature(0, SR_POOLING_SUM, {3}, {4999, 0, 2500}, 0, 0);
    GuardedOutput out(1, 128);
    ASSERT_TRUE(Forward(*k, l, out.tensor()).ok());
    const ExpectedOutput e = ReferenceOutput({ReadTable(*k, 0)}, l, 1, 128);
    EXPECT_TRUE(out.Matches(e.values, e.magnitude, 1e-5));
  }
}

std::vector<std::string> StringList(const sr_named_value& v) {
  std::vector<std::string> out;
  for (size_t i = 0; i < v.value_size; ++i) out.emplace_back(v.value.string_list[i]);
  return out;
}

TEST(Attributes, DeclareTheKernelsCapabilities) {
  const sr_component& c = *CpuKernelRef().component;
  std::map<std::string, const sr_named_value*> attrs;
  for (size_t i = 0; i < c.attributes.count; ++i)
    attrs[c.attributes.values[i].name] = &c.attributes.values[i];
  using V = std::vector<std::string>;
  ASSERT_TRUE(attrs.count("devices"));
  EXPECT_EQ(StringList(*attrs["devices"]), V({"cpu"}));
  EXPECT_EQ(StringList(*attrs["weight_dtypes"]), V({"float32", "float16", "bfloat16", "int8_rowwise", "int4_rowwise", "int2_rowwise"}));
  EXPECT_EQ(StringList(*attrs["poolings"]), V({"sum", "mean", "none"}));
  EXPECT_EQ(StringList(*attrs["optimizers"]),
            V({"none", "sgd", "adagrad", "rowwise_adagrad", "adam"}));
  EXPECT_EQ(StringList(*attrs["optimizer_state_dim"]),
            V({"none=0", "sgd=0", "adagrad=dim", "rowwise_adagrad=1", "adam=2*dim"}));
  EXPECT_EQ(StringList(*attrs["bounds_check_modes"]), V({"fatal", "warning", "ignore", "none"}));
  ASSERT_TRUE(attrs.count("deterministic_backward"));
  EXPECT_EQ(attrs["deterministic_backward"]->type, SR_VALUE_BOOL);
  EXPECT_EQ(attrs["deterministic_backward"]->value.int64_value, 1);
  EXPECT_EQ(attrs["thread_safe"]->value.int64_value, 1);
}

TEST(Concurrency, CallsOnOneKernelFromTwoThreadsAreSerialised) {
  auto k = CreateKernel({{.rows = 200, .dim = 24}}, SR_OPTIMIZER_SGD);
  ASSERT_TRUE(k.ok());
  std::mt19937_64 rng(9);
  RefLookup l;
  AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 64, 8, 200, 0, 0, true);
  GuardedOutput expected(64, 24);
  ASSERT_TRUE(Forward(*k, l, expected.tensor()).ok());
  std::atomic<int> mismatches{0};
  auto worker = [&] {
    for (int i = 0; i < 40; ++i) {
      GuardedOutput out(64, 24);
      if (!Forward(*k, l, out.tensor()).ok()) ++mismatches;
      for (int64_t r = 0; r < 64; ++r) {
        for (int64_t c = 0; c < 24; ++c) mismatches += out.At(r, c) != expected.At(r, c);
      }
    }
  };
  std::thread a(worker), b(worker);
  a.join();
  b.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace shardrec::testing
