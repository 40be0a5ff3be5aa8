#include "shardrec/core/dense/crossnet.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "shardrec/core/dense/gemm.h"

namespace shardrec::dense {

namespace {

Tensor Matrix(int64_t rows, int64_t cols) { return Tensor::Empty(dtype::kFloat32, {rows, cols}); }

// out = a * b^T (+ bias per column), a [m, k], b [n, k].
Tensor TimesTransposed(const Tensor& a, const Tensor& b) {
  Tensor out = Matrix(a.size(0), b.size(0));
  Sgemm(false, true, a.size(0), b.size(0), a.size(1), 1.0f, a.data<float>(), a.size(1), b.data<float>(), b.size(1), 0.0f,
        out.data<float>(), b.size(0));
  return out;
}

// grad [n, k] += d^T x, d [m, n], x [m, k].
void AddTransposedTimes(const Tensor& d, const Tensor& x, Tensor* grad) {
  Sgemm(true, false, d.size(1), x.size(1), d.size(0), 1.0f, d.data<float>(), d.size(1), x.data<float>(), x.size(1), 1.0f,
        grad->data<float>(), x.size(1));
}

// out [m, k] (+)= d w, d [m, n], w [n, k].
void Times(const Tensor& d, const float* w, int64_t k, float beta, Tensor* out) {
  Sgemm(false, false, d.size(0), k, d.size(1), 1.0f, d.data<float>(), d.size(1), w, k, beta, out->data<float>(), k);
}

void AddColumnSums(const Tensor& d, float* grad) {
  const int64_t rows = d.size(0), cols = d.size(1);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) grad[c] += d.data<float>()[r * cols + c];
  }
}

// x_{l+1} = x_0 (.) (u + bias) + x_l, with u (W x_l) updated to u + bias
// in place (backward needs it). bias per column.
Tensor CrossStep(const Tensor& x0, const Tensor& xl, const float* bias, Tensor* u) {
  const int64_t b = x0.size(0), n = x0.size(1);
  Tensor next = Matrix(b, n);
  for (int64_t i = 0; i < b * n; ++i) {
    u->data<float>()[i] += bias[i % n];
    next.data<float>()[i] = x0.data<float>()[i] * u->data<float>()[i] + xl.data<float>()[i];
  }
  return next;
}

// Its backward, but for the path through u: dL/du = g (.) x_0 (returned)
// and dL/dx_0 += g (.) u.
Tensor CrossStepBackward(const Tensor& g, const Tensor& x0, const Tensor& u, Tensor* dx0) {
  const int64_t b = x0.size(0), n = x0.size(1);
  Tensor du = Matrix(b, n);
  for (int64_t i = 0; i < b * n; ++i) {
    du.data<float>()[i] = g.data<float>()[i] * x0.data<float>()[i];
    dx0->data<float>()[i] += g.data<float>()[i] * u.data<float>()[i];
  }
  return du;
}

Status CheckLayers(const std::string& who, int64_t n, int layers) {
  if (n <= 0 || layers <= 0) {
    return InvalidArgumentError(fmt::format("{}: in_features and num_layers must be positive, got {} and {}", who, n, layers));
  }
  return Status::Ok();
}

std::vector<Parameter*> Pointers(std::initializer_list<std::vector<Parameter>*> lists) {
  std::vector<Parameter*> out;
  for (auto* list : lists) {
    for (Parameter& p : *list) out.push_back(&p);
  }
  return out;
}

Status CheckBackward(const Tensor& dy, const Tensor& x0, const std::string& who) {
  if (!SameDType(dy.dtype(), dtype::kFloat32) || dy.shape() != x0.shape()) {
    return InvalidArgumentError(fmt::format("{} backward: dy is {}, the last forward's output {}", who,
                                            ShapeString(dy.shape()), ShapeString(x0.shape())));
  }
  return Status::Ok();
}

}  // namespace

// ---- CrossNet ----

