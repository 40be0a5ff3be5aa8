// PositionWeightedModule: the seed's worked example (WE-9) exactly, weights
// by position after training, the errors, the gradient summed by position
// (and by slices, as ranks), and a finite-difference check of dL/dP through
// the EmbeddingBagCollection and a whole DLRM trained by ModelTrainer.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "shardrec/core/feature_processors/position_weighted.h"
#include "shardrec/core/host_services.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/train/model_trainer.h"

namespace shardrec {
namespace {

using V = std::vector<int64_t>;

// WE-9 (002_*): three features, max length 100 each; the freshly made
// position weights are 1.0, so every id's weight is 1.0 and nothing else changes.
TEST(PositionWeighted, SeedExampleWe9) {
  const std::vector<std::string> keys = {"Feature0", "Feature1", "Feature2"};
  auto input = KeyedJaggedTensor::FromLengths(keys, {0, 1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7}, {2, 0, 1, 1, 1, 3, 2, 3, 0});
  ASSERT_TRUE(input.ok()) << input.status().ToString();
  auto pw = PositionWeightedModule::Create({{"Feature0", 100}, {"Feature1", 100}, {"Feature2", 100}});
  ASSERT_TRUE(pw.ok()) << pw.status().ToString();
  auto out = pw->Forward(input.value());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->keys(), keys);
  EXPECT_EQ(out->values(), (V{0, 1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7}));
  EXPECT_EQ(out->offsets(), (V{0, 2, 2, 3, 4, 5, 8, 10, 13, 13}));
  ASSERT_TRUE(out->has_weights());
  EXPECT_EQ(*out->weights(), std::vector<float>(13, 1.0f));
  // Feature1 = [3] [4] [5, 6, 7], as the seed prints it.
  const JaggedTensor f1 = out->Feature(1);
  EXPECT_EQ(f1.lengths, (V{1, 1, 3}));
  // One parameter per feature, [max length], named as TorchRec's module names them.
  const auto params = pw->Parameters();
  ASSERT_EQ(params.size(), 3u);
  EXPECT_EQ(params[0]->name, "position_weights.Feature0");
  EXPECT_EQ(params[0]->value.shape(), (V{100}));
}

TEST(PositionWeighted, WeightIsTheParameterAtTheIdsPosition) {
  auto pw = PositionWeightedModule::Create({{"a", 3}});
  ASSERT_TRUE(pw.ok());
  float* p = pw->Parameters()[0]->value.data<float>();
  p[0] = 0.5f;
  p[1] = 2.0f;
  p[2] = -1.0f;
  // "b" is not position-weighted: it keeps the input's weights.
  auto input = KeyedJaggedTensor::FromLengths({"a", "b"}, {7, 8, 9, 1, 2, 3, 4}, {3, 0, 1, 2, 1, 0},
                                              std::vector<float>{9, 9, 9, 9, 0.25f, 0.75f, 4});
  auto out = pw->Forward(input.value());
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out->weights(), (std::vector<float>{0.5f, 2.0f, -1.0f, 0.5f, 0.25f, 0.75f, 4}));
  // Without input weights, the other features get 1.0.
  auto bare = KeyedJaggedTensor::FromLengths({"b", "a"}, {1, 2}, {1, 1}).value();
  out = pw->Forward(bare);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out->weights(), (std::vector<float>{1.0f, 0.5f}));
}

