#include "shardrec/core/train/model_trainer.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

namespace shardrec {

namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

StatusOr<std::unique_ptr<ModelTrainer>> ModelTrainer::Create(const ProcessGroup* group, int64_t features, int64_t dim,
                                                             const ModelTrainerOptions& options) {
  SR_ASSIGN_OR_RETURN(auto spec, dense::DenseOptimizerSpec::Parse(options.dense_optimizer));
  SR_ASSIGN_OR_RETURN(auto model, CreateRecModel(options.model, features, dim, dense::DenseInit(options.seed)));
  if (options.clip_norm < 0) return InvalidArgumentError("the dense gradient clip norm must be >= 0");
  std::optional<PositionWeightedModule> position_weights;
  if (!options.model.position_weighted.empty()) {
    SR_ASSIGN_OR_RETURN(auto lengths, options.model.PositionWeightedFeatures(options.feature_names));
    if (lengths.empty()) return InvalidArgumentError("model: position_weighted covers no feature");
    SR_ASSIGN_OR_RETURN(auto made, PositionWeightedModule::Create(lengths));
    position_weights.emplace(std::move(made));
  }
  return std::unique_ptr<ModelTrainer>(new ModelTrainer(group, std::move(model), std::move(position_weights),
                                                        dense::DenseOptimizer(std::move(spec)), options));
}

ModelTrainer::ModelTrainer(const ProcessGroup* group, std::unique_ptr<RecModel> model,
                           std::optional<PositionWeightedModule> position_weights, dense::DenseOptimizer optimizer,
                           ModelTrainerOptions options)
    : group_(group),
      model_(std::move(model)),
      position_weights_(std::move(position_weights)),
      optimizer_(std::move(optimizer)),
      options_(std::move(options)) {
  // TorchRec registers the sparse arch (and its feature processors) before
  // the dense layers; backward finishes them last, so their bucket is the
  // last to start.
  if (position_weights_) params_ = position_weights_->Parameters();
  for (dense::Parameter* p : model_->Parameters()) params_.push_back(p);
  if (group_ != nullptr && group_->world_size() > 1) buckets_.emplace(*group_, params_, options_.bucket_bytes);
}

StatusOr<DenseStep> ModelTrainer::Accumulate(const Tensor& pooled, const Tensor& dense, const Tensor& labels,
                                              const GradientsReady& ready) {
  auto start = Clock::now();
  SR_ASSIGN_OR_RETURN(Tensor logits, model_->Forward(dense, pooled));
  DenseStep step;
  Tensor dlogits;
  SR_ASSIGN_OR_RETURN(step.loss, BceWithLogits(logits, labels, &dlogits));
  step.logits = logits;
  const int64_t batch = logits.size(0);
  const int64_t loss_batch = options_.loss_batch > 0 ? options_.loss_batch : batch;
  if (loss_batch != batch) {
    // The mean over loss_batch samples, not over this batch.
    const float scale = static_cast<float>(batch) / static_cast<float>(loss_batch);
    for (float& g : dlogits.span<float>()) g *= scale;
  }
  times_.forward += Since(start);
  start = Clock::now();
  SR_ASSIGN_OR_RETURN(step.dpooled, model_->Backward(dlogits, ready));
  times_.backward += Since(start);
  return step;
}

StatusOr<KeyedJaggedTensor> ModelTrainer::ProcessFeatures(const KeyedJaggedTensor& features) {
  if (!position_weights_) return features;
  return position_weights_->Forward(features);
}

StatusOr<DenseStep> ModelTrainer::Step(const Tensor& pooled, const Tensor& dense, const Tensor& labels) {
  if (position_weights_) {
    return FailedPreconditionError("a model with position weights trains in two halves: Backward, the collection's "
                                   "backward with the id weight gradient, then Update");
  }
  SR_ASSIGN_OR_RETURN(DenseStep step, Backward(pooled, dense, labels));
  SR_RETURN_IF_ERROR(Update());
  return step;
}

StatusOr<DenseStep> ModelTrainer::Backward(const Tensor& pooled, const Tensor& dense, const Tensor& labels) {
  if (pending_update_) return FailedPreconditionError("Backward twice without an Update between");
  for (dense::Parameter* p : params_) std::fill(p->grad.span<float>().begin(), p->grad.span<float>().end(), 0.0f);
  GradientsReady ready;
  if (buckets_) ready = [this](const std::vector<dense::Parameter*>& ps) { return buckets_->Ready(ps); };
  DenseStep step;
  const int slices = std::max(options_.slices, 1);
  const int64_t batch = pooled.size(0);
  if (batch % slices != 0) {
    return InvalidArgumentError(fmt::format("a batch of {} does not split into {} equal slices", batch, slices));
  }
  if (slices == 1) {
    SR_ASSIGN_OR_RETURN(step, Accumulate(pooled, dense, labels, ready));
  } else {
    const int64_t rows = batch / slices;
    auto slice = [rows](const Tensor& t, int64_t i) {
      std::vector<int64_t> shape = t.shape();
      shape[0] = rows;
      Tensor out = Tensor::Empty(dtype::kFloat32, shape);
      const int64_t per = t.numel() / t.size(0);
      std::copy_n(t.data<float>() + i * rows * per, rows * per, out.data<float>());
      return out;
    };
    step.dpooled = Tensor::Empty(dtype::kFloat32, pooled.shape());
    step.logits = Tensor::Empty(dtype::kFloat32, {batch});
    const int64_t per = pooled.numel() / batch;
    // Each slice's gradients on their own, then summed in slice order, as
    // an all-reduce over ranks adds them.
    std::vector<Tensor> sums;
    for (dense::Parameter* p : params_) sums.push_back(Tensor::Zeros(dtype::kFloat32, p->grad.shape()));
    for (int i = 0; i < slices; ++i) {
      for (dense::Parameter* p : params_) std::fill(p->grad.span<float>().begin(), p->grad.span<float>().end(), 0.0f);
      SR_ASSIGN_OR_RETURN(DenseStep part, Accumulate(slice(pooled, i), slice(dense, i), slice(labels, i), ready));
      step.loss += part.loss / slices;
      std::copy_n(part.dpooled.data<float>(), rows * per, step.dpooled.data<float>() + i * rows * per);
      std::copy_n(part.logits.data<float>(), rows, step.logits.data<float>() + i * rows);
      for (size_t k = 0; k < params_.size(); ++k) {
        float* sum = sums[k].data<float>();
        const float* g = params_[k]->grad.data<float>();
        for (int64_t j = 0; j < sums[k].numel(); ++j) sum[j] += g[j];
      }
    }
    for (size_t k = 0; k < params_.size(); ++k) {
      std::copy_n(sums[k].data<float>(), sums[k].numel(), params_[k]->grad.data<float>());
    }
  }
  pending_update_ = true;
  return step;
}

Status ModelTrainer::Update(const std::vector<float>* id_weight_grad) {
  if (!pending_update_) return FailedPreconditionError("Update needs a Backward first");
  pending_update_ = false;
  if (position_weights_) {
    if (id_weight_grad == nullptr) {
      return InvalidArgumentError("the model has position weights: Update needs the collection's id weight gradient");
    }
    const auto start = Clock::now();
    SR_RETURN_IF_ERROR(position_weights_->Backward(*id_weight_grad, std::max(options_.slices, 1)));
    times_.backward += Since(start);
    if (buckets_) SR_RETURN_IF_ERROR(buckets_->Ready(position_weights_->Parameters()));
  }
  if (buckets_) {
    const double before = buckets_->exposed_seconds();
    SR_RETURN_IF_ERROR(buckets_->Finish());
    times_.allreduce += buckets_->exposed_seconds() - before;
  }
  const int average = options_.dense_average > 0 ? options_.dense_average : 1;
  if (!buckets_ && average > 1) {
    // As GradientBuckets averages: times 1/W (not / W, which rounds otherwise).
    const float scale = 1.0f / static_cast<float>(average);
    for (dense::Parameter* p : params_) {
      for (float& g : p->grad.span<float>()) g *= scale;
    }
  }
  const auto start = Clock::now();
  if (options_.clip_norm > 0) dense::ClipGradNorm(params_, options_.clip_norm);
  SR_RETURN_IF_ERROR(optimizer_.Step(params_));
  times_.optimizer += Since(start);
  return Status::Ok();
}

}  // namespace shardrec