CrossNet::CrossNet(const std::string& prefix, int64_t n, int layers, const DenseInit& init) : n_(n) {
  for (int l = 0; l < layers; ++l) {
    kernels_.push_back(MakeParameter(fmt::format("{}kernels.{}", prefix, l), {n, n}));
    init.XavierNormal(kernels_.back().name, &kernels_.back().value, n, n);
  }
  for (int l = 0; l < layers; ++l) bias_.push_back(MakeParameter(fmt::format("{}bias.{}", prefix, l), {n, 1}));
}

std::vector<Parameter*> CrossNet::Parameters() { return Pointers({&kernels_, &bias_}); }

StatusOr<Tensor> CrossNet::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "CrossNet", 2, n_));
  x0_ = x;
  xs_.clear();
  us_.clear();
  Tensor xl = x;
  for (size_t l = 0; l < kernels_.size(); ++l) {
    Tensor u = TimesTransposed(xl, kernels_[l].value);
    Tensor next = CrossStep(x, xl, bias_[l].value.data<float>(), &u);
    xs_.push_back(xl);
    us_.push_back(u);
    xl = next;
  }
  return xl;
}

StatusOr<Tensor> CrossNet::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(CheckBackward(dy, x0_, "CrossNet"));
  const int64_t b = x0_.size(0);
  Tensor g = dy.Clone();                // dL/dx_{l+1}, then dL/dx_l
  Tensor dx0 = Tensor::Zeros(dtype::kFloat32, {b, n_});  // through x_0's direct uses
  for (size_t l = kernels_.size(); l-- > 0;) {
    const Tensor du = CrossStepBackward(g, x0_, us_[l], &dx0);
    AddTransposedTimes(du, xs_[l], &kernels_[l].grad);
    AddColumnSums(du, bias_[l].grad.data<float>());
    Times(du, kernels_[l].value.data<float>(), n_, 1.0f, &g);  // g = g + du W
  }
  for (int64_t i = 0; i < b * n_; ++i) g.data<float>()[i] += dx0.data<float>()[i];
  return g;
}

// ---- LowRankCrossNet ----

StatusOr<std::unique_ptr<LowRankCrossNet>> LowRankCrossNet::Create(const std::string& prefix, int64_t n, int layers,
                                                                   int64_t r, const DenseInit& init) {
  SR_RETURN_IF_ERROR(CheckLayers("LowRankCrossNet", n, layers));
  if (r < 1) return InvalidArgumentError(fmt::format("LowRankCrossNet: low_rank must be >= 1, got {}", r));
  return std::unique_ptr<LowRankCrossNet>(new LowRankCrossNet(prefix, n, layers, r, init));
}

LowRankCrossNet::LowRankCrossNet(const std::string& prefix, int64_t n, int layers, int64_t r, const DenseInit& init)
    : n_(n), r_(r) {
  for (int l = 0; l < layers; ++l) {
    w_.push_back(MakeParameter(fmt::format("{}W_kernels.{}", prefix, l), {n, r}));
    init.XavierNormal(w_.back().name, &w_.back().value, r, n);
  }
  for (int l = 0; l < layers; ++l) {
    v_.push_back(MakeParameter(fmt::format("{}V_kernels.{}", prefix, l), {r, n}));
    init.XavierNormal(v_.back().name, &v_.back().value, n, r);
  }
  for (int l = 0; l < layers; ++l) bias_.push_back(MakeParameter(fmt::format("{}bias.{}", prefix, l), {n}));
}

std::vector<Parameter*> LowRankCrossNet::Parameters() { return Pointers({&w_, &v_, &bias_}); }

StatusOr<Tensor> LowRankCrossNet::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "LowRankCrossNet", 2, n_));
  x0_ = x;
  xs_.clear();
  xv_.clear();
  us_.clear();
  Tensor xl = x;
  for (size_t l = 0; l < w_.size(); ++l) {
    Tensor xv = TimesTransposed(xl, v_[l].value);  // [B, r]
    Tensor u = TimesTransposed(xv, w_[l].value);   // [B, N]
    Tensor next = CrossStep(x, xl, bias_[l].value.data<float>(), &u);
    xs_.push_back(xl);
    xv_.push_back(xv);
    us_.push_back(u);
    xl = next;
  }
  return xl;
}