TEST(PositionWeighted, BackwardSumsEachIdsGradientAtItsPosition) {
  auto pw = PositionWeightedModule::Create({{"a", 4}, {"c", 2}});
  ASSERT_TRUE(pw.ok());
  // a: [x x x] [x] [] [x x]; b (not weighted): [x]; c: [x x] [] [x] [].
  auto input = KeyedJaggedTensor::FromLengths({"a", "b", "c"}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10},
                                              {3, 1, 0, 2, 1, 0, 0, 0, 2, 0, 1, 0});
  ASSERT_TRUE(input.ok()) << input.status().ToString();
  ASSERT_TRUE(pw->Forward(input.value()).ok());
  const std::vector<float> g = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  ASSERT_TRUE(pw->Backward(g).ok());
  // a's positions: 0 <- ids 0, 3, 4 (1 + 8 + 16); 1 <- ids 1, 5 (2 + 32); 2 <- id 2 (4); 3 <- none.
  EXPECT_EQ(pw->Parameters()[0]->grad.span<float>()[0], 25.0f);
  EXPECT_EQ(pw->Parameters()[0]->grad.span<float>()[1], 34.0f);
  EXPECT_EQ(pw->Parameters()[0]->grad.span<float>()[2], 4.0f);
  EXPECT_EQ(pw->Parameters()[0]->grad.span<float>()[3], 0.0f);
  // c: position 0 <- ids 7, 9 (128 + 512); 1 <- id 8 (256). b's id 6 (64) goes nowhere.
  EXPECT_EQ(pw->Parameters()[1]->grad.span<float>()[0], 640.0f);
  EXPECT_EQ(pw->Parameters()[1]->grad.span<float>()[1], 256.0f);
  // Backward adds: twice is double. In two slices (samples 0-1 and 2-3) the same sums.
  ASSERT_TRUE(pw->Backward(g, 2).ok());
  EXPECT_EQ(pw->Parameters()[0]->grad.span<float>()[0], 50.0f);
  EXPECT_EQ(pw->Parameters()[1]->grad.span<float>()[0], 1280.0f);
  EXPECT_FALSE(pw->Backward(g, 3).ok()) << "4 samples do not split into 3 slices";
  EXPECT_FALSE(pw->Backward(std::vector<float>(9)).ok()) << "one gradient per id";
}

TEST(PositionWeighted, ErrorsNameWhatIsWrong) {
  EXPECT_FALSE(PositionWeightedModule::Create({}).ok());
  auto zero = PositionWeightedModule::Create({{"a", 0}});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("'a'"), std::string::npos) << zero.status().message();
  auto pw = PositionWeightedModule::Create({{"a", 2}});
  ASSERT_TRUE(pw.ok());
  EXPECT_FALSE(pw->Backward(std::vector<float>{}).ok()) << "Backward before Forward";
  auto input = KeyedJaggedTensor::FromLengths({"a"}, {1, 2, 3, 4}, {1, 3}).value();
  auto out = pw->Forward(input);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("feature 'a', sample 1: 3 ids"), std::string::npos) << out.status().message();
}

