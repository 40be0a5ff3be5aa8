// The unsharded EmbeddingBagCollection and EmbeddingCollection through the
// CPU kernel plugin: the seeds' worked examples (WE-7, WE-8), weighting,
// mean pooling, a fused SGD step, and the errors a user meets first.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "shardrec/core/host_services.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/modules/embedding_collection.h"
#include "shardrec/core/modules/optimizer_spec.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/sdk/init.hpp"

namespace shardrec {
namespace {

using V = std::vector<int64_t>;

class EmbeddingModules : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_kernel_cpu.so";
    ASSERT_TRUE(registry_.LoadLibrary(path).ok()) << path;
  }
  static EmbeddingTableConfig Table(std::string name, int64_t rows, int64_t dim, std::vector<std::string> features,
                                    PoolingType pooling = PoolingType::kSum) {
    EmbeddingTableConfig t;
    t.name = std::move(name);
    t.num_embeddings = rows;
    t.embedding_dim = dim;
    t.feature_names = std::move(features);
    t.pooling = pooling;
    return t;
  }
  // The seeds' batch: f1 = [0,1] [] [2], f2 = [3] [4] [5,6,7].
  static KeyedJaggedTensor SeedKjt() {
    return KeyedJaggedTensor::FromOffsets({"f1", "f2"}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 2, 2, 3, 4, 5, 8},
                                          std::vector<float>{2, 3, 4, 5, 6, 7, 8, 9})
        .value();
  }
  static float W(const Tensor& w, int64_t r, int64_t c) { return w.data<float>()[r * w.size(1) + c]; }

  HostServices services_;
  PluginRegistry registry_{&services_};
};

TEST_F(EmbeddingModules, SeedEbcExample) {
  auto ebc = EmbeddingBagCollection::Create(registry_, {Table("t1", 10, 3, {"f1"}), Table("t2", 10, 4, {"f2"})}, {});
  ASSERT_TRUE(ebc.ok()) << ebc.status().ToString();
  auto kt = ebc->Forward(SeedKjt());
  ASSERT_TRUE(kt.ok()) << kt.status().ToString();
  EXPECT_EQ(kt->values().shape(), (V{3, 7}));
  EXPECT_EQ(kt->keys(), (std::vector<std::string>{"f1", "f2"}));
  EXPECT_EQ(kt->offset_per_key(), (V{0, 3, 7}));
  const Tensor t1 = ebc->tables().ReadWeights(0).value(), t2 = ebc->tables().ReadWeights(1).value();
  const float* out = kt->values().data<float>();
  for (int c = 0; c < 3; ++c) {
    EXPECT_FLOAT_EQ(out[0 * 7 + c], W(t1, 0, c) + W(t1, 1, c));
    EXPECT_EQ(out[1 * 7 + c], 0.0f);  // the empty bag
    EXPECT_FLOAT_EQ(out[2 * 7 + c], W(t1, 2, c));
  }
  for (int c = 0; c < 4; ++c) {
    EXPECT_FLOAT_EQ(out[0 * 7 + 3 + c], W(t2, 3, c));
    EXPECT_FLOAT_EQ(out[1 * 7 + 3 + c], W(t2, 4, c));
    EXPECT_NEAR(out[2 * 7 + 3 + c], W(t2, 5, c) + W(t2, 6, c) + W(t2, 7, c), 1e-6);
  }
  // Initial weights are the SDK's function of (seed, row, col), in ±sqrt(1/10).
  EXPECT_EQ(W(t2, 7, 2), sdk::InitialWeight(0, 7, 2, -std::sqrt(0.1), std::sqrt(0.1)));
}

TEST_F(EmbeddingModules, SeedEcExample) {
  auto ec = EmbeddingCollection::Create(registry_, {Table("t1", 10, 3, {"f1"}), Table("t2", 10, 3, {"f2"})}, {});
  ASSERT_TRUE(ec.ok()) << ec.status().ToString();
  auto out = ec->Forward(SeedKjt());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->at("f2").values.shape(), (V{5, 3}));
  EXPECT_EQ(out->at("f2").lengths, (V{1, 1, 3}));
  EXPECT_EQ(out->at("f1").values.shape(), (V{3, 3}));
  EXPECT_EQ(out->at("f1").lengths, (V{2, 0, 1}));
  const Tensor t2 = ec->tables().ReadWeights(1).value();
  for (int i = 0; i < 5; ++i) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(out->at("f2").values.data<float>()[i * 3 + c], W(t2, 3 + i, c));
  }
}

