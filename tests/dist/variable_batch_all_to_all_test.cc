// VariableBatchPooledAllToAll against the seeds' WE-4 (the 000 version):
// kjt_split [1, 2], dims [[2], [3, 3]], per-feature batches f0 2/1, f1 1/2,
// f2 3/2. Input splits r0 [4, 2], r1 [12, 12]; output splits r0 [4, 12],
// r1 [2, 12]; outputs of 16 and 14 values, each source's block in rank order.
#include "ranks_fixture.h"
#include "shardrec/core/dist/variable_batch_all_to_all.h"

namespace shardrec {
namespace {

using VariableBatchTest = RanksTest;
using VV = std::vector<std::vector<int64_t>>;
using V = std::vector<int64_t>;

const VV kDims = {{2}, {3, 3}};
const VV kBatchPerRank[2] = {{{2}, {1}}, {{1, 3}, {2, 2}}};
const V kPreA2a[2] = {{2, 1, 3}, {1, 2, 2}};

TEST(VariableBatchSplitsTest, SeedWE4Splits) {
  for (int r = 0; r < 2; ++r) {
    auto s = VariableBatchPooledSplits(r, kDims, kBatchPerRank[r], kPreA2a[r]);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    EXPECT_EQ(s->input, r == 0 ? (V{4, 2}) : (V{12, 12}));
    EXPECT_EQ(s->output, r == 0 ? (V{4, 12}) : (V{2, 12}));
  }
  EXPECT_FALSE(VariableBatchPooledSplits(0, kDims, {{2}}, kPreA2a[0]).ok()) << "one batch list for two ranks";
  EXPECT_FALSE(VariableBatchPooledSplits(0, kDims, kBatchPerRank[0], {2, 1}).ok()) << "too few pre-a2a sizes";
}

TEST_P(VariableBatchTest, SeedWE4Outputs) {
  OnRanks(2, [](const ProcessGroup& g) {
    const int me = g.rank();
    const int64_t n = me == 0 ? 6 : 24;  // t0 = rand(6), t1 = rand(24)
    Tensor t = Tensor::Empty(dtype::kFloat32, {n});
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = static_cast<float>(100 * me + i);
    auto out = VariableBatchPooledAllToAll(g, t, kDims, kBatchPerRank[me], kPreA2a[me]);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->numel(), me == 0 ? 16 : 14);
    // rank 0 gets t0[0:4] then t1[0:12]; rank 1 gets t0[4:6] then t1[12:24].
    std::vector<float> want;
    for (int64_t i = (me == 0 ? 0 : 4); i < (me == 0 ? 4 : 6); ++i) want.push_back(static_cast<float>(i));
    for (int64_t i = (me == 0 ? 0 : 12); i < (me == 0 ? 12 : 24); ++i) want.push_back(static_cast<float>(100 + i));
    for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(out->data<float>()[i], want[i]) << "rank " << me << " " << i;
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, VariableBatchTest, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