// dL/dP through the whole chain: position weights -> EmbeddingBagCollection
// (the CPU kernel; the id weight gradient from Backward) -> DLRM -> BCE.
// Central differences (eps 1e-2) of the float32 forward, summed in double.
TEST(PositionWeighted, GradientThroughCollectionAndModelEqualsFiniteDifference) {
  HostServices services;
  PluginRegistry registry(&services);
  ASSERT_TRUE(registry.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_kernel_cpu.so").ok());
  std::vector<EmbeddingBagConfig> tables(2);
  for (int t = 0; t < 2; ++t) {
    tables[static_cast<size_t>(t)].name = "t" + std::to_string(t);
    tables[static_cast<size_t>(t)].num_embeddings = 20;
    tables[static_cast<size_t>(t)].embedding_dim = 4;
    tables[static_cast<size_t>(t)].feature_names = {"f" + std::to_string(t)};
    tables[static_cast<size_t>(t)].is_weighted = true;
  }
  tables[1].pooling = PoolingType::kMean;
  EmbeddingModuleOptions options;
  options.optimizer = OptimizerSpec::Parse("sgd,lr=0").value();  // the tables stay put
  options.init_seed = 3;
  auto ebc = EmbeddingBagCollection::Create(registry, tables, options);
  ASSERT_TRUE(ebc.ok()) << ebc.status().ToString();

  ModelTrainerOptions o;
  o.model.model = "dlrm";
  o.model.dense_in_features = 3;
  o.model.dense_arch_layer_sizes = {5, 4};
  o.model.over_arch_layer_sizes = {6, 1};
  o.model.position_weighted = {{"*", 4}};
  o.dense_optimizer = "sgd,lr=0";
  o.seed = 5;
  o.feature_names = {"f0", "f1"};
  auto trainer = ModelTrainer::Create(nullptr, 2, 4, o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  ModelTrainer& tr = **trainer;
  ASSERT_TRUE(tr.has_position_weights());
  ASSERT_EQ(tr.Parameters()[0]->name, "position_weights.f0");
  // Non-trivial position weights, so each position's gradient differs.
  for (dense::Parameter* p : {tr.Parameters()[0], tr.Parameters()[1]}) {
    for (int64_t j = 0; j < p->value.numel(); ++j) p->value.data<float>()[j] = 0.6f + 0.3f * static_cast<float>(j);
  }
  auto batch = KeyedJaggedTensor::FromLengths({"f0", "f1"}, {1, 5, 9, 2, 3, 3, 7, 11, 13, 0, 4, 19, 8},
                                              {3, 1, 0, 2, 2, 4, 1, 0}).value();
  Tensor dense = Tensor::Empty(dtype::kFloat32, {4, 3}), labels = Tensor::Empty(dtype::kFloat32, {4});
  for (int64_t i = 0; i < 12; ++i) dense.data<float>()[i] = std::cos(1.3f * static_cast<float>(i));
  for (int64_t i = 0; i < 4; ++i) labels.data<float>()[i] = static_cast<float>(i % 2);

  auto loss = [&]() {
    auto weighted = tr.ProcessFeatures(batch);
    EXPECT_TRUE(weighted.ok());
    auto pooled = ebc->Forward(weighted.value());
    EXPECT_TRUE(pooled.ok());
    auto logits = tr.Predict(pooled->values(), dense);
    EXPECT_TRUE(logits.ok());
    Tensor unused;
    return BceWithLogits(logits.value(), labels, &unused).value();
  };
  // The analytic gradient: one training step with learning rates 0.
  auto weighted = tr.ProcessFeatures(batch);
  ASSERT_TRUE(weighted.ok()) << weighted.status().ToString();
  auto pooled = ebc->Forward(weighted.value());
  ASSERT_TRUE(pooled.ok());
  auto step = tr.Backward(pooled->values(), dense, labels);
  ASSERT_TRUE(step.ok()) << step.status().ToString();
  EXPECT_FALSE(tr.Update().ok()) << "Update without the id weight gradient is refused";
  step = tr.Backward(pooled->values(), dense, labels);
  ASSERT_TRUE(step.ok());
  std::vector<float> id_weight_grad;
  ASSERT_TRUE(ebc->Backward(weighted.value(), step->dpooled, 1, 0.0, &id_weight_grad).ok());
  ASSERT_TRUE(tr.Update(&id_weight_grad).ok());
  EXPECT_FALSE(tr.Step(pooled->values(), dense, labels).ok()) << "Step() is for models without position weights";

  int checked = 0;
  for (dense::Parameter* p : {tr.Parameters()[0], tr.Parameters()[1]}) {
    for (int64_t j = 0; j < p->value.numel(); ++j) {
      float& v = p->value.data<float>()[j];
      const float keep = v;
      const float eps = 1e-2f;
      v = keep + eps;
      const double up = loss();
      v = keep - eps;
      const double down = loss();
      v = keep;
      const double fd = (up - down) / (2.0 * eps);
      const double got = p->grad.data<float>()[j];
      // Gradients here are 1e-4 .. 4e-3; the differences agree to ~1e-7.
      EXPECT_NEAR(got, fd, 1e-6 + 1e-3 * std::abs(fd)) << p->name << "[" << j << "]";
      checked += fd != 0.0;
    }
  }
  EXPECT_GE(checked, 4) << "positions with ids must have a gradient";
}

}  // namespace
}  // namespace shardrec