TEST_F(EmbeddingModules, WeightedAndMeanTables) {
  auto weighted = Table("t1", 10, 2, {"f1"});
  weighted.is_weighted = true;
  auto mean = Table("t2", 10, 2, {"f2"}, PoolingType::kMean);
  auto ebc = EmbeddingBagCollection::Create(registry_, {weighted, mean}, {});
  ASSERT_TRUE(ebc.ok());
  EXPECT_TRUE(ebc->is_weighted());
  auto kt = ebc->Forward(SeedKjt());
  ASSERT_TRUE(kt.ok()) << kt.status().ToString();
  const Tensor t1 = ebc->tables().ReadWeights(0).value(), t2 = ebc->tables().ReadWeights(1).value();
  const float* out = kt->values().data<float>();
  EXPECT_NEAR(out[0], 2 * W(t1, 0, 0) + 3 * W(t1, 1, 0), 1e-6);           // weights 2, 3
  EXPECT_NEAR(out[2 * 4 + 2], (W(t2, 5, 0) + W(t2, 6, 0) + W(t2, 7, 0)) / 3, 1e-6);  // unweighted mean
}

// dL/dweight of every id, for L = <G, pooled>: pooled is linear in each
// weight, so a central difference is exact but for rounding. Sum and mean
// tables, an unweighted table (0) and a key no table serves (0), an id
// outside its table (0, as the kernel drops it).
TEST_F(EmbeddingModules, IdWeightGradientEqualsFiniteDifference) {
  auto t1 = Table("t1", 10, 3, {"f1"});
  t1.is_weighted = true;
  auto t2 = Table("t2", 10, 4, {"f2"}, PoolingType::kMean);
  t2.is_weighted = true;
  auto t3 = Table("t3", 10, 2, {"f3"});
  EmbeddingModuleOptions options;
  options.optimizer = OptimizerSpec::Parse("sgd,lr=0").value();
  options.bounds_check = SR_BOUNDS_CHECK_IGNORE;
  auto ebc = EmbeddingBagCollection::Create(registry_, {t1, t2, t3}, options);
  ASSERT_TRUE(ebc.ok()) << ebc.status().ToString();
  const std::vector<std::string> keys = {"fx", "f1", "f2", "f3"};
  const V values = {1, 0, 1, 2, 12, 3, 4, 5, 6, 7, 8, 9};
  // 3 samples per key: fx [1] [0] [1]; f1 [] [2, 12] [3] (12 is outside
  // t1); f2 [4] [5, 6, 7] [8]; f3 [] [9] [].
  const V lengths = {1, 1, 1, 0, 2, 1, 1, 3, 1, 0, 1, 0};
  const std::vector<float> weights = {5, 0.5f, -1.5f, 2, 3, 0.25f, 1, 2, -3, 0.75f, 9, 9};
  auto make = [&](const std::vector<float>& w) { return KeyedJaggedTensor::FromLengths(keys, values, lengths, w).value(); };
  Tensor grad = Tensor::Empty(dtype::kFloat32, {3, 9});
  for (int64_t i = 0; i < grad.numel(); ++i) grad.data<float>()[i] = std::sin(0.7f * static_cast<float>(i) + 0.3f);
  auto loss = [&](const std::vector<float>& w) {
    auto out = ebc->Forward(make(w));
    EXPECT_TRUE(out.ok()) << out.status().ToString();
    double l = 0;
    for (int64_t i = 0; i < grad.numel(); ++i) l += double{grad.data<float>()[i]} * out->values().data<float>()[i];
    return l;
  };
  std::vector<float> got;
  ASSERT_TRUE(ebc->Backward(make(weights), grad, 1, 0.0, &got).ok());
  ASSERT_EQ(got.size(), values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    std::vector<float> up = weights, down = weights;
    up[i] += 0.125f;
    down[i] -= 0.125f;
    const double fd = (loss(up) - loss(down)) / 0.25;
    EXPECT_NEAR(got[i], fd, 1e-5) << "id " << i;
  }
  for (int i : {0, 1, 2}) EXPECT_EQ(got[static_cast<size_t>(i)], 0.0f) << "fx: no table";
  EXPECT_EQ(got[4], 0.0f) << "id 12 is outside t1";
  EXPECT_EQ(got[11], 0.0f) << "t3 is unweighted";
  for (int i : {3, 5, 6, 7, 10}) EXPECT_NE(got[static_cast<size_t>(i)], 0.0f) << "id " << i;
}

