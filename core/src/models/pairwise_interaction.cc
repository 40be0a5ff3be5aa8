#include "pairwise_interaction.h"

#include <algorithm>
#include <vector>

#include "shardrec/core/dense/gemm.h"

namespace shardrec::models {

// Per sample, Z = [dense; pooled] is (F + 1) x D in one buffer; the Gram
// matrix Z Z^T is one small matrix product (a scalar dot product loop does
// not vectorise: the compiler may not reorder its float sum).
Tensor PairwiseInteraction::Forward(const Tensor& dense, const Tensor& pooled) {
  dense_ = dense;
  pooled_ = pooled;
  const int64_t batch = dense.size(0), width = out_features(), n = f_ + 1;
  Tensor out = Tensor::Empty(dtype::kFloat32, {batch, width});
  std::vector<float> z(static_cast<size_t>(n * d_)), gram(static_cast<size_t>(n * n));
  for (int64_t b = 0; b < batch; ++b) {
    std::copy_n(dense.data<float>() + b * d_, d_, z.data());
    std::copy_n(pooled.data<float>() + b * f_ * d_, f_ * d_, z.data() + d_);
    dense::Sgemm(false, true, n, n, d_, 1.0f, z.data(), d_, z.data(), d_, 0.0f, gram.data(), n);
    float* o = out.data<float>() + b * width;
    std::copy_n(z.data(), d_, o);
    int64_t at = d_;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < n; ++j) o[at++] = gram[static_cast<size_t>(i * n + j)];
    }
  }
  return out;
}

// dZ = S Z with S symmetric, S[i][j] = S[j][i] = dL/d<z_i, z_j>.
void PairwiseInteraction::Backward(const Tensor& dout, Tensor* ddense, Tensor* dpooled) const {
  const int64_t batch = dense_.size(0), width = out_features(), n = f_ + 1;
  *ddense = Tensor::Empty(dtype::kFloat32, {batch, d_});
  *dpooled = Tensor::Empty(dtype::kFloat32, {batch, f_ * d_});
  std::vector<float> z(static_cast<size_t>(n * d_)), dz(static_cast<size_t>(n * d_)), s(static_cast<size_t>(n * n));
  for (int64_t b = 0; b < batch; ++b) {
    const float* g = dout.data<float>() + b * width;
    std::copy_n(dense_.data<float>() + b * d_, d_, z.data());
    std::copy_n(pooled_.data<float>() + b * f_ * d_, f_ * d_, z.data() + d_);
    std::fill(s.begin(), s.end(), 0.0f);
    int64_t at = d_;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = i + 1; j < n; ++j, ++at) {
        s[static_cast<size_t>(i * n + j)] = g[at];
        s[static_cast<size_t>(j * n + i)] = g[at];
      }
    }
    dense::Sgemm(false, false, n, d_, n, 1.0f, s.data(), n, z.data(), d_, 0.0f, dz.data(), d_);
    float* dd = ddense->data<float>() + b * d_;
    for (int64_t k = 0; k < d_; ++k) dd[k] = g[k] + dz[static_cast<size_t>(k)];
    std::copy_n(dz.data() + d_, f_ * d_, dpooled->data<float>() + b * f_ * d_);
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
