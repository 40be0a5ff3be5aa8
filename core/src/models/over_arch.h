// DLRM's OverArch: an MLP with relu over all but the last size, then a
// Linear to the last (no activation: logits). Internal to core/src/models.
#pragma once

#include "shardrec/core/dense/mlp.h"
#include "shardrec/core/models/rec_model.h"

namespace shardrec::models {

class OverArch {
 public:
  // `over_arch.model.0.` (the MLP) and `over_arch.model.1.` (the Linear).
  static StatusOr<OverArch> Create(int64_t in, const std::vector<int64_t>& sizes, const dense::DenseInit& init);
  StatusOr<Tensor> Forward(const Tensor& x);  // [B, in] -> logits [B]
  StatusOr<Tensor> Backward(const Tensor& dlogits, const GradientsReady& ready);
  void AddParameters(std::vector<dense::Parameter*>* out);

 private:
  std::unique_ptr<dense::Mlp> mlp_;
  std::unique_ptr<dense::Linear> last_;
};

// Reports `params` to `ready` when there is one.
Status Ready(const GradientsReady& ready, const std::vector<dense::Parameter*>& params);

// [B] <-> [B, 1].
StatusOr<Tensor> AsColumn(const Tensor& v);

}  // namespace shardrec::models
