// The unsharded EmbeddingBagCollection (see embedding_bag_collection.h).
#include "shardrec/core/modules/embedding_bag_collection.h"

#include <algorithm>

#include <fmt/format.h>

namespace shardrec {

StatusOr<EmbeddingBagCollection> EmbeddingBagCollection::Create(const PluginRegistry& registry,
                                                                std::vector<EmbeddingBagConfig> tables,
                                                                const EmbeddingModuleOptions& options) {
  for (const auto& t : tables) {
    if (t.pooling == PoolingType::kNone) {
      return InvalidArgumentError("table '" + t.name +
                                  "' has pooling none: sequence tables belong in an EmbeddingCollection");
    }
  }
  SR_ASSIGN_OR_RETURN(auto group, EmbeddingTables::Create(registry, std::move(tables), options));
  return EmbeddingBagCollection(std::move(group));
}

std::vector<std::string> EmbeddingBagCollection::feature_names() const {
  std::vector<std::string> names;
  for (const auto& f : tables_.features()) names.push_back(f.name);
  return names;
}

std::vector<int64_t> EmbeddingBagCollection::embedding_dims() const {
  std::vector<int64_t> dims;
  for (const auto& f : tables_.features()) {
    dims.push_back(tables_.configs()[static_cast<size_t>(f.table)].embedding_dim);
  }
  return dims;
}

bool EmbeddingBagCollection::is_weighted() const {
  for (const auto& t : tables_.configs()) {
    if (t.is_weighted) return true;
  }
  return false;
}

std::vector<int64_t> EmbeddingBagCollection::Columns() const {
  std::vector<int64_t> cols;
  int64_t col = 0;
  for (int64_t d : embedding_dims()) {
    cols.push_back(col);
    col += d;
  }
  return cols;
}

StatusOr<int64_t> EmbeddingBagCollection::BatchSize(const KeyedJaggedTensor& features) const {
  const auto& strides = features.stride_per_key();
  for (size_t f = 1; f < strides.size(); ++f) {
    if (strides[f] != strides[0]) {
      return InvalidArgumentError(fmt::format(
          "EmbeddingBagCollection needs one batch size for all features: '{}' has {} samples, '{}' has {}",
          features.keys()[0], strides[0], features.keys()[f], strides[f]));
    }
  }
  return strides.empty() ? 0 : strides[0];
}

StatusOr<KeyedTensor> EmbeddingBagCollection::Forward(const KeyedJaggedTensor& input, int64_t* invalid_ids) const {
  SR_ASSIGN_OR_RETURN(auto features, tables_.SelectFeatures(input));
  SR_ASSIGN_OR_RETURN(int64_t batch, BatchSize(features));
  const auto dims = embedding_dims();
  int64_t width = 0;
  for (int64_t d : dims) width += d;
  // Uninitialised: the kernel writes every bag of every feature (empty bags as zeros).
  Tensor values = Tensor::Empty(dtype::kFloat32, {batch, width});
  const std::vector<int64_t> rows(dims.size(), 0);
  SR_RETURN_IF_ERROR(tables_.Forward(features, rows, Columns(), values, invalid_ids));
  return KeyedTensor::Create(feature_names(), dims, std::move(values));
}

Status EmbeddingBagCollection::Backward(const KeyedJaggedTensor& input, const Tensor& grad, int64_t iteration,
                                        double learning_rate) const {
  return Backward(input, grad, iteration, learning_rate, nullptr);
}

Status EmbeddingBagCollection::Backward(const KeyedJaggedTensor& input, const Tensor& grad, int64_t iteration,
                                        double learning_rate, std::vector<float>* id_weight_grad) const {
  SR_ASSIGN_OR_RETURN(auto features, tables_.SelectFeatures(input));
  SR_ASSIGN_OR_RETURN(int64_t batch, BatchSize(features));
  int64_t width = 0;
  for (int64_t d : embedding_dims()) width += d;
  SR_RETURN_IF_ERROR(ExpectTensor(grad, "gradient", dtype::kFloat32, 2));
  if (grad.size(0) != batch || grad.size(1) != width) {
    return InvalidArgumentError(fmt::format("gradient: expected shape [{}, {}] (batch, sum of dims), got {}", batch,
                                            width, ShapeString(grad.shape())));
  }
  const std::vector<int64_t> rows(features.keys().size(), 0);
  if (id_weight_grad != nullptr) {
    std::vector<float> mine(features.values().size());
    SR_RETURN_IF_ERROR(tables_.IdWeightGradient(features, rows, Columns(), grad, mine));
    id_weight_grad->assign(input.values().size(), 0.0f);
    const auto from = features.offset_per_key(), at = input.offset_per_key();
    for (int k = 0; k < features.num_keys(); ++k) {
      const int index = input.KeyIndex(features.keys()[static_cast<size_t>(k)]);
      std::copy(mine.begin() + from[static_cast<size_t>(k)], mine.begin() + from[static_cast<size_t>(k) + 1],
                id_weight_grad->begin() + at[static_cast<size_t>(index)]);
    }
  }
  return tables_.Backward(features, rows, Columns(), grad, iteration, learning_rate);
}

}  // namespace shardrec
