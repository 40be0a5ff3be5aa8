#include "shardrec/core/dense/activations.h"

#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "shardrec/core/dense/init.h"

namespace shardrec::dense {

namespace {

Status SameShape(const Tensor& dy, const Tensor& kept, const std::string& who) {
  SR_RETURN_IF_ERROR(CheckInput(dy, who + " backward", 0, 0));
  if (dy.shape() != kept.shape()) {
    return InvalidArgumentError(fmt::format("{} backward: dy is {}, the last forward's output {}", who,
                                            ShapeString(dy.shape()), ShapeString(kept.shape())));
  }
  return Status::Ok();
}

float SigmoidOf(float v) { return 1.0f / (1.0f + std::exp(-v)); }

}  // namespace

StatusOr<Tensor> Relu::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "relu", 0, 0));
  y_ = Tensor::Empty(dtype::kFloat32, x.shape());
  const float* in = x.data<float>();
  float* out = y_.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
  return y_;
}

StatusOr<Tensor> Relu::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(SameShape(dy, y_, "relu"));
  Tensor dx = Tensor::Empty(dtype::kFloat32, dy.shape());
  const float* g = dy.data<float>();
  const float* y = y_.data<float>();
  float* out = dx.data<float>();
  // torch's relu passes the gradient where the output is positive.
  for (int64_t i = 0; i < dy.numel(); ++i) out[i] = y[i] > 0.0f ? g[i] : 0.0f;
  return dx;
}

StatusOr<Tensor> Sigmoid::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "sigmoid", 0, 0));
  y_ = Tensor::Empty(dtype::kFloat32, x.shape());
  const float* in = x.data<float>();
  float* out = y_.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) out[i] = SigmoidOf(in[i]);
  return y_;
}

StatusOr<Tensor> Sigmoid::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(SameShape(dy, y_, "sigmoid"));
  Tensor dx = Tensor::Empty(dtype::kFloat32, dy.shape());
  const float* g = dy.data<float>();
  const float* y = y_.data<float>();
  float* out = dx.data<float>();
  for (int64_t i = 0; i < dy.numel(); ++i) out[i] = g[i] * y[i] * (1.0f - y[i]);
  return dx;
}

LayerNorm::LayerNorm(const std::string& prefix, std::vector<int64_t> normalized_shape, float eps)
    : shape_(std::move(normalized_shape)),
      size_(std::accumulate(shape_.begin(), shape_.end(), int64_t{1}, std::multiplies<>())),
      eps_(eps),
      weight_(MakeParameter(prefix + "weight", shape_)),
      bias_(MakeParameter(prefix + "bias", shape_)) {
  DenseInit::Fill(&weight_.value, 1.0f);
}

StatusOr<Tensor> LayerNorm::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "LayerNorm", 0, 0));
  const auto n = static_cast<int64_t>(shape_.size());
  if (x.ndim() < n || !std::equal(shape_.begin(), shape_.end(), x.shape().end() - n)) {
    return InvalidArgumentError(fmt::format("LayerNorm over {}: its input {} does not end with those dims",
                                            ShapeString(shape_), ShapeString(x.shape())));
  }
  const int64_t rows = x.numel() / size_;
  xhat_ = Tensor::Empty(dtype::kFloat32, x.shape());
  rstd_.assign(static_cast<size_t>(rows), 0.0f);
  Tensor y = Tensor::Empty(dtype::kFloat32, x.shape());
  const float* w = weight_.value.data<float>();
  const float* b = bias_.value.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = x.data<float>() + r * size_;
    float* h = xhat_.data<float>() + r * size_;
    float* out = y.data<float>() + r * size_;
    // Mean and biased variance in double: rows of thousands stay exact to fp32.
    double mean = 0.0, var = 0.0;
    for (int64_t i = 0; i < size_; ++i) mean += in[i];
    mean /= static_cast<double>(size_);
    for (int64_t i = 0; i < size_; ++i) var += (in[i] - mean) * (in[i] - mean);
    var /= static_cast<double>(size_);
    const float rstd = static_cast<float>(1.0 / std::sqrt(var + eps_));
    rstd_[static_cast<size_t>(r)] = rstd;
    for (int64_t i = 0; i < size_; ++i) {
      h[i] = static_cast<float>(in[i] - mean) * rstd;
      out[i] = h[i] * w[i] + b[i];
    }
  }
  return y;
}