StatusOr<Tensor> LowRankCrossNet::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(CheckBackward(dy, x0_, "LowRankCrossNet"));
  const int64_t b = x0_.size(0);
  Tensor g = dy.Clone();
  Tensor dx0 = Tensor::Zeros(dtype::kFloat32, {b, n_});
  for (size_t l = w_.size(); l-- > 0;) {
    const Tensor du = CrossStepBackward(g, x0_, us_[l], &dx0);
    AddTransposedTimes(du, xv_[l], &w_[l].grad);  // dW [N, r] += du^T (V x)
    AddColumnSums(du, bias_[l].grad.data<float>());
    Tensor dxv = Matrix(b, r_);
    Times(du, w_[l].value.data<float>(), r_, 0.0f, &dxv);  // [B, r]
    AddTransposedTimes(dxv, xs_[l], &v_[l].grad);          // dV [r, N] += dxv^T x_l
    Times(dxv, v_[l].value.data<float>(), n_, 1.0f, &g);   // g += dxv V
  }
  for (int64_t i = 0; i < b * n_; ++i) g.data<float>()[i] += dx0.data<float>()[i];
  return g;
}

// ---- VectorCrossNet ----

VectorCrossNet::VectorCrossNet(const std::string& prefix, int64_t n, int layers, const DenseInit& init) : n_(n) {
  for (int l = 0; l < layers; ++l) {
    kernels_.push_back(MakeParameter(fmt::format("{}kernels.{}", prefix, l), {n, 1}));
    init.XavierNormal(kernels_.back().name, &kernels_.back().value, 1, n);
  }
  for (int l = 0; l < layers; ++l) bias_.push_back(MakeParameter(fmt::format("{}bias.{}", prefix, l), {n, 1}));
}

std::vector<Parameter*> VectorCrossNet::Parameters() { return Pointers({&kernels_, &bias_}); }

StatusOr<Tensor> VectorCrossNet::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "VectorCrossNet", 2, n_));
  x0_ = x;
  xs_.clear();
  dots_.clear();
  Tensor xl = x;
  const int64_t b = x.size(0);
  for (size_t l = 0; l < kernels_.size(); ++l) {
    const float* w = kernels_[l].value.data<float>();
    const float* bias = bias_[l].value.data<float>();
    std::vector<float> dot(static_cast<size_t>(b));
    Tensor next = Matrix(b, n_);
    for (int64_t s = 0; s < b; ++s) {
      float d = 0.0f;
      for (int64_t j = 0; j < n_; ++j) d += w[j] * xl.data<float>()[s * n_ + j];
      dot[static_cast<size_t>(s)] = d;
      for (int64_t j = 0; j < n_; ++j) {
        const int64_t i = s * n_ + j;
        next.data<float>()[i] = x.data<float>()[i] * d + bias[j] + xl.data<float>()[i];
      }
    }
    xs_.push_back(xl);
    dots_.push_back(std::move(dot));
    xl = next;
  }
  return xl;
}

StatusOr<Tensor> VectorCrossNet::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(CheckBackward(dy, x0_, "VectorCrossNet"));
  const int64_t b = x0_.size(0);
  Tensor g = dy.Clone();
  Tensor dx0 = Tensor::Zeros(dtype::kFloat32, {b, n_});
  for (size_t l = kernels_.size(); l-- > 0;) {
    const float* w = kernels_[l].value.data<float>();
    float* dw = kernels_[l].grad.data<float>();
    float* db = bias_[l].grad.data<float>();
    for (int64_t s = 0; s < b; ++s) {
      float* gs = g.data<float>() + s * n_;
      const float* x0 = x0_.data<float>() + s * n_;
      const float* xl = xs_[l].data<float>() + s * n_;
      float ddot = 0.0f;
      for (int64_t j = 0; j < n_; ++j) {
        ddot += gs[j] * x0[j];
        dx0.data<float>()[s * n_ + j] += gs[j] * dots_[l][static_cast<size_t>(s)];
        db[j] += gs[j];
      }
      for (int64_t j = 0; j < n_; ++j) {
        dw[j] += ddot * xl[j];
        gs[j] += ddot * w[j];
      }
    }
  }
  for (int64_t i = 0; i < b * n_; ++i) g.data<float>()[i] += dx0.data<float>()[i];
  return g;
}

