#include "shardrec/core/dense/init.h"

#include <cmath>
#include <random>

#include "shardrec/core/random/split_mix.h"

namespace shardrec::dense {

uint64_t DenseInit::StreamSeed(const std::string& name) const {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return SplitMix64(seed_ ^ SplitMix64(h));
}

void DenseInit::Uniform(const std::string& name, Tensor* t, float lo, float hi) const {
  std::mt19937_64 rng(StreamSeed(name));
  std::uniform_real_distribution<float> u(lo, hi);
  for (float& v : t->span<float>()) v = u(rng);
}

void DenseInit::Normal(const std::string& name, Tensor* t, float stddev) const {
  std::mt19937_64 rng(StreamSeed(name));
  std::normal_distribution<float> n(0.0f, stddev);
  for (float& v : t->span<float>()) v = n(rng);
}

void DenseInit::Fill(Tensor* t, float value) {
  for (float& v : t->span<float>()) v = value;
}

void DenseInit::LinearDefault(const std::string& name, Tensor* t, int64_t fan_in) const {
  if (fan_in <= 0) return Fill(t, 0.0f);
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  Uniform(name, t, -bound, bound);
}

void DenseInit::XavierNormal(const std::string& name, Tensor* t, int64_t fan_in, int64_t fan_out) const {
  Normal(name, t, std::sqrt(2.0f / static_cast<float>(fan_in + fan_out)));
}

}  // namespace shardrec::dense
