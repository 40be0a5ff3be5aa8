// DLRM's interaction (InteractionArch): Z = [dense; f_1; ...; f_F] as
// F + 1 rows of D; out = [dense, <z_i, z_j> for i < j in row-major order]
// = [B, D + F + F (F - 1) / 2]. Internal to core/src/models.
#pragma once

#include "shardrec/core/tensor/tensor.h"

namespace shardrec::models {

class PairwiseInteraction {
 public:
  PairwiseInteraction(int64_t features, int64_t dim) : f_(features), d_(dim) {}
  int64_t out_features() const { return d_ + (f_ + 1) * f_ / 2; }
  Tensor Forward(const Tensor& dense, const Tensor& pooled);
  // dL/dout in: dL/ddense and dL/dpooled out.
  void Backward(const Tensor& dout, Tensor* ddense, Tensor* dpooled) const;

 private:
  int64_t f_, d_;
  Tensor dense_, pooled_;
};

// [B, a] and [B, b] side by side: [B, a + b]; and split back.
Tensor ConcatColumns(const Tensor& a, const Tensor& b);
void SplitColumns(const Tensor& ab, int64_t a_cols, Tensor* a, Tensor* b);

}  // namespace shardrec::models
