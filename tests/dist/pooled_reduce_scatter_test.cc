// PooledReduceScatter: every rank's partial sums for every sample add up on
// the sample's owner (uneven batches, a rank with no samples), and the
// backward returns every sample's gradient to every rank.
#include "ranks_fixture.h"
#include "shardrec/core/dist/pooled_reduce_scatter.h"

namespace shardrec {
namespace {

using PooledReduceScatterTest = RanksTest;

// Rank r's partial sum for global sample b, column d (small integers: exact).
float Partial(int r, int64_t b, int64_t d) { return static_cast<float>(r + 1) * static_cast<float>(b * 3 + d); }

TEST_P(PooledReduceScatterTest, PartialSumsAddUpOnEachSamplesOwner) {
  const std::vector<int64_t> batch = {2, 0, 3};
  OnRanks(3, [&](const ProcessGroup& g) {
    Tensor partial = Tensor::Empty(dtype::kFloat32, {5, 3});
    for (int64_t b = 0; b < 5; ++b) {
      for (int64_t d = 0; d < 3; ++d) partial.data<float>()[b * 3 + d] = Partial(g.rank(), b, d);
    }
    auto out = PooledReduceScatter(g, partial, batch);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const int64_t first = g.rank() == 0 ? 0 : 2;
    ASSERT_EQ(out->shape(), (std::vector<int64_t>{batch[g.rank()], 3}));
    for (int64_t b = 0; b < batch[g.rank()]; ++b) {
      for (int64_t d = 0; d < 3; ++d) {
        EXPECT_EQ(out->data<float>()[b * 3 + d], 6.0f * static_cast<float>((first + b) * 3 + d));  // (1+2+3) x
      }
    }
    auto back = PooledReduceScatterBackward(g, out.value(), batch);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_EQ(back->shape(), (std::vector<int64_t>{5, 3}));
    for (int64_t i = 0; i < 15; ++i) EXPECT_EQ(back->data<float>()[i], 6.0f * static_cast<float>(i)) << i;
  });
}

TEST_P(PooledReduceScatterTest, RowsThatDoNotMatchTheBatchesAreRefused) {
  OnRanks(2, [](const ProcessGroup& g) {
    auto out = PooledReduceScatter(g, Tensor::Zeros(dtype::kFloat32, {3, 2}), {2, 2});
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.status().message().find("partial sums have 3 rows, the batches sum to 4"), std::string::npos);
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, PooledReduceScatterTest, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
