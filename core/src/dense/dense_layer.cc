#include "shardrec/core/dense/dense_layer.h"

#include <algorithm>

#include <fmt/format.h>

namespace shardrec::dense {

void DenseLayer::ZeroGrad() {
  for (Parameter* p : Parameters()) std::fill(p->grad.span<float>().begin(), p->grad.span<float>().end(), 0.0f);
}

Parameter MakeParameter(std::string name, std::vector<int64_t> shape) {
  Parameter p;
  p.name = std::move(name);
  p.value = Tensor::Zeros(dtype::kFloat32, shape);
  p.grad = Tensor::Zeros(dtype::kFloat32, std::move(shape));
  return p;
}

Status CheckInput(const Tensor& x, const std::string& who, int ndim, int64_t last) {
  if (!SameDType(x.dtype(), dtype::kFloat32)) return InvalidArgumentError(who + ": expects fp32 input");
  if (x.ndim() == 0 || (ndim > 0 && x.ndim() != ndim)) {
    return InvalidArgumentError(fmt::format("{}: expects {} dims, got {}", who, ndim > 0 ? std::to_string(ndim) : "1 or more",
                                            ShapeString(x.shape())));
  }
  if (last > 0 && x.size(x.ndim() - 1) != last) {
    return InvalidArgumentError(fmt::format("{}: expects a last dim of {}, got {}", who, last, ShapeString(x.shape())));
  }
  return Status::Ok();
}

}  // namespace shardrec::dense