StatusOr<Tensor> LayerNorm::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(SameShape(dy, xhat_, "LayerNorm"));
  const int64_t rows = dy.numel() / size_;
  Tensor dx = Tensor::Empty(dtype::kFloat32, dy.shape());
  const float* w = weight_.value.data<float>();
  float* dw = weight_.grad.data<float>();
  float* db = bias_.grad.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = dy.data<float>() + r * size_;
    const float* h = xhat_.data<float>() + r * size_;
    float* out = dx.data<float>() + r * size_;
    // dxhat = dy * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
    double sum = 0.0, dot = 0.0;
    for (int64_t i = 0; i < size_; ++i) {
      const float d = g[i] * w[i];
      sum += d;
      dot += static_cast<double>(d) * h[i];
      dw[i] += g[i] * h[i];
      db[i] += g[i];
    }
    const auto mean_d = static_cast<float>(sum / static_cast<double>(size_));
    const auto mean_dh = static_cast<float>(dot / static_cast<double>(size_));
    const float rstd = rstd_[static_cast<size_t>(r)];
    for (int64_t i = 0; i < size_; ++i) out[i] = rstd * (g[i] * w[i] - mean_d - h[i] * mean_dh);
  }
  return dx;
}

SwishLayerNorm::SwishLayerNorm(const std::string& prefix, std::vector<int64_t> input_dims)
    : norm_(prefix + "norm.0.", std::move(input_dims)) {}

StatusOr<Tensor> SwishLayerNorm::Forward(const Tensor& x) {
  SR_ASSIGN_OR_RETURN(Tensor n, norm_.Forward(x));
  x_ = x;
  s_ = Tensor::Empty(dtype::kFloat32, x.shape());
  Tensor y = Tensor::Empty(dtype::kFloat32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float s = SigmoidOf(n.data<float>()[i]);
    s_.data<float>()[i] = s;
    y.data<float>()[i] = x.data<float>()[i] * s;
  }
  return y;
}

StatusOr<Tensor> SwishLayerNorm::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(SameShape(dy, s_, "SwishLayerNorm"));
  // y = x * s(n(x)): dy/dx = s directly, plus through n: dn = dy * x * s * (1 - s).
  Tensor dn = Tensor::Empty(dtype::kFloat32, dy.shape());
  for (int64_t i = 0; i < dy.numel(); ++i) {
    const float s = s_.data<float>()[i];
    dn.data<float>()[i] = dy.data<float>()[i] * x_.data<float>()[i] * s * (1.0f - s);
  }
  SR_ASSIGN_OR_RETURN(Tensor dx, norm_.Backward(dn));
  for (int64_t i = 0; i < dy.numel(); ++i) dx.data<float>()[i] += dy.data<float>()[i] * s_.data<float>()[i];
  return dx;
}

StatusOr<std::unique_ptr<DenseLayer>> MakeActivation(const std::string& name, const std::string& prefix, int64_t width) {
  if (name == "relu") return std::unique_ptr<DenseLayer>(new Relu());
  if (name == "sigmoid") return std::unique_ptr<DenseLayer>(new Sigmoid());
  if (name == "swish_layernorm") return std::unique_ptr<DenseLayer>(new SwishLayerNorm(prefix, {width}));
  return InvalidArgumentError("unknown activation '" + name + "': expected relu, sigmoid or swish_layernorm");
}

}  // namespace shardrec::dense
