// ModelTrainer over ranks: dense replicas stay bit-identical after every
// step, bucketing changes nothing but the timing, and each rank's step
// equals one process's step on the global batch (slices, as the host's
// --verify reference runs it).
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "dense/gradient_check.h"
#include "dist/ranks_fixture.h"
#include "shardrec/core/train/model_trainer.h"

namespace shardrec {
namespace {

using dense::testing::RandomTensor;

constexpr int64_t kBatch = 8, kFeatures = 3, kDim = 4;

ModelTrainerOptions Options(const std::string& model, const std::string& optimizer, int64_t bucket_bytes) {
  ModelTrainerOptions o;
  o.model.model = model;
  o.model.dense_in_features = 5;
  o.model.dense_arch_layer_sizes = {6, kDim};
  o.model.over_arch_layer_sizes = {7, 5, 1};
  o.model.dcn_num_layers = 2;
  o.model.dcn_low_rank_dim = 3;
  o.dense_optimizer = optimizer;
  o.seed = 17;
  o.bucket_bytes = bucket_bytes;
  return o;
}

// Rank r's inputs at `step`: rows [r * kBatch, (r + 1) * kBatch) of the global batch.
struct Inputs {
  Tensor pooled, dense, labels;
};
Inputs Global(int world, int step) {
  Inputs in{RandomTensor({world * kBatch, kFeatures * kDim}, 100 + step, 0.5f), RandomTensor({world * kBatch, 5}, 200 + step),
            Tensor::Empty(dtype::kFloat32, {world * kBatch})};
  for (int64_t i = 0; i < in.labels.numel(); ++i) in.labels.data<float>()[i] = static_cast<float>((i * 7 + step) % 3 == 0);
  return in;
}
Tensor Rows(const Tensor& t, int64_t first, int64_t rows) {
  std::vector<int64_t> shape = t.shape();
  shape[0] = rows;
  Tensor out = Tensor::Empty(dtype::kFloat32, shape);
  const int64_t per = t.numel() / t.size(0);
  std::copy_n(t.data<float>() + first * per, rows * per, out.data<float>());
  return out;
}

class DataParallel : public RanksTest {};

// Local comm adds the ranks' gradients in rank order, as the reference
// does: bit for bit. Gloo's ring adds them in another order: rounding.
TEST_P(DataParallel, EveryRankMatchesOneProcessOnTheGlobalBatch) {
  const bool exact = GetParam() == "local";
  for (const char* model : {"dlrm", "dcn", "deepfm"}) {
    for (const char* optimizer : {"sgd,lr=0.1,momentum=0.9", "adagrad,lr=0.05", "adamw,lr=0.01"}) {
      SCOPED_TRACE(std::string(model) + " " + optimizer);
      constexpr int kWorld = 3, kSteps = 3;
      // The reference: one process, the global batch in rank-sized slices.
      ModelTrainerOptions ro = Options(model, optimizer, 0);
      ro.slices = kWorld;
      ro.loss_batch = kBatch;
      ro.dense_average = kWorld;
      auto ref = ModelTrainer::Create(nullptr, kFeatures, kDim, ro);
      ASSERT_TRUE(ref.ok()) << ref.status().ToString();
      std::vector<Tensor> ref_dpooled;
      for (int s = 0; s < kSteps; ++s) {
        const Inputs in = Global(kWorld, s);
        auto step = (*ref)->Step(in.pooled, in.dense, in.labels);
        ASSERT_TRUE(step.ok()) << step.status().ToString();
        ref_dpooled.push_back(step->dpooled);
      }
      // Buckets of 64 bytes (many, overlapping backward) and one bucket.
      for (int64_t bucket : {int64_t{64}, int64_t{0}}) {
        std::mutex mu;
        OnRanks(kWorld, [&](const ProcessGroup& group) {
          auto t = ModelTrainer::Create(&group, kFeatures, kDim, Options(model, optimizer, bucket));
          ASSERT_TRUE(t.ok()) << t.status().ToString();
          for (int s = 0; s < kSteps; ++s) {
            const Inputs in = Global(kWorld, s);
            const int64_t first = group.rank() * kBatch;
            auto step = (*t)->Step(Rows(in.pooled, first, kBatch), Rows(in.dense, first, kBatch),
                                   Rows(in.labels, first, kBatch));
            ASSERT_TRUE(step.ok()) << step.status().ToString();
            const Tensor want = Rows(ref_dpooled[static_cast<size_t>(s)], first, kBatch);
            for (int64_t i = 0; i < want.numel(); ++i) {
              const float w = want.data<float>()[i];
              ASSERT_NEAR(step->dpooled.data<float>()[i], w, exact ? 0.0f : 1e-5f * std::max(1e-3f, std::abs(w)))
                  << "dL/dpooled, step " << s;
            }
            ASSERT_TRUE(CheckReplicasIdentical(group, (*t)->model().Parameters()).ok()) << "after step " << s;
          }
          if (bucket > 0) {
            EXPECT_GT((*t)->buckets(), 1);
          }
          const auto got = (*t)->model().Parameters(), want = (*ref)->model().Parameters();
          std::lock_guard<std::mutex> lock(mu);
          for (size_t p = 0; p < got.size(); ++p) {
            for (int64_t i = 0; i < got[p]->value.numel(); ++i) {
              ASSERT_NEAR(got[p]->value.data<float>()[i], want[p]->value.data<float>()[i], exact ? 0.0 : 1e-5)
                  << got[p]->name << "[" << i << "], bucket " << bucket;
            }
          }
        });
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Comm, DataParallel, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
