// Optimizers for the dense parameters, step for step as torch.optim (1.13,
// single-tensor) computes them, written as the embedding optimizers are:
//   "sgd,lr=0.1,momentum=0.9"   "adagrad,lr=0.01"   "adam,lr=1e-3"   "adamw,lr=1e-3,weight_decay=0.01"
// Hyper-parameters and their defaults (torch's):
//   sgd      lr=0.01 momentum=0 dampening=0 weight_decay=0 nesterov=0
//   adagrad  lr=0.01 lr_decay=0 weight_decay=0 initial_accumulator_value=0 eps=1e-10
//   adam     lr=0.001 beta1=0.9 beta2=0.999 eps=1e-8 weight_decay=0       (L2, folded into the gradient)
//   adamw    lr=0.001 beta1=0.9 beta2=0.999 eps=1e-8 weight_decay=0.01    (decoupled: p *= 1 - lr * wd first)
// (torch's SGD has no default lr; ours is 0.01.)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shardrec/core/dense/dense_layer.h"

namespace shardrec::dense {

struct DenseOptimizerSpec {
  std::string name = "sgd";
  std::map<std::string, double> params;  // every hyper-parameter, defaults filled in

  static StatusOr<DenseOptimizerSpec> Parse(const std::string& text);
  double Get(const std::string& key) const { return params.at(key); }
  std::string ToString() const;  // parses back to the same spec
};

class DenseOptimizer {
 public:
  explicit DenseOptimizer(DenseOptimizerSpec spec) : spec_(std::move(spec)) {}
  // One step over `params` (the same list, in the same order, every step).
  Status Step(const std::vector<Parameter*>& params);
  int64_t steps() const { return steps_; }
  const DenseOptimizerSpec& spec() const { return spec_; }
  // The state of parameter i, by kind ("momentum_buffer", "sum",
  // "exp_avg", "exp_avg_sq"): for checkpoints, and to compare with torch.
  std::map<std::string, Tensor>& State(size_t i);
  // State(i) with every kind present for a parameter of `shape`: a missing
  // kind is made as the first step makes it (zeros; Adagrad's sum at
  // initial_accumulator_value). An existing one of another shape is an error.
  StatusOr<std::map<std::string, Tensor>*> StateFor(size_t i, const std::vector<int64_t>& shape, const std::string& name);
  std::vector<std::string> StateKinds() const;
  void SetSteps(int64_t steps) { steps_ = steps; }

 private:
  DenseOptimizerSpec spec_;
  int64_t steps_ = 0;
  std::vector<std::map<std::string, Tensor>> state_;
};

// torch.nn.utils.clip_grad_norm_(params, max_norm) with the 2-norm: scales
// every gradient by min(1, max_norm / (total + 1e-6)) and returns the
// total norm before clipping.
float ClipGradNorm(const std::vector<Parameter*>& params, float max_norm);

}  // namespace shardrec::dense
