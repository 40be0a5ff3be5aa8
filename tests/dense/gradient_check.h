// Finite-difference gradient check for a dense layer: the loss is
// sum(y * r) for a fixed random r, so dL/dy = r; every input value and
// every parameter value is nudged by +-eps and the loss's change compared
// with what Backward gave.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "shardrec/core/dense/dense_layer.h"

namespace shardrec::dense::testing {

inline Tensor RandomTensor(std::vector<int64_t> shape, uint64_t seed, float scale = 1.0f) {
  Tensor t = Tensor::Empty(dtype::kFloat32, std::move(shape));
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, scale);
  for (float& v : t.span<float>()) v = n(rng);
  return t;
}

inline double Loss(DenseLayer& layer, const Tensor& x, const Tensor& r) {
  auto y = layer.Forward(x);
  EXPECT_TRUE(y.ok()) << y.status().ToString();
  double loss = 0.0;
  for (int64_t i = 0; i < r.numel(); ++i) loss += static_cast<double>(y->data<float>()[i]) * r.data<float>()[i];
  return loss;
}

// Central differences in fp32 (eps 1e-2 on values of order 1): agreement
// within `tol` of max(1, |gradient|) catches a wrong formula, not rounding.
inline void CheckGradients(DenseLayer& layer, const Tensor& x_in, double tol = 2e-2, float eps = 1e-2f) {
  Tensor x = x_in.Clone();
  auto y = layer.Forward(x);
  ASSERT_TRUE(y.ok()) << y.status().ToString();
  const Tensor r = RandomTensor(y->shape(), 99);
  layer.ZeroGrad();
  auto dx = layer.Backward(r);
  ASSERT_TRUE(dx.ok()) << dx.status().ToString();
  auto check = [&](float* value, float analytic, const std::string& what) {
    const float keep = *value;
    *value = keep + eps;
    const double up = Loss(layer, x, r);
    *value = keep - eps;
    const double down = Loss(layer, x, r);
    *value = keep;
    const double numeric = (up - down) / (2.0 * eps);
    EXPECT_NEAR(analytic, numeric, tol * std::max(1.0, std::abs(numeric))) << what;
  };
  for (int64_t i = 0; i < x.numel(); ++i) check(&x.data<float>()[i], dx->data<float>()[i], "dL/dx[" + std::to_string(i) + "]");
  for (Parameter* p : layer.Parameters()) {
    const Tensor grad = p->grad.Clone();
    for (int64_t i = 0; i < p->value.numel(); ++i) {
      check(&p->value.data<float>()[i], grad.data<float>()[i], "dL/d" + p->name + "[" + std::to_string(i) + "]");
    }
  }
}

}  // namespace shardrec::dense::testing
