// Forward of the CPU kernel against the scalar reference: every dim class
// (below, at and above a vector, odd tails) x weight dtype x pooling x
// weighting, several features with their own batch sizes and output
// columns, strided outputs, empty bags, zero-bag features, a 200k-id bag,
// and the parallel path (bit-identical for 1 and 2 threads). Every output
// sits in a buffer of guard values that must survive untouched.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>

#include "kernel_test_util.h"

namespace shardrec::testing {
namespace {

using reference::RefLookup;
using reference::RefTable;

constexpr double kRelTol = 1e-5;

class ForwardSweep : public ::testing::TestWithParam<std::tuple<int64_t, DLDataType>> {};

TEST_P(ForwardSweep, EveryPoolingWeightedAndUnweightedMatchesTheReference) {
  const auto [dim, dtype] = GetParam();
  constexpr int64_t kRows = 257;
  auto k = CreateKernel({{.name = "sweep", .rows = kRows, .dim = dim, .dtype = dtype}},
                        SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const std::vector<RefTable> tables = {ReadTable(*k, 0)};
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "weighted" : "unweighted");
    std::mt19937_64 rng(static_cast<uint64_t>(dim) * 31 + dtype.code + weighted);
    RefLookup l;
    // Three features on one table, each with its own batch size, output
    // rows and columns; a column gap between them stays untouched.
    AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 37, 6, kRows, 0, 0, weighted);
    AddRandomFeature(l, rng, 0, SR_POOLING_MEAN, 23, 6, kRows, 1, dim + 1, weighted);
    AddRandomFeature(l, rng, 0, SR_POOLING_NONE, 11, 4, kRows, 2, 2 * dim + 3, weighted);
    int64_t rows = 0;
    for (size_t f = 0; f < 3; ++f)
      rows = std::max(rows, l.feature_output_row[f] + FeatureRows(l, f));
    rows += 1;  // a row nobody writes
    const int64_t cols = 3 * dim + 4;
    GuardedOutput out(rows, cols);
    ASSERT_TRUE(Forward(*k, l, out.tensor()).ok());
    const ExpectedOutput e = ReferenceOutput(tables, l, rows, cols);
    EXPECT_TRUE(out.Matches(e.values, e.magnitude, kRelTol));
  }
}

INSTANTIATE_TEST_SUITE_P(
    DimsAndDtypes, ForwardSweep,
    ::testing::Combine(::testing::Values<int64_t>(1, 3, 4, 16, 63, 128, 129, 256),
                       ::testing::Values(kF32, kF16, kBF16)),
    [](const auto& p) {
      return "dim" + std::to_string(std::get<0>(p.param)) + "_" +
             DTypeLabel(std::get<1>(p.param));
    });

class StridedOutput : public ::testing::TestWithParam<int64_t> {};

TEST_P(StridedOutput, ColumnMajorPaddedAndSkippingLayoutsMatch) {
  const int64_t dim = GetParam();
  auto k = CreateKernel({{.rows = 50, .dim = dim}}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const std::vector<RefTable> tables = {ReadTable(*k, 0)};
  std::mt19937_64 rng(static_cast<uint64_t>(dim));
  RefLookup l;
  AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 9, 5, 50, 0, 1, true);
  AddRandomFeature(l, rng, 0, SR_POOLING_NONE, 3, 3, 50, 9, 0, false);
  const int64_t rows = 9 + FeatureRows(l, 1);
  const int64_t cols = dim + 1;
  const ExpectedOutput e = ReferenceOutput(tables, l, rows, cols);
  struct Layout {
    const char* name;
    int64_t row_stride, col_stride;
  };
  for (const Layout& layout : {Layout{"column-major", 1, rows}, Layout{"padded rows", cols + 3, 1},
                               Layout{"every other column", 2 * cols, 2}}) {
    SCOPED_TRACE(layout.name);
    GuardedOutput out(rows, cols, layout.row_stride, layout.col_stride);
    ASSERT_TRUE(Forward(*k, l, out.tensor()).ok());
    EXPECT_TRUE(out.Matches(e.values, e.magnitude, kRelTol));
  }
}

INSTANTIATE_TEST_SUITE_P(Dims, StridedOutput, ::testing::Values<int64_t>(1, 63, 129));

