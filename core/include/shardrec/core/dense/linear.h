// torch.nn.Linear: y = x W^T + b over the last dim; W [out, in], b [out].
#pragma once

#include "shardrec/core/dense/dense_layer.h"
#include "shardrec/core/dense/init.h"

namespace shardrec::dense {

class Linear : public DenseLayer {
 public:
  // Parameters `<prefix>weight`, `<prefix>bias` (no bias when !bias),
  // initialised as torch.nn.Linear does (U(+-1/sqrt(in))).
  Linear(const std::string& prefix, int64_t in, int64_t out, bool bias, const DenseInit& init);
  StatusOr<Tensor> Forward(const Tensor& x) override;   // [*, in] -> [*, out]
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  bool has_bias_;
  Parameter weight_, bias_;
  Tensor x_;  // the last input
};

}  // namespace shardrec::dense