// ---- LowRankMixtureCrossNet ----

StatusOr<std::unique_ptr<LowRankMixtureCrossNet>> LowRankMixtureCrossNet::Create(const std::string& prefix, int64_t n,
                                                                                 int layers, int k, int64_t r,
                                                                                 const std::string& activation,
                                                                                 const DenseInit& init) {
  SR_RETURN_IF_ERROR(CheckLayers("LowRankMixtureCrossNet", n, layers));
  if (k < 1 || r < 1) {
    return InvalidArgumentError(fmt::format("LowRankMixtureCrossNet: num_experts and low_rank must be >= 1, got {} and {}", k, r));
  }
  if (activation != "relu" && activation != "sigmoid") {
    return InvalidArgumentError("LowRankMixtureCrossNet: unknown activation '" + activation + "': expected relu or sigmoid");
  }
  return std::unique_ptr<LowRankMixtureCrossNet>(
      new LowRankMixtureCrossNet(prefix, n, layers, k, r, activation == "sigmoid", init));
}

LowRankMixtureCrossNet::LowRankMixtureCrossNet(const std::string& prefix, int64_t n, int layers, int k, int64_t r,
                                               bool sigmoid, const DenseInit& init)
    : n_(n), r_(r), k_(k), sigmoid_(sigmoid) {
  for (int l = 0; l < layers; ++l) {
    u_.push_back(MakeParameter(fmt::format("{}U_kernels.{}", prefix, l), {k, n, r}));
    init.XavierNormal(u_.back().name, &u_.back().value, n * r, k * r);
  }
  for (int l = 0; l < layers; ++l) {
    v_.push_back(MakeParameter(fmt::format("{}V_kernels.{}", prefix, l), {k, r, n}));
    init.XavierNormal(v_.back().name, &v_.back().value, r * n, k * n);
  }
  for (int l = 0; l < layers; ++l) bias_.push_back(MakeParameter(fmt::format("{}bias.{}", prefix, l), {n, 1}));
  if (k > 1) {
    for (int e = 0; e < k; ++e) {
      gates_.push_back(MakeParameter(fmt::format("{}gates.{}.weight", prefix, e), {1, n}));
      init.LinearDefault(gates_.back().name, &gates_.back().value, n);
    }
  }
  for (int l = 0; l < layers; ++l) {
    c_.push_back(MakeParameter(fmt::format("{}C_kernels.{}", prefix, l), {k, r, r}));
    init.XavierNormal(c_.back().name, &c_.back().value, r * r, k * r);
  }
}

std::vector<Parameter*> LowRankMixtureCrossNet::Parameters() { return Pointers({&u_, &v_, &bias_, &gates_, &c_}); }

namespace {

// An expert's matrix: [k][rows][cols] of a [K, rows, cols] parameter, as a
// [rows, cols] tensor sharing nothing (a copy is cheap beside the products).
Tensor Slice(const Tensor& t, int k) {
  const int64_t rows = t.size(1), cols = t.size(2);
  Tensor out = Matrix(rows, cols);
  std::copy_n(t.data<float>() + k * rows * cols, rows * cols, out.data<float>());
  return out;
}

}  // namespace

