// Element-wise activations (relu, sigmoid) and TorchRec's SwishLayerNorm,
// Y = X * sigmoid(LayerNorm(X)) over the trailing dims, with LayerNorm as
// torch.nn.LayerNorm computes it (biased variance, eps 1e-5, affine weight
// and bias inside the sigmoid).
#pragma once

#include <memory>

#include "shardrec/core/dense/dense_layer.h"

namespace shardrec::dense {

class Relu : public DenseLayer {
 public:
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;

 private:
  Tensor y_;
};

class Sigmoid : public DenseLayer {
 public:
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;

 private:
  Tensor y_;
};

// torch.nn.LayerNorm(normalized_shape): over the last `normalized` values
// of every row (the product of the normalized dims).
class LayerNorm : public DenseLayer {
 public:
  LayerNorm(const std::string& prefix, std::vector<int64_t> normalized_shape, float eps = 1e-5f);
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override { return {&weight_, &bias_}; }

 private:
  std::vector<int64_t> shape_;
  int64_t size_;
  float eps_;
  Parameter weight_, bias_;  // ones, zeros
  Tensor xhat_;              // (x - mean) * rstd, per row
  std::vector<float> rstd_;  // 1 / sqrt(var + eps), per row
};

// Parameters `<prefix>norm.0.weight` and `.bias`, as TorchRec names them.
class SwishLayerNorm : public DenseLayer {
 public:
  SwishLayerNorm(const std::string& prefix, std::vector<int64_t> input_dims);
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override { return norm_.Parameters(); }

 private:
  LayerNorm norm_;
  Tensor x_, s_;  // the input and sigmoid(LayerNorm(x))
};

// "relu", "sigmoid" or "swish_layernorm" (over `width`); the error lists them.
StatusOr<std::unique_ptr<DenseLayer>> MakeActivation(const std::string& name, const std::string& prefix, int64_t width);

}  // namespace shardrec::dense
