#include "shardrec/core/models/rec_model.h"

#include <cmath>

#include <fmt/format.h>

namespace shardrec {

namespace models {
StatusOr<std::unique_ptr<RecModel>> CreateDlrm(const ModelConfig& c, int64_t features, int64_t dim,
                                               const dense::DenseInit& init);
StatusOr<std::unique_ptr<RecModel>> CreateDeepFm(const ModelConfig& c, int64_t features, int64_t dim,
                                                 const dense::DenseInit& init);
}  // namespace models

StatusOr<std::unique_ptr<RecModel>> CreateRecModel(const ModelConfig& config, int64_t features, int64_t dim,
                                                   const dense::DenseInit& init) {
  SR_RETURN_IF_ERROR(config.Check(features, dim));
  if (config.model == "deepfm") return models::CreateDeepFm(config, features, dim, init);
  return models::CreateDlrm(config, features, dim, init);
}

StatusOr<double> BceWithLogits(const Tensor& logits, const Tensor& labels, Tensor* dlogits) {
  if (logits.ndim() != 1 || labels.shape() != logits.shape() || !SameDType(labels.dtype(), dtype::kFloat32)) {
    return InvalidArgumentError(fmt::format("loss: logits {} and fp32 labels of the same shape expected, got {}",
                                            ShapeString(logits.shape()), ShapeString(labels.shape())));
  }
  const int64_t n = logits.size(0);
  *dlogits = Tensor::Empty(dtype::kFloat32, {n});
  double loss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = logits.data<float>()[i], y = labels.data<float>()[i];
    // max(x, 0) - x y + log(1 + exp(-|x|)): no overflow for large |x|.
    loss += std::max(x, 0.0) - x * y + std::log1p(std::exp(-std::abs(x)));
    dlogits->data<float>()[i] = static_cast<float>((1.0 / (1.0 + std::exp(-x)) - y) / static_cast<double>(n));
  }
  return n == 0 ? 0.0 : loss / static_cast<double>(n);
}

}  // namespace shardrec