StatusOr<Tensor> LowRankMixtureCrossNet::Forward(const Tensor& x) {
  SR_RETURN_IF_ERROR(CheckInput(x, "LowRankMixtureCrossNet", 2, n_));
  auto act = [this](float v) { return sigmoid_ ? 1.0f / (1.0f + std::exp(-v)) : std::max(v, 0.0f); };
  x0_ = x;
  xs_.clear();
  experts_.clear();
  p_.clear();
  const int64_t b = x.size(0);
  Tensor xl = x;
  for (size_t l = 0; l < u_.size(); ++l) {
    std::vector<Expert> experts(static_cast<size_t>(k_));
    const float* bias = bias_[l].value.data<float>();
    for (int k = 0; k < k_; ++k) {
      Expert& e = experts[static_cast<size_t>(k)];
      e.a = TimesTransposed(xl, Slice(v_[l].value, k));  // [B, r]
      Tensor a1 = e.a.Clone();
      for (float& v : a1.span<float>()) v = act(v);
      e.c = TimesTransposed(a1, Slice(c_[l].value, k));  // [B, r]
      Tensor c1 = e.c.Clone();
      for (float& v : c1.span<float>()) v = act(v);
      e.u = TimesTransposed(c1, Slice(u_[l].value, k));  // [B, N]
      e.e = Matrix(b, n_);
      for (int64_t i = 0; i < b * n_; ++i) {
        e.u.data<float>()[i] += bias[i % n_];
        e.e.data<float>()[i] = x.data<float>()[i] * e.u.data<float>()[i];
      }
    }
    Tensor next = xl.Clone();
    std::vector<float> p(static_cast<size_t>(b * k_), 1.0f);
    if (k_ > 1) {
      for (int64_t s = 0; s < b; ++s) {
        float* ps = p.data() + s * k_;
        float top = -INFINITY;
        for (int k = 0; k < k_; ++k) {
          float z = 0.0f;
          for (int64_t j = 0; j < n_; ++j) z += gates_[static_cast<size_t>(k)].value.data<float>()[j] * xl.data<float>()[s * n_ + j];
          ps[k] = z;
          top = std::max(top, z);
        }
        float sum = 0.0f;
        for (int k = 0; k < k_; ++k) sum += (ps[k] = std::exp(ps[k] - top));
        for (int k = 0; k < k_; ++k) ps[k] /= sum;
      }
    }
    for (int k = 0; k < k_; ++k) {
      const float* e = experts[static_cast<size_t>(k)].e.data<float>();
      for (int64_t i = 0; i < b * n_; ++i) next.data<float>()[i] += p[static_cast<size_t>((i / n_) * k_ + k)] * e[i];
    }
    xs_.push_back(xl);
    experts_.push_back(std::move(experts));
    p_.push_back(std::move(p));
    xl = next;
  }
  return xl;
}

