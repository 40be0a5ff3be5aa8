#include "pairwise_interaction.h"

#include <algorithm>

namespace shardrec::models {

const float* PairwiseInteraction::Row(const Tensor& dense, const Tensor& pooled, int64_t b, int64_t i) const {
  return i == 0 ? dense.data<float>() + b * d_ : pooled.data<float>() + b * f_ * d_ + (i - 1) * d_;
}

Tensor PairwiseInteraction::Forward(const Tensor& dense, const Tensor& pooled) {
  dense_ = dense;
  pooled_ = pooled;
  const int64_t batch = dense.size(0), width = out_features();
  Tensor out = Tensor::Empty(dtype::kFloat32, {batch, width});
  for (int64_t b = 0; b < batch; ++b) {
    float* o = out.data<float>() + b * width;
    std::copy_n(dense.data<float>() + b * d_, d_, o);
    int64_t at = d_;
    for (int64_t i = 0; i <= f_; ++i) {
      const float* zi = Row(dense, pooled, b, i);
      for (int64_t j = i + 1; j <= f_; ++j) {
        const float* zj = Row(dense, pooled, b, j);
        float dot = 0.0f;
        for (int64_t k = 0; k < d_; ++k) dot += zi[k] * zj[k];
        o[at++] = dot;
      }
    }
  }
  return out;
}

void PairwiseInteraction::Backward(const Tensor& dout, Tensor* ddense, Tensor* dpooled) const {
  const int64_t batch = dense_.size(0), width = out_features();
  *ddense = Tensor::Empty(dtype::kFloat32, {batch, d_});
  *dpooled = Tensor::Zeros(dtype::kFloat32, {batch, f_ * d_});
  for (int64_t b = 0; b < batch; ++b) {
    const float* g = dout.data<float>() + b * width;
    float* dd = ddense->data<float>() + b * d_;
    std::copy_n(g, d_, dd);
    auto grad_row = [&](int64_t i) { return i == 0 ? dd : dpooled->data<float>() + b * f_ * d_ + (i - 1) * d_; };
    int64_t at = d_;
    for (int64_t i = 0; i <= f_; ++i) {
      const float* zi = Row(dense_, pooled_, b, i);
      for (int64_t j = i + 1; j <= f_; ++j, ++at) {
        const float* zj = Row(dense_, pooled_, b, j);
        float* gi = grad_row(i);
        float* gj = grad_row(j);
        for (int64_t k = 0; k < d_; ++k) {
          gi[k] += g[at] * zj[k];
          gj[k] += g[at] * zi[k];
        }
      }
    }
  }
}

Tensor ConcatColumns(const Tensor& a, const Tensor& b) {
  const int64_t rows = a.size(0), ca = a.size(1), cb = b.size(1);
  Tensor out = Tensor::Empty(dtype::kFloat32, {rows, ca + cb});
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(a.data<float>() + r * ca, ca, out.data<float>() + r * (ca + cb));
    std::copy_n(b.data<float>() + r * cb, cb, out.data<float>() + r * (ca + cb) + ca);
  }
  return out;
}

void SplitColumns(const Tensor& ab, int64_t a_cols, Tensor* a, Tensor* b) {
  const int64_t rows = ab.size(0), width = ab.size(1), b_cols = width - a_cols;
  *a = Tensor::Empty(dtype::kFloat32, {rows, a_cols});
  *b = Tensor::Empty(dtype::kFloat32, {rows, b_cols});
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(ab.data<float>() + r * width, a_cols, a->data<float>() + r * a_cols);
    std::copy_n(ab.data<float>() + r * width + a_cols, b_cols, b->data<float>() + r * b_cols);
  }
}

}  // namespace shardrec::models
