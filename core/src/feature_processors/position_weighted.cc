// PositionWeightedModule (position_weighted.h).
#include "shardrec/core/feature_processors/position_weighted.h"

#include <fmt/format.h>

namespace shardrec {

StatusOr<PositionWeightedModule> PositionWeightedModule::Create(
    const std::map<std::string, int64_t>& max_feature_lengths) {
  if (max_feature_lengths.empty()) return InvalidArgumentError("position weights: no feature named");
  PositionWeightedModule m;
  for (const auto& [name, length] : max_feature_lengths) {
    if (name.empty()) return InvalidArgumentError("position weights: an empty feature name");
    // The parameter is a dense tensor of this many floats on every rank.
    constexpr int64_t kMaxLength = int64_t{1} << 24;
    if (length < 1 || length > kMaxLength) {
      return InvalidArgumentError(fmt::format("position weights of feature '{}': max length {} is outside [1, {}]",
                                              name, length, kMaxLength));
    }
    dense::Parameter p = dense::MakeParameter("position_weights." + name, {length});
    for (float& v : p.value.span<float>()) v = 1.0f;  // TorchRec's reset_parameters
    m.params_.push_back(std::move(p));
  }
  m.max_lengths_ = max_feature_lengths;
  return m;
}

std::vector<dense::Parameter*> PositionWeightedModule::Parameters() {
  std::vector<dense::Parameter*> out;
  for (auto& p : params_) out.push_back(&p);
  return out;
}

StatusOr<KeyedJaggedTensor> PositionWeightedModule::Forward(const KeyedJaggedTensor& input) {
  forwarded_ = false;
  const size_t n = input.values().size();
  std::vector<float> weights = input.has_weights() ? input.weights()->ToVector() : std::vector<float>(n, 1.0f);
  param_of_.assign(n, -1);
  position_of_.assign(n, 0);
  sample_of_.assign(n, 0);
  const auto& offsets = input.offsets();
  const auto& strides = input.stride_per_key();
  batch_ = input.num_keys() > 0 ? strides[0] : 0;
  for (int k = 0; k < input.num_keys(); ++k) {
    auto it = max_lengths_.find(input.keys()[static_cast<size_t>(k)]);
    if (it == max_lengths_.end()) continue;
    const auto index = static_cast<int32_t>(std::distance(max_lengths_.begin(), it));
    const float* p = params_[static_cast<size_t>(index)].value.data<float>();
    const int64_t first = input.BagOffset(k);
    for (int64_t b = 0; b < strides[static_cast<size_t>(k)]; ++b) {
      const auto begin = static_cast<size_t>(offsets[static_cast<size_t>(first + b)]);
      const auto end = static_cast<size_t>(offsets[static_cast<size_t>(first + b + 1)]);
      if (static_cast<int64_t>(end - begin) > it->second) {
        return InvalidArgumentError(fmt::format(
            "feature '{}', sample {}: {} ids, but its position weights cover {} (raise the feature's max length)",
            it->first, b, end - begin, it->second));
      }
      for (size_t i = begin; i < end; ++i) {
        const auto j = static_cast<int32_t>(i - begin);
        weights[i] = p[j];
        param_of_[i] = index;
        position_of_[i] = j;
        sample_of_[i] = b;
      }
    }
  }
  forwarded_ = true;
  std::vector<int64_t> values = input.values().ToVector(), lengths = input.lengths();
  std::vector<int64_t> stride_per_key = input.variable_stride_per_key() ? strides : std::vector<int64_t>{};
  return KeyedJaggedTensor::FromLengths(input.keys(), std::move(values), std::move(lengths), std::move(weights),
                                        std::move(stride_per_key));
}

Status PositionWeightedModule::Backward(std::span<const float> id_weight_grad, int slices) {
  if (!forwarded_) return FailedPreconditionError("position weights: Backward needs a Forward first");
  if (id_weight_grad.size() != param_of_.size()) {
    return InvalidArgumentError(fmt::format("position weights: {} id weight gradients for a Forward of {} ids",
                                            id_weight_grad.size(), param_of_.size()));
  }
  if (slices < 1 || batch_ % slices != 0) {
    return InvalidArgumentError(fmt::format("position weights: a batch of {} does not split into {} slices", batch_,
                                            slices));
  }
  const int64_t per_slice = slices > 1 ? batch_ / slices : 0;
  for (int s = 0; s < slices; ++s) {
    // This slice's sums on their own, then added: the order an all-reduce adds ranks in.
    std::vector<std::vector<float>> sums;
    for (const auto& p : params_) sums.emplace_back(static_cast<size_t>(p.value.numel()), 0.0f);
    for (size_t i = 0; i < param_of_.size(); ++i) {
      if (param_of_[i] < 0 || (slices > 1 && sample_of_[i] / per_slice != s)) continue;
      sums[static_cast<size_t>(param_of_[i])][static_cast<size_t>(position_of_[i])] += id_weight_grad[i];
    }
    for (size_t p = 0; p < params_.size(); ++p) {
      float* g = params_[p].grad.data<float>();
      for (size_t j = 0; j < sums[p].size(); ++j) g[j] += sums[p][j];
    }
  }
  return Status::Ok();
}

}  // namespace shardrec