TEST(Forward, EmptyBagsWriteZerosAndZeroBagFeaturesWriteNothing) {
  auto k = CreateKernel({{.rows = 10, .dim = 5}}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const std::vector<RefTable> tables = {ReadTable(*k, 0)};
  RefLookup l;
  l.AddFeature(0, SR_POOLING_SUM, {0, 2, 0}, {3, 4}, 0, 0);
  l.AddFeature(0, SR_POOLING_MEAN, {}, {}, 0, 5);  // no bags: writes nothing
  l.AddFeature(0, SR_POOLING_MEAN, {0, 0}, {}, 3, 0);
  l.AddFeature(0, SR_POOLING_NONE, {0, 0}, {}, 0, 5);  // no ids: writes nothing
  GuardedOutput out(6, 10);
  ASSERT_TRUE(Forward(*k, l, out.tensor()).ok());
  const ExpectedOutput e = ReferenceOutput(tables, l, 6, 10);
  EXPECT_TRUE(out.Matches(e.values, e.magnitude, kRelTol));
  EXPECT_EQ(out.At(0, 0), 0.0f);
  EXPECT_EQ(out.At(4, 4), 0.0f);  // mean of an empty bag
  EXPECT_EQ(out.At(0, 5), GuardedOutput::kSentinel);
}

TEST(Forward, ACallWithNoBagsSucceedsAndWritesNothing) {
  auto k = CreateKernel({{.rows = 10, .dim = 5}}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok());
  RefLookup none;  // zero features, offsets [0], no indices
  GuardedOutput out(2, 5);
  int64_t invalid = -1;
  EXPECT_TRUE(Forward(*k, none, out.tensor(), SR_BOUNDS_CHECK_FATAL, &invalid).ok());
  EXPECT_EQ(invalid, 0);
  RefLookup empty;
  empty.AddFeature(0, SR_POOLING_SUM, {}, {}, 0, 0);
  EXPECT_TRUE(Forward(*k, empty, out.tensor()).ok());
  EXPECT_TRUE(out.Untouched());
}

TEST(Forward, HugeBagOf200kIdsSumsExactly) {
  constexpr int64_t kRows = 1000, kDim = 19, kIds = 200000;
  auto k = CreateKernel({{.rows = kRows, .dim = kDim}}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok());
  // Multiples of 1/16 in [-2, 2): every partial sum of 200k of them is
  // below 2^19 and so exact in float32; any lost, repeated or misplaced id
  // shows.
  RefTable t = ReadTable(*k, 0);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kDim; ++c)
      t.W(r, c) = static_cast<float>((r * 7 + c * 13) % 64 - 32) / 16.0f;
  }
  WriteTable(*k, 0, t);
  std::mt19937_64 rng(5);
  std::uniform_int_distribution<int64_t> id(0, kRows - 1);
  std::vector<int64_t> ids(kIds);
  for (auto& x : ids) x = id(rng);
  RefLookup l;
  l.AddFeature(0, SR_POOLING_SUM, {2, kIds, 1}, [&] {
    std::vector<int64_t> all = {1, 2};
    all.insert(all.end(), ids.begin(), ids.end());
    all.push_back(3);
    return all;
  }(), 0, 0);
  l.AddFeature(0, SR_POOLING_MEAN, {kIds}, ids, 3, 0);
  GuardedOutput out(4, kDim);
  ASSERT_TRUE(Forward(*k, l, out.tensor()).ok());
  const ExpectedOutput e = ReferenceOutput({t}, l, 4, kDim);
  for (int64_t c = 0; c < kDim; ++c) {
    EXPECT_EQ(out.At(1, c), e.values[static_cast<size_t>(kDim + c)]) << "column " << c;
    EXPECT_NEAR(out.At(3, c), e.values[static_cast<size_t>(3 * kDim + c)], 1e-6);
  }
  EXPECT_TRUE(out.Matches(e.values, e.magnitude, kRelTol));
}

// Big enough for the parallel path; two tables of different dims.
RefLookup BigLookup(uint64_t seed, int64_t rows0, int64_t dim0, int64_t rows1) {
  std::mt19937_64 rng(seed);
  RefLookup l;
  AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 700, 30, rows0, 0, 0, true);
  AddRandomFeature(l, rng, 1, SR_POOLING_MEAN, 500, 30, rows1, 0, dim0);
  AddRandomFeature(l, rng, 0, SR_POOLING_NONE, 40, 10, rows0, 700, 0, false);
  return l;
}

