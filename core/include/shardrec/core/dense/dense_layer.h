// The dense half's building block: a layer with a forward and a backward on
// CPU fp32 tensors, and the parameters it trains. Layers follow TorchRec's
// modules (seed 002_*, docs/dense.md): parameter shapes, names (as its
// state_dict spells them) and registration order are TorchRec's.
#pragma once

#include <string>
#include <vector>

#include "shardrec/core/status.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec::dense {

// A trained tensor and its gradient (same shape, fp32), which Backward adds
// to: callers zero it between steps (DenseLayer::ZeroGrad).
struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
};

// Not thread-safe: one Forward, then its Backward, at a time.
class DenseLayer {
 public:
  virtual ~DenseLayer() = default;
  // y = f(x), keeping what Backward needs.
  virtual StatusOr<Tensor> Forward(const Tensor& x) = 0;
  // dL/dy of the last Forward in: adds dL/dp into every parameter's grad
  // and returns dL/dx.
  virtual StatusOr<Tensor> Backward(const Tensor& dy) = 0;
  // In registration order; empty for a layer without parameters.
  virtual std::vector<Parameter*> Parameters() { return {}; }
  void ZeroGrad();
};

// A parameter of `shape`, its grad zeroed; value left to an initialiser.
Parameter MakeParameter(std::string name, std::vector<int64_t> shape);

// Checks that `x` is fp32 with `ndim` dims (0: any) and, when `last` > 0,
// a last dim of `last`; the error names `who`.
Status CheckInput(const Tensor& x, const std::string& who, int ndim, int64_t last);

}  // namespace shardrec::dense
