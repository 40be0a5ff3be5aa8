// TorchRec's cross networks (torchrec.modules.crossnet) on [B, N] inputs,
// x_0 the input, x_l a layer's input, (.) element-wise:
//   CrossNet                x_{l+1} = x_0 (.) (W_l x_l + b_l) + x_l
//   LowRankCrossNet         x_{l+1} = x_0 (.) (W_l (V_l x_l) + b_l) + x_l
//   VectorCrossNet          x_{l+1} = x_0 * (w_l . x_l) + b_l + x_l
//       (the bias outside the product, as upstream computes it; the seed's
//        formula puts it inside: docs/dense.md)
//   LowRankMixtureCrossNet  E_k = x_0 (.) (U_lk g(C_lk g(V_lk x_l)) + b_l);
//       x_{l+1} = sum_k softmax_k(<gate_k, x_l>) E_k + x_l   (K > 1)
//       x_{l+1} = E_0 + x_l                                  (K = 1)
//       with K bias-free gates shared by all layers, g relu (or sigmoid).
// Parameter names, shapes, registration order and initialisation
// (xavier_normal_ kernels, zero biases) are upstream's.
#pragma once

#include <memory>

#include "shardrec/core/dense/dense_layer.h"
#include "shardrec/core/dense/init.h"

namespace shardrec::dense {

class CrossNet : public DenseLayer {
 public:
  // kernels.<l> [N, N], bias.<l> [N, 1].
  CrossNet(const std::string& prefix, int64_t in_features, int num_layers, const DenseInit& init);
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override;

 private:
  int64_t n_;
  std::vector<Parameter> kernels_, bias_;
  Tensor x0_;
  std::vector<Tensor> xs_, us_;  // per layer: its input, and W x + b
};

class LowRankCrossNet : public DenseLayer {
 public:
  // W_kernels.<l> [N, r], V_kernels.<l> [r, N], bias.<l> [N].
  static StatusOr<std::unique_ptr<LowRankCrossNet>> Create(const std::string& prefix, int64_t in_features, int num_layers,
                                                           int64_t low_rank, const DenseInit& init);
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override;

 private:
  LowRankCrossNet(const std::string& prefix, int64_t n, int num_layers, int64_t r, const DenseInit& init);
  int64_t n_, r_;
  std::vector<Parameter> w_, v_, bias_;
  Tensor x0_;
  std::vector<Tensor> xs_, xv_, us_;  // per layer: input, V x, W (V x) + b
};

class VectorCrossNet : public DenseLayer {
 public:
  // kernels.<l> [N, 1], bias.<l> [N, 1].
  VectorCrossNet(const std::string& prefix, int64_t in_features, int num_layers, const DenseInit& init);
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override;

 private:
  int64_t n_;
  std::vector<Parameter> kernels_, bias_;
  Tensor x0_;
  std::vector<Tensor> xs_;
  std::vector<std::vector<float>> dots_;  // per layer, per sample: w . x_l
};

class LowRankMixtureCrossNet : public DenseLayer {
 public:
  // U_kernels.<l> [K, N, r], V_kernels.<l> [K, r, N], bias.<l> [N, 1],
  // gates.<k>.weight [1, N] (K > 1 only), C_kernels.<l> [K, r, r];
  // activation "relu" (upstream's default) or "sigmoid".
  static StatusOr<std::unique_ptr<LowRankMixtureCrossNet>> Create(const std::string& prefix, int64_t in_features,
                                                                  int num_layers, int num_experts, int64_t low_rank,
                                                                  const std::string& activation, const DenseInit& init);
  StatusOr<Tensor> Forward(const Tensor& x) override;
  StatusOr<Tensor> Backward(const Tensor& dy) override;
  std::vector<Parameter*> Parameters() override;

 private:
  LowRankMixtureCrossNet(const std::string& prefix, int64_t n, int num_layers, int k, int64_t r, bool sigmoid,
                         const DenseInit& init);
  // What one expert of one layer kept for backward.
  struct Expert {
    Tensor a, c, u, e;  // V x (pre-activation), C g(a) (pre-activation), U g(c) + b, x_0 (.) u
  };
  int64_t n_, r_;
  int k_;
  bool sigmoid_;
  std::vector<Parameter> u_, v_, bias_, gates_, c_;
  Tensor x0_;
  std::vector<Tensor> xs_;
  std::vector<std::vector<Expert>> experts_;  // [layer][expert]
  std::vector<std::vector<float>> p_;         // [layer][sample * K + k]: the gates' softmax
};

}  // namespace shardrec::dense