TEST_F(EmbeddingModules, SgdStepMovesRowsByTheirSummedGradient) {
  EmbeddingModuleOptions options;
  options.optimizer = OptimizerSpec::Parse("sgd,lr=0.5").value();
  auto ebc = EmbeddingBagCollection::Create(registry_, {Table("t1", 10, 3, {"f1", "f2"})}, options);
  ASSERT_TRUE(ebc.ok()) << ebc.status().ToString();
  const Tensor before = ebc->tables().ReadWeights(0).value().Clone();
  std::vector<float> g(3 * 6);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 0.01f * static_cast<float>(i + 1);
  const Tensor grad = Tensor::FromVector(g, {3, 6});
  // Row 2 appears three times: f1 sample 2, f2 samples 0 and 2.
  const auto kjt = KeyedJaggedTensor::FromOffsets({"f1", "f2"}, {0, 1, 2, 2, 4, 2, 6, 7}, {0, 2, 2, 3, 4, 5, 8}).value();
  ASSERT_TRUE(ebc->Backward(kjt, grad, 1).ok());
  const Tensor after = ebc->tables().ReadWeights(0).value();
  for (int c = 0; c < 3; ++c) {
    const float summed = g[2 * 6 + c] + g[0 * 6 + 3 + c] + g[2 * 6 + 3 + c];
    EXPECT_NEAR(W(after, 2, c), W(before, 2, c) - 0.5f * summed, 1e-6);
    EXPECT_EQ(W(after, 9, c), W(before, 9, c));  // untouched row
  }
}

TEST_F(EmbeddingModules, ErrorsAUserMeetsFirst) {
  auto ebc = EmbeddingBagCollection::Create(registry_, {Table("t1", 3, 2, {"f1"})}, {});
  ASSERT_TRUE(ebc.ok());
  auto missing = ebc->Forward(KeyedJaggedTensor::FromLengths({"other"}, {0}, {1}).value());
  EXPECT_EQ(missing.status().code(), SR_NOT_FOUND);
  EXPECT_NE(missing.status().message().find("'f1'"), std::string::npos);
  auto out_of_range = ebc->Forward(KeyedJaggedTensor::FromLengths({"f1"}, {0, 7}, {1, 1}).value());
  EXPECT_EQ(out_of_range.status().code(), SR_OUT_OF_RANGE);
  EXPECT_NE(out_of_range.status().message().find("t1"), std::string::npos) << out_of_range.status().message();
  // Extra keys are ignored.
  EXPECT_TRUE(ebc->Forward(KeyedJaggedTensor::FromLengths({"x", "f1"}, {5, 0}, {1, 1}).value()).ok());
  // Inference-only: no optimizer.
  EXPECT_EQ(ebc->Backward(KeyedJaggedTensor::FromLengths({"f1"}, {0}, {1}).value(), Tensor::Zeros(dtype::kFloat32, {1, 2}), 1)
                .code(),
            SR_FAILED_PRECONDITION);

  EmbeddingModuleOptions warn;
  warn.bounds_check = SR_BOUNDS_CHECK_IGNORE;
  auto lenient = EmbeddingBagCollection::Create(registry_, {Table("t1", 3, 2, {"f1"})}, warn);
  int64_t invalid = -1;
  auto kt = lenient->Forward(KeyedJaggedTensor::FromLengths({"f1"}, {0, 7}, {2}).value(), &invalid);
  ASSERT_TRUE(kt.ok());
  EXPECT_EQ(invalid, 1);

  auto weighted = Table("t1", 3, 2, {"f1"});
  weighted.is_weighted = true;
  auto w = EmbeddingBagCollection::Create(registry_, {weighted}, {});
  EXPECT_NE(w->Forward(KeyedJaggedTensor::FromLengths({"f1"}, {0}, {1}).value()).status().message().find(
                "is weighted but the input has no weights"),
            std::string::npos);

  auto two = EmbeddingBagCollection::Create(registry_, {Table("a", 3, 2, {"f1"}), Table("b", 3, 2, {"f2"})}, {});
  auto var = two->Forward(KeyedJaggedTensor::FromLengths({"f1", "f2"}, {0, 1, 2}, {1, 1, 1}, {}, {1, 2}).value());
  EXPECT_NE(var.status().message().find("one batch size"), std::string::npos);

  EmbeddingModuleOptions nokernel;
  nokernel.kernel = "no_such_kernel";
  EXPECT_EQ(EmbeddingBagCollection::Create(registry_, {Table("t1", 3, 2, {"f1"})}, nokernel).status().code(),
            SR_NOT_FOUND);
  EXPECT_EQ(EmbeddingBagCollection::Create(registry_, {Table("t1", 3, 2, {"f1"}, PoolingType::kNone)}, {})
                .status()
                .code(),
            SR_INVALID_ARGUMENT);
}

