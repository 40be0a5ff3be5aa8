// Dense optimizers against torch.optim's update rules, step by step, with
// hand-computed values (two steps of a scalar, gradient 0.5), and
// clip_grad_norm_. tests/python checks them against torch itself.
#include <gtest/gtest.h>

#include "shardrec/core/dense/dense_optimizer.h"

namespace shardrec::dense {
namespace {

// Two steps on p0 = 1 with a gradient of 0.5; the values after each.
std::vector<double> TwoSteps(const std::string& spec_text) {
  auto spec = DenseOptimizerSpec::Parse(spec_text);
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  Parameter p = MakeParameter("p", {1});
  p.value.data<float>()[0] = 1.0f;
  DenseOptimizer opt(spec.value());
  std::vector<double> out;
  for (int s = 0; s < 2; ++s) {
    p.grad.data<float>()[0] = 0.5f;
    EXPECT_TRUE(opt.Step({&p}).ok());
    out.push_back(p.value.data<float>()[0]);
  }
  return out;
}

TEST(DenseOptimizer, SgdWithMomentumAndWeightDecay) {
  const auto p = TwoSteps("sgd,lr=0.1,momentum=0.9,weight_decay=0.01");
  EXPECT_NEAR(p[0], 0.949, 1e-6);
  EXPECT_NEAR(p[1], 0.852151, 1e-6);
}

TEST(DenseOptimizer, AdagradWithLrDecayAndInitialAccumulator) {
  const auto p = TwoSteps("adagrad,lr=0.1,lr_decay=0.01,initial_accumulator_value=0.1,eps=1e-10");
  EXPECT_NEAR(p[0], 0.9154845745414341, 1e-6);
  EXPECT_NEAR(p[1], 0.8515739582756351, 1e-6);
}

TEST(DenseOptimizer, AdamFoldsWeightDecayIntoTheGradient) {
  const auto p = TwoSteps("adam,lr=0.1,weight_decay=0.01");
  EXPECT_NEAR(p[0], 0.9000000019607842, 1e-6);
  EXPECT_NEAR(p[1], 0.8000051680063566, 1e-6);
}

TEST(DenseOptimizer, AdamWDecaysTheWeightsFirst) {
  const auto p = TwoSteps("adamw,lr=0.1,weight_decay=0.01");
  EXPECT_NEAR(p[0], 0.8990000019999999, 1e-6);
  EXPECT_NEAR(p[1], 0.7981010039980004, 1e-6);
}

TEST(DenseOptimizer, ParsesDefaultsAndRefusesWhatTorchRefuses) {
  auto adamw = DenseOptimizerSpec::Parse("adamw");
  ASSERT_TRUE(adamw.ok());
  EXPECT_EQ(adamw->Get("weight_decay"), 0.01);
  EXPECT_EQ(DenseOptimizerSpec::Parse(adamw->ToString())->params, adamw->params);
  EXPECT_EQ(DenseOptimizerSpec::Parse("adam,learning_rate=0.5")->Get("lr"), 0.5);
  for (const char* bad : {"", "rmsprop", "adam,lr", "adam,lr=x", "adam,momentum=0.9", "adam,beta1=1", "sgd,lr=-1",
                          "sgd,nesterov=1", "adagrad,eps=nan"}) {
    EXPECT_FALSE(DenseOptimizerSpec::Parse(bad).ok()) << bad;
  }
  auto unknown = DenseOptimizerSpec::Parse("adam,momentum=0.9");
  EXPECT_NE(unknown.status().message().find("beta1, beta2, eps, lr, weight_decay"), std::string::npos)
      << unknown.status().ToString();
}

TEST(ClipGradNorm, ScalesAllGradientsByOneFactor) {
  Parameter a = MakeParameter("a", {2}), b = MakeParameter("b", {1});
  a.grad.data<float>()[0] = 3;
  a.grad.data<float>()[1] = 4;
  b.grad.data<float>()[0] = 12;
  EXPECT_FLOAT_EQ(ClipGradNorm({&a, &b}, 100.0f), 13.0f);
  EXPECT_FLOAT_EQ(b.grad.data<float>()[0], 12.0f) << "under the limit: unchanged";
  EXPECT_FLOAT_EQ(ClipGradNorm({&a, &b}, 6.5f), 13.0f);
  EXPECT_NEAR(a.grad.data<float>()[0], 1.4999998846, 1e-6);
  EXPECT_NEAR(a.grad.data<float>()[1], 1.9999998462, 1e-6);
  EXPECT_NEAR(b.grad.data<float>()[0], 5.9999995385, 1e-6);
}

}  // namespace
}  // namespace shardrec::dense
