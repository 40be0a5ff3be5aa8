// Dense layers against scalar references and finite differences, and the
// modules seed's worked examples WE-10 (MLP), WE-11 (Perceptron) and WE-15
// (SwishLayerNorm).
#include <gtest/gtest.h>

#include <cmath>

#include "gradient_check.h"
#include "shardrec/core/dense/activations.h"
#include "shardrec/core/dense/init.h"
#include "shardrec/core/dense/linear.h"
#include "shardrec/core/dense/mlp.h"

namespace shardrec::dense {
namespace {

using testing::CheckGradients;
using testing::RandomTensor;

// y[b, o] = sum_i x[b, i] W[o, i] + bias[o], in double.
std::vector<double> LinearReference(const Tensor& x, const Tensor& w, const Tensor* b) {
  const int64_t rows = x.size(0), in = x.size(1), out = w.size(0);
  std::vector<double> y(static_cast<size_t>(rows * out));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double s = b ? b->data<float>()[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) s += static_cast<double>(x.data<float>()[r * in + i]) * w.data<float>()[o * in + i];
      y[static_cast<size_t>(r * out + o)] = s;
    }
  }
  return y;
}

TEST(Linear, ForwardMatchesAScalarReferenceOverOddShapes) {
  const DenseInit init(7);
  for (auto [rows, in, out] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {3, 40, 16}, {5, 13, 7}, {17, 33, 65}}) {
    for (bool bias : {true, false}) {
      Linear l("", in, out, bias, init);
      const Tensor x = RandomTensor({rows, in}, 1);
      auto y = l.Forward(x);
      ASSERT_TRUE(y.ok());
      ASSERT_EQ(y->shape(), (std::vector<int64_t>{rows, out}));
      const auto want = LinearReference(x, l.Parameters()[0]->value, bias ? &l.Parameters()[1]->value : nullptr);
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y->data<float>()[i], want[i], 1e-4 * (1 + std::abs(want[i])));
    }
  }
}

TEST(Linear, InitIsTorchsBoundAndDependsOnlyOnSeedAndName) {
  Linear a("x.", 100, 30, true, DenseInit(5)), b("x.", 100, 30, true, DenseInit(5)), c("y.", 100, 30, true, DenseInit(5));
  const float bound = 1.0f / std::sqrt(100.0f);
  for (size_t p = 0; p < 2; ++p) {
    const auto& va = a.Parameters()[p]->value;
    for (int64_t i = 0; i < va.numel(); ++i) {
      ASSERT_LE(std::abs(va.data<float>()[i]), bound);
      ASSERT_EQ(va.data<float>()[i], b.Parameters()[p]->value.data<float>()[i]);
    }
    EXPECT_NE(va.data<float>()[0], c.Parameters()[p]->value.data<float>()[0]) << "another name, another stream";
  }
  EXPECT_EQ(a.Parameters()[0]->name, "x.weight");
  EXPECT_EQ(a.Parameters()[1]->name, "x.bias");
}

TEST(Linear, GradientsMatchFiniteDifferences) {
  Linear l("", 6, 4, true, DenseInit(3));
  CheckGradients(l, RandomTensor({3, 6}, 2));
  Linear nb("", 5, 3, false, DenseInit(3));
  CheckGradients(nb, RandomTensor({2, 5}, 4));
}

TEST(Linear, RefusesAWrongInput) {
  Linear l("", 6, 4, true, DenseInit(3));
  auto y = l.Forward(RandomTensor({3, 5}, 2));
  ASSERT_FALSE(y.ok());
  EXPECT_NE(y.status().message().find("last dim of 6"), std::string::npos) << y.status().ToString();
}

TEST(Activations, ReluAndSigmoidForwardAndGradients) {
  const Tensor x = Tensor::FromVector<float>({-2.0f, -0.5f, 0.25f, 3.0f}, {1, 4});
  Relu relu;
  auto y = relu.Forward(x);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(std::vector<float>(y->span<float>().begin(), y->span<float>().end()), (std::vector<float>{0, 0, 0.25f, 3}));
  Sigmoid sig;
  y = sig.Forward(x);
  ASSERT_TRUE(y.ok());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(y->data<float>()[i], 1.0 / (1.0 + std::exp(-x.data<float>()[i])), 1e-7);
  // Away from relu's kink, so that +-eps stays on one side.
  CheckGradients(relu, Tensor::FromVector<float>({-2.0f, -0.5f, 0.25f, 3.0f, 1.5f, -1.0f}, {2, 3}));
  CheckGradients(sig, RandomTensor({3, 5}, 8));
}

// WE-15: Y = X * sigmoid(LayerNorm_{100}(X)), against a double reference.
TEST(SwishLayerNorm, WorkedExample15MatchesItsFormula) {
  SwishLayerNorm sln("", {100});
  const Tensor x = RandomTensor({3, 100}, 15, 2.0f);
  auto y = sln.Forward(x);
  ASSERT_TRUE(y.ok());
  ASSERT_EQ(y->shape(), (std::vector<int64_t>{3, 100}));
  for (int64_t r = 0; r < 3; ++r) {
    const float* in = x.data<float>() + r * 100;
    double mean = 0, var = 0;
    for (int i = 0; i < 100; ++i) mean += in[i];
    mean /= 100;
    for (int i = 0; i < 100; ++i) var += (in[i] - mean) * (in[i] - mean);
    var /= 100;
    for (int i = 0; i < 100; ++i) {
      const double ln = (in[i] - mean) / std::sqrt(var + 1e-5);
      const double want = in[i] / (1.0 + std::exp(-ln));
      ASSERT_NEAR(y->data<float>()[r * 100 + i], want, 1e-5 * (1 + std::abs(want)));
    }
  }
  EXPECT_EQ(sln.Parameters()[0]->name, "norm.0.weight");
}

