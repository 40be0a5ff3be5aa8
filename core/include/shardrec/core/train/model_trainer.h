// The dense half of a training step: the model over the pooled embeddings
// and the dense features, BCE-with-logits over the labels, backward with
// the dense gradients all-reduced in buckets as they become ready, optional
// clipping, the dense optimizer. The caller runs the sparse half (the
// (sharded) EmbeddingBagCollection's forward, then its backward with the
// dL/dpooled this returns, fused optimizer inside).
//
// Gradient semantics are TorchRec's DistributedModelParallel: each rank's
// loss is the mean over its own samples; dense gradients are averaged over
// the ranks (DDP); embedding gradients from every rank add up in the
// tables. An unsharded reference reproduces a W-rank run on the global
// batch with loss_batch = the per-rank batch and dense_average = W.
#pragma once

#include <memory>
#include <optional>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/dense/dense_optimizer.h"
#include "shardrec/core/feature_processors/position_weighted.h"
#include "shardrec/core/models/rec_model.h"
#include "shardrec/core/train/gradient_buckets.h"

namespace shardrec {

struct ModelTrainerOptions {
  ModelConfig model;
  std::string dense_optimizer = "adagrad,lr=0.01";
  uint64_t seed = 0;                        // the dense parameters' initialisation
  int64_t bucket_bytes = int64_t{1} << 20;  // 0: one all-reduce after backward
  float clip_norm = 0;                      // > 0: clip_grad_norm_ of the dense gradients
  int64_t loss_batch = 0;                   // 0: the batch given to Step
  int dense_average = 0;                    // 0: the group's world size (1 without a group)
  // > 1: Step's batch is that many equal slices, each through forward and
  // backward on its own (as that many ranks would), their gradients
  // summed: a reference then matches the ranks' products bit for bit, so
  // that optimizers which normalise the step (Adagrad, Adam) do not
  // magnify rounding in tiny gradients.
  int slices = 1;
  // The sparse features, in the collection's order: needed when the model
  // has position weights ("*" expands to them).
  std::vector<std::string> feature_names;
};

struct DenseStepTimes {
  double forward = 0, backward = 0, allreduce = 0, optimizer = 0;  // seconds, summed over steps
};

struct DenseStep {
  double loss = 0;  // this rank's mean loss
  Tensor dpooled;   // dL/dpooled, for the sparse half's backward
  Tensor logits;    // [B], for metrics
};

class ModelTrainer {
 public:
  // `group` may be null (one process, no all-reduce).
  static StatusOr<std::unique_ptr<ModelTrainer>> Create(const ProcessGroup* group, int64_t features, int64_t dim,
                                                        const ModelTrainerOptions& options);
  StatusOr<DenseStep> Step(const Tensor& pooled, const Tensor& dense, const Tensor& labels);
  // The two halves of Step (see the top of this file).
  StatusOr<DenseStep> Backward(const Tensor& pooled, const Tensor& dense, const Tensor& labels);
  // id_weight_grad: the collection's per-id weight gradient for the
  // features ProcessFeatures returned; required with position weights.
  Status Update(const std::vector<float>* id_weight_grad = nullptr);
  // The features with their position weights (unchanged without them).
  StatusOr<KeyedJaggedTensor> ProcessFeatures(const KeyedJaggedTensor& features);
  bool has_position_weights() const { return position_weights_.has_value(); }
  // Every trained dense parameter: the position weights, then the model's.
  const std::vector<dense::Parameter*>& Parameters() const { return params_; }
  // Forward, loss and backward of one slice: gradients added, no step.
  StatusOr<DenseStep> Accumulate(const Tensor& pooled, const Tensor& dense, const Tensor& labels, const GradientsReady& ready);
  // Logits only (evaluation).
  StatusOr<Tensor> Predict(const Tensor& pooled, const Tensor& dense) { return model_->Forward(dense, pooled); }

  RecModel& model() { return *model_; }
  dense::DenseOptimizer& optimizer() { return optimizer_; }
  const DenseStepTimes& times() const { return times_; }
  int buckets() const { return buckets_ ? buckets_->buckets() : 0; }

 private:
  ModelTrainer(const ProcessGroup* group, std::unique_ptr<RecModel> model,
               std::optional<PositionWeightedModule> position_weights, dense::DenseOptimizer optimizer,
               ModelTrainerOptions options);
  const ProcessGroup* group_;
  std::unique_ptr<RecModel> model_;
  std::optional<PositionWeightedModule> position_weights_;
  bool pending_update_ = false;
  std::vector<dense::Parameter*> params_;
  dense::DenseOptimizer optimizer_;
  ModelTrainerOptions options_;
  std::optional<GradientBuckets> buckets_;
  DenseStepTimes times_;
};

}  // namespace shardrec
