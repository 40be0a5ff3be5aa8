// The cross networks, FactorizationMachine and DeepFM: hand-computed
// vectors (docs/dense.md pins where upstream and the seed differ), the
// seed's worked examples WE-12..WE-14 and finite-difference gradients.
#include <gtest/gtest.h>

#include "gradient_check.h"
#include "shardrec/core/dense/crossnet.h"
#include "shardrec/core/dense/factorization_machine.h"
#include "shardrec/core/dense/linear.h"

namespace shardrec::dense {
namespace {

using testing::CheckGradients;
using testing::RandomTensor;

void Set(DenseLayer& layer, const std::string& name, const std::vector<float>& values) {
  for (Parameter* p : layer.Parameters()) {
    if (p->name != name) continue;
    ASSERT_EQ(static_cast<size_t>(p->value.numel()), values.size()) << name;
    std::copy(values.begin(), values.end(), p->value.data<float>());
    return;
  }
  FAIL() << "no parameter " << name;
}

std::vector<float> Values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

std::vector<std::string> Names(DenseLayer& layer) {
  std::vector<std::string> names;
  for (Parameter* p : layer.Parameters()) names.push_back(p->name);
  return names;
}

const Tensor kX = Tensor::FromVector<float>({1, 2}, {1, 2});

TEST(CrossNet, HandComputedLayers) {
  CrossNet one("", 2, 1, DenseInit(1));
  Set(one, "kernels.0", {0, 1, 1, 0});
  Set(one, "bias.0", {1, 1});
  EXPECT_EQ(Values(one.Forward(kX).value()), (std::vector<float>{4, 6}));
  CrossNet two("", 2, 2, DenseInit(1));
  for (const char* k : {"kernels.0", "kernels.1"}) Set(two, k, {1, 0, 0, 1});
  EXPECT_EQ(Values(two.Forward(kX).value()), (std::vector<float>{4, 18}));
  EXPECT_EQ(Names(two), (std::vector<std::string>{"kernels.0", "kernels.1", "bias.0", "bias.1"}));
}

TEST(LowRankCrossNet, HandComputedLayer) {
  auto net = LowRankCrossNet::Create("", 2, 1, 1, DenseInit(1));
  ASSERT_TRUE(net.ok());
  Set(**net, "V_kernels.0", {1, 1});
  Set(**net, "W_kernels.0", {1, 2});
  Set(**net, "bias.0", {0, 1});
  EXPECT_EQ(Values((*net)->Forward(kX).value()), (std::vector<float>{4, 16}));
  EXPECT_FALSE(LowRankCrossNet::Create("", 2, 1, 0, DenseInit(1)).ok());
}

// The bias outside the product, as upstream: [5, 9] (the seed's formula
// would give [5, 10]).
TEST(VectorCrossNet, BiasIsAddedOutsideTheProduct) {
  VectorCrossNet net("", 2, 1, DenseInit(1));
  Set(net, "kernels.0", {1, 1});
  Set(net, "bias.0", {1, 1});
  EXPECT_EQ(Values(net.Forward(kX).value()), (std::vector<float>{5, 9}));
}

TEST(LowRankMixtureCrossNet, HandComputedGatedExperts) {
  auto net = LowRankMixtureCrossNet::Create("", 2, 1, 2, 1, "relu", DenseInit(1));
  ASSERT_TRUE(net.ok());
  EXPECT_EQ(Names(**net), (std::vector<std::string>{"U_kernels.0", "V_kernels.0", "bias.0", "gates.0.weight",
                                                     "gates.1.weight", "C_kernels.0"}));
  Set(**net, "V_kernels.0", {1, 1, 1, -1});
  Set(**net, "C_kernels.0", {1, 2});
  Set(**net, "U_kernels.0", {1, 0, 0, 1});
  Set(**net, "gates.0.weight", {1, 0});
  Set(**net, "gates.1.weight", {0, 0});
  const auto y = Values((*net)->Forward(kX).value());
  EXPECT_NEAR(y[0], 3.193175735890015, 1e-6);
  EXPECT_NEAR(y[1], 2.0, 1e-6);
  auto single = LowRankMixtureCrossNet::Create("", 2, 1, 1, 1, "relu", DenseInit(1));
  ASSERT_TRUE(single.ok());
  Set(**single, "V_kernels.0", {1, 1});
  Set(**single, "C_kernels.0", {1});
  Set(**single, "U_kernels.0", {1, 0});
  EXPECT_EQ(Values((*single)->Forward(kX).value()), (std::vector<float>{4, 2}));
  EXPECT_FALSE(LowRankMixtureCrossNet::Create("", 2, 1, 2, 1, "tanh", DenseInit(1)).ok());
}

// WE-12: all four on [3, 10] with 2 layers keep the shape [3, 10].
TEST(CrossNets, WorkedExample12Shapes) {
  const Tensor x = RandomTensor({3, 10}, 12);
  std::vector<std::unique_ptr<DenseLayer>> nets;
  nets.push_back(std::make_unique<CrossNet>("", 10, 2, DenseInit(12)));
  nets.push_back(std::move(LowRankCrossNet::Create("", 10, 2, 3, DenseInit(12)).value()));
  nets.push_back(std::move(LowRankMixtureCrossNet::Create("", 10, 2, 5, 3, "relu", DenseInit(12)).value()));
  nets.push_back(std::make_unique<VectorCrossNet>("", 10, 2, DenseInit(12)));
  for (auto& net : nets) {
    auto y = net->Forward(x);
    ASSERT_TRUE(y.ok()) << y.status().ToString();
    EXPECT_EQ(y->shape(), (std::vector<int64_t>{3, 10}));
  }
}

// Initialised biases are zero, so the gradient checks first give every
// parameter a value of its own.
void Perturb(DenseLayer& layer) {
  for (Parameter* p : layer.Parameters()) {
    const Tensor r = RandomTensor(p->value.shape(), 77, 0.3f);
    for (int64_t i = 0; i < r.numel(); ++i) p->value.data<float>()[i] += r.data<float>()[i];
  }
}

TEST(CrossNets, GradientsMatchFiniteDifferences) {
  const Tensor x = RandomTensor({3, 4}, 5, 0.7f);
  CrossNet full("", 4, 2, DenseInit(3));
  Perturb(full);
  CheckGradients(full, x);
  auto low = LowRankCrossNet::Create("", 4, 2, 2, DenseInit(3));
  Perturb(**low);
  CheckGradients(**low, x);
  VectorCrossNet vec("", 4, 2, DenseInit(3));
  Perturb(vec);
  CheckGradients(vec, x);
  for (const char* act : {"sigmoid", "relu"}) {
    SCOPED_TRACE(act);
    for (int experts : {1, 3}) {
      auto mix = LowRankMixtureCrossNet::Create("", 4, 2, experts, 2, act, DenseInit(3));
      Perturb(**mix);
      CheckGradients(**mix, x);
    }
  }
}

TEST(FactorizationMachine, PoolsEveryFlattenedElement) {
  FactorizationMachine fm;
  auto flat = ConcatFlattened({Tensor::FromVector<float>({1, 2}, {1, 1, 2}), Tensor::FromVector<float>({3}, {1, 1, 1})});
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(Values(fm.Forward(*flat).value()), (std::vector<float>{11}));
  // One embedding of two rows: upstream's 35, not the textbook FM's 11.
  auto two = ConcatFlattened({Tensor::FromVector<float>({1, 2, 3, 4}, {1, 2, 2})});
  EXPECT_EQ(Values(fm.Forward(*two).value()), (std::vector<float>{35}));
  CheckGradients(fm, RandomTensor({3, 5}, 4, 0.5f));
}

// WE-14: [3, 2, 64] and [3, 2, 32] give [3, 1]. WE-13: DeepFM with
// Linear(192, 30) gives [3, 30]; its input width is 2*64 + 2*32.
TEST(DeepFM, WorkedExamples13And14) {
  const std::vector<Tensor> embeddings = {RandomTensor({3, 2, 64}, 1), RandomTensor({3, 2, 32}, 2)};
  auto flat = ConcatFlattened(embeddings);
  ASSERT_TRUE(flat.ok());
  EXPECT_EQ(flat->shape(), (std::vector<int64_t>{3, 192}));
  FactorizationMachine fm;
  EXPECT_EQ(fm.Forward(*flat)->shape(), (std::vector<int64_t>{3, 1}));
  DeepFM deepfm(std::make_unique<Linear>("", 192, 30, true, DenseInit(13)));
  EXPECT_EQ(deepfm.Forward(*flat)->shape(), (std::vector<int64_t>{3, 30}));
  // The seed's in_features rule: [3, 2, 3] and [3, 4, 5] flatten to 2*3 + 4*5.
  EXPECT_EQ(ConcatFlattened({RandomTensor({3, 2, 3}, 1), RandomTensor({3, 4, 5}, 1)})->size(1), 26);
  // Hand-computed: Linear(3, 1) of ones on [1, 2, 3] is 6.
  Linear sum("", 3, 1, true, DenseInit(1));
  Set(sum, "weight", {1, 1, 1});
  Set(sum, "bias", {0});
  DeepFM six(std::make_unique<Linear>(std::move(sum)));
  EXPECT_EQ(Values(six.Forward(Tensor::FromVector<float>({1, 2, 3}, {1, 3})).value()), (std::vector<float>{6}));
  // The gradient goes back in the embeddings' shapes.
  auto pieces = SplitFlattened(*flat, embeddings);
  ASSERT_TRUE(pieces.ok());
  EXPECT_EQ((*pieces)[1].shape(), (std::vector<int64_t>{3, 2, 32}));
  EXPECT_EQ(Values((*pieces)[1]), Values(embeddings[1]));
  EXPECT_FALSE(ConcatFlattened({RandomTensor({3, 2}, 1), RandomTensor({2, 2}, 1)}).ok()) << "batches differ";
}

}  // namespace
}  // namespace shardrec::dense
