// DLRM, DCN and DeepFM: a hand-computed DLRM, finite-difference gradients
// of the loss for every model (parameters, dense features and pooled
// embeddings), TorchRec's parameter names, and bad configs refused.
#include <gtest/gtest.h>

#include <cmath>

#include <nlohmann/json.hpp>

#include "dense/gradient_check.h"
#include "shardrec/core/models/rec_model.h"

namespace shardrec {
namespace {

using dense::testing::RandomTensor;

void Set(RecModel& m, const std::string& name, const std::vector<float>& values) {
  for (auto* p : m.Parameters()) {
    if (p->name != name) continue;
    ASSERT_EQ(static_cast<size_t>(p->value.numel()), values.size()) << name;
    std::copy(values.begin(), values.end(), p->value.data<float>());
    return;
  }
  FAIL() << "no parameter " << name;
}

// dense_in 2, D 2, F 2; dense arch [2] = identity; over arch [1, 1]:
// relu(ones . [1, 2, 11, 17, 39]) = 70, then 0.01 * 70 - 0.5 = 0.2.
TEST(Dlrm, HandComputedLogit) {
  ModelConfig c;
  c.dense_in_features = 2;
  c.dense_arch_layer_sizes = {2};
  c.over_arch_layer_sizes = {1, 1};
  auto m = CreateRecModel(c, 2, 2, dense::DenseInit(1));
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  Set(**m, "dense_arch.model._mlp.0._linear.weight", {1, 0, 0, 1});
  Set(**m, "dense_arch.model._mlp.0._linear.bias", {0, 0});
  Set(**m, "over_arch.model.0._mlp.0._linear.weight", {1, 1, 1, 1, 1});
  Set(**m, "over_arch.model.0._mlp.0._linear.bias", {0});
  Set(**m, "over_arch.model.1.weight", {0.01f});
  Set(**m, "over_arch.model.1.bias", {-0.5f});
  auto logits = (*m)->Forward(Tensor::FromVector<float>({1, 2}, {1, 2}), Tensor::FromVector<float>({3, 4, 5, 6}, {1, 4}));
  ASSERT_TRUE(logits.ok()) << logits.status().ToString();
  EXPECT_NEAR(logits->data<float>()[0], 0.2, 1e-6);
}

ModelConfig Tiny(const std::string& model) {
  ModelConfig c;
  c.model = model;
  c.dense_in_features = 3;
  c.dense_arch_layer_sizes = {4, 2};
  c.over_arch_layer_sizes = {3, 1};
  c.dcn_num_layers = 2;
  c.dcn_low_rank_dim = 2;
  c.deepfm_hidden_layer_size = 3;
  c.deep_fm_dimension = 2;
  return c;
}

double Loss(RecModel& m, const Tensor& dense, const Tensor& pooled, const Tensor& labels) {
  auto logits = m.Forward(dense, pooled);
  EXPECT_TRUE(logits.ok()) << logits.status().ToString();
  Tensor dl;
  return BceWithLogits(*logits, labels, &dl).value();
}

// Every parameter, dense feature and pooled value nudged by +-eps.
TEST(RecModels, LossGradientsMatchFiniteDifferences) {
  for (const char* model : {"dlrm", "dcn", "deepfm"}) {
    SCOPED_TRACE(model);
    auto m = CreateRecModel(Tiny(model), 2, 2, dense::DenseInit(4));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    for (auto* p : (*m)->Parameters()) {  // no zero biases: every path carries gradient
      const Tensor r = RandomTensor(p->value.shape(), 5, 0.2f);
      for (int64_t i = 0; i < r.numel(); ++i) p->value.data<float>()[i] += r.data<float>()[i];
    }
    Tensor dense = RandomTensor({4, 3}, 6), pooled = RandomTensor({4, 4}, 7, 0.5f);
    const Tensor labels = Tensor::FromVector<float>({1, 0, 0, 1}, {4});
    auto logits = (*m)->Forward(dense, pooled);
    ASSERT_TRUE(logits.ok()) << logits.status().ToString();
    Tensor dlogits;
    ASSERT_TRUE(BceWithLogits(*logits, labels, &dlogits).ok());
    for (auto* p : (*m)->Parameters()) std::fill(p->grad.span<float>().begin(), p->grad.span<float>().end(), 0.0f);
    std::vector<std::string> ready;
    auto dpooled = (*m)->Backward(dlogits, [&](const std::vector<dense::Parameter*>& ps) {
      for (auto* p : ps) ready.push_back(p->name);
      return Status::Ok();
    });
    ASSERT_TRUE(dpooled.ok()) << dpooled.status().ToString();
    EXPECT_EQ(ready.size(), (*m)->Parameters().size()) << "every parameter reported ready once";
    // The dense features' gradient is not returned; it is checked through
    // the dense arch's first layer, whose inputs they are.
    // A nudge across a relu's kink makes the two one-sided slopes differ:
    // such points are skipped (and counted: few may be).
    const float eps = 1e-2f;
    int checked = 0, kinks = 0;
    const double mid = Loss(**m, dense, pooled, labels);
    auto check = [&](float* value, double analytic, const std::string& what) {
      const float keep = *value;
      *value = keep + eps;
      const double up = Loss(**m, dense, pooled, labels);
      *value = keep - eps;
      const double down = Loss(**m, dense, pooled, labels);
      *value = keep;
      const double right = (up - mid) / eps, left = (mid - down) / eps;
      ++checked;
      if (std::abs(right - left) > 0.1 * std::max(std::abs(right), std::abs(left)) + 2e-4) {
        ++kinks;
        return;
      }
      const double numeric = (up - down) / (2 * eps);
      EXPECT_NEAR(analytic, numeric, 2e-2 * std::abs(numeric) + 2e-5) << what;
    };
    for (int64_t i = 0; i < pooled.numel(); ++i) {
      check(&pooled.data<float>()[i], dpooled->data<float>()[i], "dL/dpooled[" + std::to_string(i) + "]");
    }
    for (auto* p : (*m)->Parameters()) {
      const Tensor grad = p->grad.Clone();
      for (int64_t i = 0; i < p->value.numel(); ++i) {
        check(&p->value.data<float>()[i], grad.data<float>()[i], "dL/d" + p->name + "[" + std::to_string(i) + "]");
      }
    }
    EXPECT_LE(kinks * 10, checked) << kinks << " of " << checked << " points sat on a kink";
  }
}

std::vector<std::string> Names(RecModel& m) {
  std::vector<std::string> names;
  for (auto* p : m.Parameters()) names.push_back(p->name);
  return names;
}

TEST(RecModels, ParameterNamesAreTorchRecsStateDictKeys) {
  auto dlrm = CreateRecModel(Tiny("dlrm"), 2, 2, dense::DenseInit(1));
  EXPECT_EQ(Names(**dlrm), (std::vector<std::string>{
                               "dense_arch.model._mlp.0._linear.weight", "dense_arch.model._mlp.0._linear.bias",
                               "dense_arch.model._mlp.1._linear.weight", "dense_arch.model._mlp.1._linear.bias",
                               "over_arch.model.0._mlp.0._linear.weight", "over_arch.model.0._mlp.0._linear.bias",
                               "over_arch.model.1.weight", "over_arch.model.1.bias"}));
  auto dcn = CreateRecModel(Tiny("dcn"), 2, 2, dense::DenseInit(1));
  EXPECT_EQ(Names(**dcn)[4], "inter_arch.crossnet.W_kernels.0");
  auto deepfm = CreateRecModel(Tiny("deepfm"), 2, 2, dense::DenseInit(1));
  EXPECT_EQ(Names(**deepfm), (std::vector<std::string>{
                                 "dense_arch.model.0.weight", "dense_arch.model.0.bias", "dense_arch.model.2.weight",
                                 "dense_arch.model.2.bias", "inter_arch.deep_fm.dense_module.0.weight",
                                 "inter_arch.deep_fm.dense_module.0.bias", "over_arch.model.0.weight",
                                 "over_arch.model.0.bias"}));
}

TEST(RecModels, BceWithLogitsMatchesItsFormula) {
  Tensor d;
  const Tensor logits = Tensor::FromVector<float>({0.0f, 2.0f, -30.0f}, {3});
  const Tensor labels = Tensor::FromVector<float>({1, 0, 1}, {3});
  auto loss = BceWithLogits(logits, labels, &d);
  ASSERT_TRUE(loss.ok());
  const double want = (std::log(2.0) + (2.0 + std::log1p(std::exp(-2.0))) + (30.0 + std::log1p(std::exp(-30.0)))) / 3;
  EXPECT_NEAR(*loss, want, 1e-9);
  EXPECT_NEAR(d.data<float>()[1], (1 / (1 + std::exp(-2.0))) / 3, 1e-7);
}

TEST(ModelConfig, RefusesWhatCannotBuild) {
  ModelConfig c;
  EXPECT_FALSE(c.Check(26, 16).ok()) << "dense arch ends in 64, tables have dim 16";
  EXPECT_NE(c.Check(26, 16).message().find("must equal the embedding dim (16)"), std::string::npos);
  EXPECT_TRUE(c.Check(26, 64).ok());
  for (const char* bad : {R"({"model": "mlp"})", R"({"dense_arch_layer_sizes": []})", R"({"over_arch_layer_sizes": [0, 1]})",
                          R"({"dcn_num_layers": 0})", R"({"dense_in_features": "13"})", R"({"hidden": 3})", R"([1])"}) {
    EXPECT_FALSE(ModelConfig::FromJson(nlohmann::json::parse(bad), "m.json").ok()) << bad;
  }
  auto unknown = ModelConfig::FromJson(nlohmann::json::parse(R"({"hidden": 3})"), "m.json");
  EXPECT_NE(unknown.status().message().find("m.json: unknown key \"hidden\""), std::string::npos);
  c.over_arch_layer_sizes = {4, 2};
  EXPECT_FALSE(c.Check(26, 64).ok()) << "two logits";
  auto round = ModelConfig::FromJson(Tiny("dcn").ToJson(), "x");
  ASSERT_TRUE(round.ok());
  EXPECT_EQ(round->ToJson(), Tiny("dcn").ToJson());
  EXPECT_FALSE(ModelConfig::FromNameOrFile("/no/such/model.json").ok());
}

}  // namespace
}  // namespace shardrec
