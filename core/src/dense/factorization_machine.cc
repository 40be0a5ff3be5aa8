#include "shardrec/core/dense/factorization_machine.h"

#include <algorithm>

#include <fmt/format.h>

namespace shardrec::dense {

StatusOr<Tensor> ConcatFlattened(const std::vector<Tensor>& embeddings) {
  if (embeddings.empty()) return InvalidArgumentError("no embeddings to concatenate");
  const int64_t b = embeddings[0].ndim() > 0 ? embeddings[0].size(0) : 0;
  int64_t width = 0;
  for (size_t i = 0; i < embeddings.size(); ++i) {
    const Tensor& e = embeddings[i];
    SR_RETURN_IF_ERROR(CheckInput(e, fmt::format("embedding {}", i), 0, 0));
    if (e.size(0) != b) {
      return InvalidArgumentError(fmt::format("embedding {} has batch {}, embedding 0 has {}", i, e.size(0), b));
    }
    width += b == 0 ? 0 : e.numel() / b;
  }
  Tensor out = Tensor::Empty(dtype::kFloat32, {b, width});
  int64_t at = 0;
  for (const Tensor& e : embeddings) {
    const int64_t w = b == 0 ? 0 : e.numel() / b;
    for (int64_t s = 0; s < b; ++s) std::copy_n(e.data<float>() + s * w, w, out.data<float>() + s * width + at);
    at += w;
  }
  return out;
}

StatusOr<std::vector<Tensor>> SplitFlattened(const Tensor& flat, const std::vector<Tensor>& like) {
  SR_RETURN_IF_ERROR(CheckInput(flat, "flattened gradient", 2, 0));
  const int64_t b = flat.size(0), width = flat.size(1);
  std::vector<Tensor> out;
  int64_t at = 0;
  for (const Tensor& l : like) {
    const int64_t w = b == 0 ? 0 : l.numel() / b;
    if (l.ndim() == 0 || l.size(0) != b || at + w > width) return InvalidArgumentError("flattened gradient does not match its pieces");
    Tensor piece = Tensor::Empty(dtype::kFloat32, l.shape());
    for (int64_t s = 0; s < b; ++s) std::copy_n(flat.data<float>() + s * width + at, w, piece.data<float>() + s * w);
    out.push_back(std::move(piece));
    at += w;
  }
  if (at != width) return InvalidArgumentError("flattened gradient is wider than its pieces");
  return out;
}

StatusOr<Tensor> FactorizationMachine::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "FactorizationMachine", 2, 0));
  const int64_t b = x.size(0), m = x.size(1);
  x_ = x;
  sums_.assign(static_cast<size_t>(b), 0.0);
  Tensor y = Tensor::Empty(dtype::kFloat32, {b, 1});
  for (int64_t s = 0; s < b; ++s) {
    double sum = 0.0, squares = 0.0;
    for (int64_t j = 0; j < m; ++j) {
      const double v = x.data<float>()[s * m + j];
      sum += v;
      squares += v * v;
    }
    sums_[static_cast<size_t>(s)] = sum;
    y.data<float>()[s] = static_cast<float>(0.5 * (sum * sum - squares));
  }
  return y;
}

StatusOr<Tensor> FactorizationMachine::Backward(const Tensor& dy) {
  const int64_t b = x_.size(0), m = x_.size(1);
  if (!SameDType(dy.dtype(), dtype::kFloat32) || dy.shape() != std::vector<int64_t>{b, 1}) {
    return InvalidArgumentError(fmt::format("FactorizationMachine backward: dy is {}, expected [{}, 1]", ShapeString(dy.shape()), b));
  }
  // d out / d f_j = sum - f_j.
  Tensor dx = Tensor::Empty(dtype::kFloat32, {b, m});
  for (int64_t s = 0; s < b; ++s) {
    const double sum = sums_[static_cast<size_t>(s)];
    for (int64_t j = 0; j < m; ++j) {
      dx.data<float>()[s * m + j] = static_cast<float>(dy.data<float>()[s] * (sum - x_.data<float>()[s * m + j]));
    }
  }
  return dx;
}

}  // namespace shardrec::dense