StatusOr<Tensor> LowRankMixtureCrossNet::Backward(const Tensor& dy) {
  SR_RETURN_IF_ERROR(CheckBackward(dy, x0_, "LowRankMixtureCrossNet"));
  auto act = [this](float v) { return sigmoid_ ? 1.0f / (1.0f + std::exp(-v)) : std::max(v, 0.0f); };
  // g'(v) from the pre-activation v.
  auto dact = [this, &act](float v) {
    if (!sigmoid_) return v > 0.0f ? 1.0f : 0.0f;
    const float s = act(v);
    return s * (1.0f - s);
  };
  const int64_t b = x0_.size(0);
  Tensor g = dy.Clone();
  Tensor dx0 = Tensor::Zeros(dtype::kFloat32, {b, n_});
  for (size_t l = u_.size(); l-- > 0;) {
    const auto& experts = experts_[l];
    const auto& p = p_[l];
    Tensor dxl = g.Clone();  // the residual
    if (k_ > 1) {
      // dp_k = G . E_k per sample; softmax back: dz_k = p_k (dp_k - sum_j p_j dp_j).
      for (int64_t s = 0; s < b; ++s) {
        std::vector<float> dp(static_cast<size_t>(k_));
        float mix = 0.0f;
        for (int k = 0; k < k_; ++k) {
          float d = 0.0f;
          for (int64_t j = 0; j < n_; ++j) d += g.data<float>()[s * n_ + j] * experts[static_cast<size_t>(k)].e.data<float>()[s * n_ + j];
          dp[static_cast<size_t>(k)] = d;
          mix += p[static_cast<size_t>(s * k_ + k)] * d;
        }
        for (int k = 0; k < k_; ++k) {
          const float dz = p[static_cast<size_t>(s * k_ + k)] * (dp[static_cast<size_t>(k)] - mix);
          float* dgate = gates_[static_cast<size_t>(k)].grad.data<float>();
          const float* gate = gates_[static_cast<size_t>(k)].value.data<float>();
          for (int64_t j = 0; j < n_; ++j) {
            dgate[j] += dz * xs_[l].data<float>()[s * n_ + j];
            dxl.data<float>()[s * n_ + j] += dz * gate[j];
          }
        }
      }
    }
    for (int k = 0; k < k_; ++k) {
      const Expert& e = experts[static_cast<size_t>(k)];
      // dE_k = p_k G; dx_0 += dE_k (.) u; du = dE_k (.) x_0.
      Tensor du = Matrix(b, n_);
      for (int64_t i = 0; i < b * n_; ++i) {
        const float de = p[static_cast<size_t>((i / n_) * k_ + k)] * g.data<float>()[i];
        dx0.data<float>()[i] += de * e.u.data<float>()[i];
        du.data<float>()[i] = de * x0_.data<float>()[i];
      }
      AddColumnSums(du, bias_[l].grad.data<float>());
      Tensor c1 = e.c.Clone();
      for (float& v : c1.span<float>()) v = act(v);
      Tensor du_grad = Matrix(n_, r_);
      std::fill(du_grad.span<float>().begin(), du_grad.span<float>().end(), 0.0f);
      AddTransposedTimes(du, c1, &du_grad);  // dU_k [N, r]
      float* dU = u_[l].grad.data<float>() + k * n_ * r_;
      for (int64_t i = 0; i < n_ * r_; ++i) dU[i] += du_grad.data<float>()[i];
      Tensor dc = Matrix(b, r_);
      Times(du, u_[l].value.data<float>() + k * n_ * r_, r_, 0.0f, &dc);  // dc1 = du U_k
      for (int64_t i = 0; i < b * r_; ++i) dc.data<float>()[i] *= dact(e.c.data<float>()[i]);
      Tensor a1 = e.a.Clone();
      for (float& v : a1.span<float>()) v = act(v);
      Tensor dc_grad = Tensor::Zeros(dtype::kFloat32, {r_, r_});
      AddTransposedTimes(dc, a1, &dc_grad);  // dC_k [r, r]
      float* dC = c_[l].grad.data<float>() + k * r_ * r_;
      for (int64_t i = 0; i < r_ * r_; ++i) dC[i] += dc_grad.data<float>()[i];
      Tensor da = Matrix(b, r_);
      Times(dc, c_[l].value.data<float>() + k * r_ * r_, r_, 0.0f, &da);  // da1 = dc C_k
      for (int64_t i = 0; i < b * r_; ++i) da.data<float>()[i] *= dact(e.a.data<float>()[i]);
      Tensor dv_grad = Tensor::Zeros(dtype::kFloat32, {r_, n_});
      AddTransposedTimes(da, xs_[l], &dv_grad);  // dV_k [r, N]
      float* dV = v_[l].grad.data<float>() + k * r_ * n_;
      for (int64_t i = 0; i < r_ * n_; ++i) dV[i] += dv_grad.data<float>()[i];
      Times(da, v_[l].value.data<float>() + k * r_ * n_, n_, 1.0f, &dxl);  // dx_l += da V_k
    }
    g = dxl;
  }
  for (int64_t i = 0; i < b * n_; ++i) g.data<float>()[i] += dx0.data<float>()[i];
  return g;
}

}  // namespace shardrec::dense
