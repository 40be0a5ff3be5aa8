#include "shardrec/core/dense/linear.h"

#include "shardrec/core/dense/gemm.h"

namespace shardrec::dense {

Linear::Linear(const std::string& prefix, int64_t in, int64_t out, bool bias, const DenseInit& init)
    : in_(in), out_(out), has_bias_(bias), weight_(MakeParameter(prefix + "weight", {out, in})) {
  init.LinearDefault(weight_.name, &weight_.value, in);
  if (has_bias_) {
    bias_ = MakeParameter(prefix + "bias", {out});
    init.LinearDefault(bias_.name, &bias_.value, in);
  }
}

std::vector<Parameter*> Linear::Parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

StatusOr<Tensor> Linear::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "Linear", 0, in_));
  const int64_t rows = x.numel() / in_;
  std::vector<int64_t> shape = x.shape();
  shape.back() = out_;
  Tensor y = Tensor::Empty(dtype::kFloat32, shape);
  float* out = y.data<float>();
  if (has_bias_) {
    const float* b = bias_.value.data<float>();
    for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out_, out + r * out_);
  }
  Sgemm(false, true, rows, out_, in_, 1.0f, x.data<float>(), in_, weight_.value.data<float>(), in_,
        has_bias_ ? 1.0f : 0.0f, out, out_);
  x_ = x;
  return y;
}

StatusOr<Tensor> Linear::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(CheckInput(dy, "Linear backward", x_.ndim(), out_));
  const int64_t rows = x_.numel() / in_;
  if (dy.numel() != rows * out_) return InvalidArgumentError("Linear backward: dy does not match the last forward's output");
  const float* g = dy.data<float>();
  // dW += dy^T x; db += the column sums of dy; dx = dy W.
  Sgemm(true, false, out_, in_, rows, 1.0f, g, out_, x_.data<float>(), in_, 1.0f, weight_.grad.data<float>(), in_);
  if (has_bias_) {
    float* db = bias_.grad.data<float>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < out_; ++j) db[j] += g[r * out_ + j];
    }
  }
  Tensor dx = Tensor::Empty(dtype::kFloat32, x_.shape());
  Sgemm(false, false, rows, in_, out_, 1.0f, g, out_, weight_.value.data<float>(), in_, 0.0f, dx.data<float>(), in_);
  return dx;
}

}  // namespace shardrec::dense
