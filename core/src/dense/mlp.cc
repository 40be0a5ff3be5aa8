#include "shardrec/core/dense/mlp.h"

#include <fmt/format.h>

#include "shardrec/core/dense/activations.h"

namespace shardrec::dense {

StatusOr<std::unique_ptr<Perceptron>> Perceptron::Create(const std::string& prefix, int64_t in, int64_t out, bool bias,
                                                         const std::string& activation, const DenseInit& init) {
  if (in <= 0 || out <= 0) return InvalidArgumentError(fmt::format("Perceptron {}: sizes must be positive, got {} -> {}", prefix, in, out));
  SR_ASSIGN_OR_RETURN(auto act, MakeActivation(activation, prefix + "_activation_fn.", out));
  auto linear = std::make_unique<Linear>(prefix + "_linear.", in, out, bias, init);
  return std::unique_ptr<Perceptron>(new Perceptron(std::move(linear), std::move(act)));
}

StatusOr<Tensor> Perceptron::Forward(const Tensor& x) {
  SR_ASSIGN_OR_RETURN(Tensor h, linear_->Forward(x));
  return activation_->Forward(h);
}

StatusOr<Tensor> Perceptron::Backward(const Tensor& dy) {
  SR_ASSIGN_OR_RETURN(Tensor dh, activation_->Backward(dy));
  return linear_->Backward(dh);
}

std::vector<Parameter*> Perceptron::Parameters() {
  auto p = linear_->Parameters();
  for (Parameter* q : activation_->Parameters()) p.push_back(q);
  return p;
}

StatusOr<std::unique_ptr<Mlp>> Mlp::Create(const std::string& prefix, int64_t in, const std::vector<int64_t>& sizes,
                                           bool bias, const std::string& activation, const DenseInit& init) {
  if (sizes.empty()) return InvalidArgumentError("MLP " + prefix + ": needs at least one layer size");
  std::vector<std::unique_ptr<Perceptron>> layers;
  int64_t width = in;
  for (size_t i = 0; i < sizes.size(); ++i) {
    SR_ASSIGN_OR_RETURN(auto layer, Perceptron::Create(fmt::format("{}_mlp.{}.", prefix, i), width, sizes[i], bias,
                                                       activation, init));
    layers.push_back(std::move(layer));
    width = sizes[i];
  }
  return std::unique_ptr<Mlp>(new Mlp(std::move(layers), width));
}

StatusOr<Tensor> Mlp::Forward(const Tensor& x) {
  Tensor h = x;
  for (auto& layer : layers_) {
    SR_ASSIGN_OR_RETURN(h, layer->Forward(h));
  }
  return h;
}

StatusOr<Tensor> Mlp::Backward(const Tensor& dy) {
  Tensor g = dy;
  for (auto it = layers_.rbegin(); it != layers_.rend(); ++it) {
    SR_ASSIGN_OR_RETURN(g, (*it)->Backward(g));
  }
  return g;
}

std::vector<Parameter*> Mlp::Parameters() {
  std::vector<Parameter*> p;
  for (auto& layer : layers_) {
    for (Parameter* q : layer->Parameters()) p.push_back(q);
  }
  return p;
}

}  // namespace shardrec::dense
