// TorchRec's Perceptron (Linear then an activation) and MLP (a Perceptron
// per layer size, with the activation after every layer, the last
// included, as the modules seed says).
#pragma once

#include <memory>

#include "shardrec/core/dense/linear.h"

namespace shardrec::dense {

class Perceptron : public DenseLayer {
 public:
  // Parameters `<prefix>_linear.weight`, `<prefix>_linear.bias` and, for
  // swish_layernorm, `<prefix>_activation_fn.norm.0.weight` and `.bias`.
  static StatusOr<std::unique_ptr<Perceptron>> Create(const std::string& prefix, int64_t in, int64_t out, bool bias,
                                                      const std::string& activation, const DenseInit& init);
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override;

 private:
  Perceptron(std::unique_ptr<Linear> linear, std::unique_ptr<DenseLayer> activation)
      : linear_(std::move(linear)), activation_(std::move(activation)) {}
  std::unique_ptr<Linear> linear_;
  std::unique_ptr<DenseLayer> activation_;
};

class Mlp : public DenseLayer {
 public:
  // Layer i: `<prefix>_mlp.<i>.` + the Perceptron's names.
  static StatusOr<std::unique_ptr<Mlp>> Create(const std::string& prefix, int64_t in, const std::vector<int64_t>& sizes,
                                               bool bias, const std::string& activation, const DenseInit& init);
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override;
  int64_t out_features() const { return out_; }

 private:
  Mlp(std::vector<std::unique_ptr<Perceptron>> layers, int64_t out) : layers_(std::move(layers)), out_(out) {}
  std::vector<std::unique_ptr<Perceptron>> layers_;
  int64_t out_;
};

}  // namespace shardrec::dense