// WE-15's second form: input_dims [d2, d3] on [B, d1, d2, d3] normalises
// over the last two dims.
TEST(SwishLayerNorm, NormalisesOverTheTrailingDims) {
  SwishLayerNorm sln("", {3, 4});
  const Tensor x = RandomTensor({2, 5, 3, 4}, 3);
  auto y = sln.Forward(x);
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->shape(), x.shape());
  EXPECT_FALSE(sln.Forward(RandomTensor({2, 5, 4, 3}, 3)).ok()) << "trailing dims that differ";
}

TEST(SwishLayerNorm, GradientsMatchFiniteDifferences) {
  SwishLayerNorm sln("", {5});
  // Trained affine parameters, not ones and zeros, so their gradients show.
  for (Parameter* p : sln.Parameters()) {
    const Tensor r = RandomTensor(p->value.shape(), 31, 0.5f);
    for (int64_t i = 0; i < r.numel(); ++i) p->value.data<float>()[i] += r.data<float>()[i];
  }
  CheckGradients(sln, RandomTensor({3, 5}, 9));
}

// WE-11: Perceptron(40, 16) on [3, 40] gives [3, 16] = relu(x W^T + b).
TEST(Perceptron, WorkedExample11) {
  auto p = Perceptron::Create("", 40, 16, true, "relu", DenseInit(11));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  const Tensor x = RandomTensor({3, 40}, 11);
  auto y = (*p)->Forward(x);
  ASSERT_TRUE(y.ok());
  ASSERT_EQ(y->shape(), (std::vector<int64_t>{3, 16}));
  const auto params = (*p)->Parameters();
  ASSERT_EQ(params.size(), 2u);
  EXPECT_EQ(params[0]->name, "_linear.weight");
  const auto want = LinearReference(x, params[0]->value, &params[1]->value);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(y->data<float>()[i], std::max(0.0, want[i]), 1e-5);
}

// WE-10: MLP(40, [16, 8, 4]) on [3, 40] gives [3, 4], relu after every
// layer, the last included.
TEST(Mlp, WorkedExample10) {
  auto mlp = Mlp::Create("", 40, {16, 8, 4}, true, "relu", DenseInit(10));
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();
  const Tensor x = RandomTensor({3, 40}, 10);
  auto y = (*mlp)->Forward(x);
  ASSERT_TRUE(y.ok());
  ASSERT_EQ(y->shape(), (std::vector<int64_t>{3, 4}));
  const auto params = (*mlp)->Parameters();
  ASSERT_EQ(params.size(), 6u);
  EXPECT_EQ(params[4]->name, "_mlp.2._linear.weight");
  // Layer by layer, in double.
  Tensor h = x;
  for (size_t l = 0; l < 3; ++l) {
    auto lin = LinearReference(h, params[2 * l]->value, &params[2 * l + 1]->value);
    Tensor next = Tensor::Empty(dtype::kFloat32, {3, params[2 * l]->value.size(0)});
    for (size_t i = 0; i < lin.size(); ++i) next.data<float>()[i] = static_cast<float>(std::max(0.0, lin[i]));
    h = next;
  }
  for (int64_t i = 0; i < h.numel(); ++i) ASSERT_NEAR(y->data<float>()[i], h.data<float>()[i], 1e-5);
}

TEST(Mlp, GradientsMatchFiniteDifferencesForEveryActivation) {
  for (const char* act : {"sigmoid", "swish_layernorm", "relu"}) {
    SCOPED_TRACE(act);
    auto mlp = Mlp::Create("", 5, {4, 3}, true, act, DenseInit(21));
    ASSERT_TRUE(mlp.ok());
    CheckGradients(**mlp, RandomTensor({2, 5}, 22));
  }
}

TEST(Mlp, SwishLayerNormLayersHaveTorchRecsNames) {
  auto mlp = Mlp::Create("dense_arch.", 5, {4, 3}, true, "swish_layernorm", DenseInit(21));
  ASSERT_TRUE(mlp.ok());
  std::vector<std::string> names;
  for (Parameter* p : (*mlp)->Parameters()) names.push_back(p->name);
  EXPECT_EQ(names, (std::vector<std::string>{"dense_arch._mlp.0._linear.weight", "dense_arch._mlp.0._linear.bias",
                                             "dense_arch._mlp.0._activation_fn.norm.0.weight",
                                             "dense_arch._mlp.0._activation_fn.norm.0.bias",
                                             "dense_arch._mlp.1._linear.weight", "dense_arch._mlp.1._linear.bias",
                                             "dense_arch._mlp.1._activation_fn.norm.0.weight",
                                             "dense_arch._mlp.1._activation_fn.norm.0.bias"}));
}

TEST(Mlp, RefusesAnUnknownActivationAndEmptySizes) {
  auto bad = Mlp::Create("", 5, {4}, true, "tanh", DenseInit(1));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("unknown activation 'tanh'"), std::string::npos);
  EXPECT_FALSE(Mlp::Create("", 5, {}, true, "relu", DenseInit(1)).ok());
  EXPECT_FALSE(Mlp::Create("", 5, {0}, true, "relu", DenseInit(1)).ok());
}

}  // namespace
}  // namespace shardrec::dense