TEST(Forward, ParallelPathMatchesTheReferenceAndIsTheSameForOneAndTwoThreads) {
  const std::vector<TableSpec> specs = {{.name = "a", .rows = 3000, .dim = 64},
                                        {.name = "b", .rows = 500, .dim = 17, .dtype = kBF16}};
  auto one = CreateKernel(specs, SR_OPTIMIZER_NONE, {}, {{"threads", "1"}});
  auto two = CreateKernel(specs, SR_OPTIMIZER_NONE, {}, {{"threads", "2"}});
  auto no_prefetch = CreateKernel(specs, SR_OPTIMIZER_NONE, {}, {{"prefetch_distance", "0"}});
  auto far_prefetch = CreateKernel(specs, SR_OPTIMIZER_NONE, {}, {{"prefetch_distance", "64"},
                                                                 {"huge_pages", "false"}});
  ASSERT_TRUE(one.ok() && two.ok() && no_prefetch.ok() && far_prefetch.ok());
  const RefLookup l = BigLookup(11, 3000, 64, 500);
  ASSERT_GT(l.indices.size(), 10000u);
  const int64_t rows = 700 + FeatureRows(l, 2), cols = 64 + 17;
  GuardedOutput out1(rows, cols), out2(rows, cols), out3(rows, cols), out4(rows, cols);
  ASSERT_TRUE(Forward(*one, l, out1.tensor()).ok());
  ASSERT_TRUE(Forward(*two, l, out2.tensor()).ok());
  ASSERT_TRUE(Forward(*no_prefetch, l, out3.tensor()).ok());
  ASSERT_TRUE(Forward(*far_prefetch, l, out4.tensor()).ok());
  const ExpectedOutput e = ReferenceOutput({ReadTable(*one, 0), ReadTable(*one, 1)}, l, rows, cols);
  EXPECT_TRUE(out2.Matches(e.values, e.magnitude, kRelTol));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(std::bit_cast<uint32_t>(out1.At(r, c)), std::bit_cast<uint32_t>(out2.At(r, c)));
      ASSERT_EQ(std::bit_cast<uint32_t>(out1.At(r, c)), std::bit_cast<uint32_t>(out3.At(r, c)));
      ASSERT_EQ(std::bit_cast<uint32_t>(out1.At(r, c)), std::bit_cast<uint32_t>(out4.At(r, c)));
    }
  }
}

TEST(Forward, StridedInputTensorsAreHonoured) {
  auto k = CreateKernel({{.rows = 20, .dim = 6}}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok());
  const std::vector<RefTable> tables = {ReadTable(*k, 0)};
  RefLookup l;
  l.AddFeature(0, SR_POOLING_SUM, {2, 3}, {4, 5, 6, 7, 4}, 0, 0, {0.5f, 1.5f, 1.0f, 0.75f, 2.0f});
  // The same data, every other element.
  std::vector<int64_t> offsets2, indices2;
  std::vector<float> weights2;
  for (int64_t v : l.offsets) offsets2.insert(offsets2.end(), {v, -1});
  for (int64_t v : l.indices) indices2.insert(indices2.end(), {v, -1});
  for (float v : l.per_sample_weights) weights2.insert(weights2.end(), {v, -1.0f});
  LookupArgs la(l);
  Tensor offsets(offsets2.data(), DLDataType{kDLInt, 64, 1}, {3}, {2});
  Tensor indices(indices2.data(), DLDataType{kDLInt, 64, 1}, {5}, {2});
  Tensor weights(weights2.data(), kF32, {5}, {2});
  la.args.offsets = offsets.get();
  la.args.indices = indices.get();
  la.args.per_sample_weights = weights.get();
  GuardedOutput out(2, 6);
  sr_kernel_forward_args f{};
  f.struct_size = SR_STRUCT_SIZE(sr_kernel_forward_args, output);
  f.lookup = &la.args;
  f.output = out.tensor();
  ASSERT_TRUE(k->Forward(f).ok());
  const ExpectedOutput e = ReferenceOutput(tables, l, 2, 6);
  EXPECT_TRUE(out.Matches(e.values, e.magnitude, kRelTol));
}

}  // namespace
}  // namespace shardrec::testing
