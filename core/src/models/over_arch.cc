#include "over_arch.h"

namespace shardrec::models {

StatusOr<OverArch> OverArch::Create(int64_t in, const std::vector<int64_t>& sizes, const dense::DenseInit& init) {
  OverArch arch;
  const std::vector<int64_t> hidden(sizes.begin(), sizes.end() - 1);
  SR_ASSIGN_OR_RETURN(arch.mlp_, dense::Mlp::Create("over_arch.model.0.", in, hidden, true, "relu", init));
  arch.last_ = std::make_unique<dense::Linear>("over_arch.model.1.", hidden.back(), sizes.back(), true, init);
  return arch;
}

StatusOr<Tensor> OverArch::Forward(const Tensor& x) {
  SR_ASSIGN_OR_RETURN(Tensor h, mlp_->Forward(x));
  SR_ASSIGN_OR_RETURN(Tensor logits, last_->Forward(h));
  return logits.Reshape({logits.size(0)});
}

StatusOr<Tensor> OverArch::Backward(const Tensor& dlogits, const GradientsReady& ready) {
  SR_ASSIGN_OR_RETURN(Tensor column, AsColumn(dlogits));
  SR_ASSIGN_OR_RETURN(Tensor dh, last_->Backward(column));
  SR_RETURN_IF_ERROR(Ready(ready, last_->Parameters()));
  SR_ASSIGN_OR_RETURN(Tensor dx, mlp_->Backward(dh));
  SR_RETURN_IF_ERROR(Ready(ready, mlp_->Parameters()));
  return dx;
}

void OverArch::AddParameters(std::vector<dense::Parameter*>* out) {
  for (auto* p : mlp_->Parameters()) out->push_back(p);
  for (auto* p : last_->Parameters()) out->push_back(p);
}

Status Ready(const GradientsReady& ready, const std::vector<dense::Parameter*>& params) {
  return ready ? ready(params) : Status::Ok();
}

StatusOr<Tensor> AsColumn(const Tensor& v) {
  if (!SameDType(v.dtype(), dtype::kFloat32) || v.ndim() != 1) {
    return InvalidArgumentError("dL/dlogits must be fp32 [B], got " + ShapeString(v.shape()));
  }
  return v.Reshape({v.size(0), 1});
}

}  // namespace shardrec::models
