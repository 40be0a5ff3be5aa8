// TorchRec's FactorizationMachine and DeepFM modules (torchrec.modules.
// deepfm) over the flattened, concatenated embeddings f [B, M]:
//   FactorizationMachine  out[b] = 0.5 * ((sum_j f_j)^2 - sum_j f_j^2)   [B, 1]
//       i.e. the sum of f_i f_j over every pair of scalar elements, as
//       upstream computes it (not the textbook FM per embedding dim:
//       docs/dense.md);
//   DeepFM                out = dense_module(f).
#pragma once

#include <memory>

#include "shardrec/core/dense/dense_layer.h"

namespace shardrec::dense {

// TorchRec's _get_flatten_input: every [B, ...] tensor flattened to
// [B, numel / B] and concatenated along dim 1; and the way back, for the
// gradient ([B, M] into pieces shaped like `like`).
StatusOr<Tensor> ConcatFlattened(const std::vector<Tensor>& embeddings);
StatusOr<std::vector<Tensor>> SplitFlattened(const Tensor& flat, const std::vector<Tensor>& like);

class FactorizationMachine : public DenseLayer {
 public:
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;

 private:
  Tensor x_;
  std::vector<double> sums_;
};

class DeepFM : public DenseLayer {
 public:
  explicit DeepFM(std::unique_ptr<DenseLayer> dense_module) : dense_(std::move(dense_module)) {}
  StatusOr<Tensor> Forward(const Tensor& x) override { return dense_->Forward(x); }
  StatusOr<Tensor> Backward(const Tensor& dy) override { return dense_->Backward(dy); }
  std::vector<Parameter*> Parameters() override { return dense_->Parameters(); }

 private:
  std::unique_ptr<DenseLayer> dense_;
};

}  // namespace shardrec::dense