// Issue 16, defect 7: with NONE the module used to hand the kernel ids it
// had not checked, and the kernel read outside the table (ASan: heap
// overflow; UBSan: signed overflow on 2^62). The sharded path drops such ids
// while routing; the unsharded one must agree: absent, and counted.
TEST_F(EmbeddingModules, BoundsCheckNoneDropsIdsOutsideTheTableAsTheShardedPathDoes) {
  const std::vector<int64_t> ids = {1, -1, 7, int64_t{1} << 62, 2, std::numeric_limits<int64_t>::min()};
  const auto kjt = KeyedJaggedTensor::FromLengths({"f1"}, ids, {2, 2, 2}).value();
  auto output = [&](int32_t mode, int64_t* invalid) {
    EmbeddingModuleOptions options;
    options.bounds_check = mode;
    options.init_seed = 3;
    auto ebc = EmbeddingBagCollection::Create(registry_, {Table("t1", 3, 4, {"f1"})}, options);
    EXPECT_TRUE(ebc.ok()) << ebc.status().ToString();
    auto kt = ebc->Forward(kjt, invalid);
    EXPECT_TRUE(kt.ok()) << kt.status().ToString();
    return kt->values().Clone();
  };
  int64_t ignored = -1, none = -1;
  const Tensor expected = output(SR_BOUNDS_CHECK_IGNORE, &ignored);
  const Tensor got = output(SR_BOUNDS_CHECK_NONE, &none);
  EXPECT_EQ(ignored, 4);
  EXPECT_EQ(none, 4);
  ASSERT_EQ(got.numel(), expected.numel());
  for (int64_t i = 0; i < got.numel(); ++i) EXPECT_EQ(got.data<float>()[i], expected.data<float>()[i]) << i;
}

TEST_F(EmbeddingModules, WeightsRoundTripAndShapeChecks) {
  auto ebc = EmbeddingBagCollection::Create(registry_, {Table("t1", 4, 2, {"f1"})}, {});
  ASSERT_TRUE(ebc.ok());
  const Tensor w = Tensor::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}, {4, 2});
  ASSERT_TRUE(ebc->tables().WriteWeights(0, w).ok());
  EXPECT_EQ(ebc->tables().ReadWeights(0)->data<float>()[7], 8);
  EXPECT_NE(ebc->tables().WriteWeights(0, Tensor::Zeros(dtype::kFloat32, {3, 2})).message().find("expected shape [4, 2]"),
            std::string::npos);
  EXPECT_EQ(ebc->tables().TableIndex("zz").status().code(), SR_NOT_FOUND);
}

}  // namespace
}  // namespace shardrec
