// Seeded, rank-independent initialisation of dense parameters: a
// parameter's values depend only on the seed and its name, so every rank
// (and a resumed or re-ordered model) builds the same replica.
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/core/tensor/tensor.h"

namespace shardrec::dense {

class DenseInit {
 public:
  explicit DenseInit(uint64_t seed) : seed_(seed) {}
  // U(lo, hi) / N(0, std^2) / a constant, over every element.
  void Uniform(const std::string& name, Tensor* t, float lo, float hi) const;
  void Normal(const std::string& name, Tensor* t, float stddev) const;
  static void Fill(Tensor* t, float value);
  // torch.nn.Linear's default: U(+-1/sqrt(fan_in)) for weight and bias.
  void LinearDefault(const std::string& name, Tensor* t, int64_t fan_in) const;
  // torch.nn.init.xavier_normal_: std = sqrt(2 / (fan_in + fan_out)).
  void XavierNormal(const std::string& name, Tensor* t, int64_t fan_in, int64_t fan_out) const;

 private:
  uint64_t StreamSeed(const std::string& name) const;
  uint64_t seed_;
};

}  // namespace shardrec::dense
