// PooledAllToAll against the seeds' WE-3 (dim_sum_per_rank [2, 1], global
// batch 6 split evenly: both outputs [3, 3], rank 0 = cat(t0[0:3], t1[0:3]),
// rank 1 = cat(t0[3:6], t1[3:6])), uneven batches on three ranks, and the
// backward as the exact inverse.
#include "ranks_fixture.h"
#include "shardrec/core/dist/pooled_all_to_all.h"

namespace shardrec {
namespace {

using PooledAllToAllTest = RanksTest;

// Element (b, d) of rank r's local embeddings: unique and exact in float.
float Local(int r, int64_t b, int64_t d) { return static_cast<float>(100 * r + 10 * b + d); }

TEST_P(PooledAllToAllTest, SeedWE3Shapes) {
  OnRanks(2, [](const ProcessGroup& g) {
    const int64_t dim = g.rank() == 0 ? 2 : 1;
    Tensor local = Tensor::Empty(dtype::kFloat32, {6, dim});
    for (int64_t b = 0; b < 6; ++b) {
      for (int64_t d = 0; d < dim; ++d) local.data<float>()[b * dim + d] = Local(g.rank(), b, d);
    }
    auto out = PooledAllToAll(g, local, {2, 1});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->shape(), (std::vector<int64_t>{3, 3}));
    for (int64_t b = 0; b < 3; ++b) {
      const int64_t global = 3 * g.rank() + b;
      EXPECT_EQ(out->data<float>()[b * 3 + 0], Local(0, global, 0));
      EXPECT_EQ(out->data<float>()[b * 3 + 1], Local(0, global, 1));
      EXPECT_EQ(out->data<float>()[b * 3 + 2], Local(1, global, 0));
    }
    auto back = PooledAllToAllBackward(g, out.value(), {2, 1}, {3, 3});
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    ASSERT_EQ(back->shape(), local.shape());
    for (int64_t i = 0; i < local.numel(); ++i) EXPECT_EQ(back->data<float>()[i], local.data<float>()[i]) << i;
  });
}

TEST_P(PooledAllToAllTest, UnevenBatchesAndDimsOnThreeRanks) {
  const std::vector<int64_t> dims = {3, 0, 2}, batch = {1, 4, 2};  // rank 1 owns no table
  OnRanks(3, [&](const ProcessGroup& g) {
    const int me = g.rank();
    Tensor local = Tensor::Empty(dtype::kFloat32, {7, dims[me]});
    for (int64_t b = 0; b < 7; ++b) {
      for (int64_t d = 0; d < dims[me]; ++d) local.data<float>()[b * dims[me] + d] = Local(me, b, d);
    }
    auto out = PooledAllToAll(g, local, dims, batch);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_EQ(out->shape(), (std::vector<int64_t>{batch[me], 5}));
    const int64_t first = me == 0 ? 0 : me == 1 ? 1 : 5;
    for (int64_t b = 0; b < batch[me]; ++b) {
      for (int64_t d = 0; d < 3; ++d) EXPECT_EQ(out->data<float>()[b * 5 + d], Local(0, first + b, d));
      for (int64_t d = 0; d < 2; ++d) EXPECT_EQ(out->data<float>()[b * 5 + 3 + d], Local(2, first + b, d));
    }
    auto back = PooledAllToAllBackward(g, out.value(), dims, batch);
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    for (int64_t i = 0; i < local.numel(); ++i) EXPECT_EQ(back->data<float>()[i], local.data<float>()[i]) << i;
  });
}

TEST_P(PooledAllToAllTest, ShapesThatDisagreeWithTheLayoutAreRefused) {
  OnRanks(2, [](const ProcessGroup& g) {
    Tensor local = Tensor::Zeros(dtype::kFloat32, {5, 2});
    auto odd = PooledAllToAll(g, local, {2, 2});
    ASSERT_FALSE(odd.ok());
    EXPECT_NE(odd.status().message().find("does not split evenly"), std::string::npos) << odd.status().message();
    auto wrong_dim = PooledAllToAll(g, Tensor::Zeros(dtype::kFloat32, {4, 3}), {2, 2});
    ASSERT_FALSE(wrong_dim.ok());
    EXPECT_NE(wrong_dim.status().message().find("the layout says [4, 2]"), std::string::npos);
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, PooledAllToAllTest, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
