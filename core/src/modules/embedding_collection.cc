// The unsharded EmbeddingCollection (see embedding_collection.h). All
// features go through one kernel call into a packed [sum N_f, max D]
// buffer (feature f's rows start at its first id), then split per feature.
#include "shardrec/core/modules/embedding_collection.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace shardrec {

StatusOr<EmbeddingCollection> EmbeddingCollection::Create(const PluginRegistry& registry,
                                                          std::vector<EmbeddingConfig> tables,
                                                          const EmbeddingModuleOptions& options) {
  for (auto& t : tables) {
    t.pooling = PoolingType::kNone;
    t.is_weighted = false;
  }
  SR_ASSIGN_OR_RETURN(auto group, EmbeddingTables::Create(registry, std::move(tables), options));
  return EmbeddingCollection(std::move(group));
}

std::vector<int64_t> EmbeddingCollection::Rows(const KeyedJaggedTensor& features) const {
  auto offsets = features.offset_per_key();
  offsets.pop_back();
  return offsets;
}

int64_t EmbeddingCollection::MaxDim() const {
  int64_t dim = 0;
  for (const auto& t : tables_.configs()) dim = std::max(dim, t.embedding_dim);
  return dim;
}

StatusOr<std::map<std::string, JaggedTensor>> EmbeddingCollection::Forward(const KeyedJaggedTensor& input,
                                                                           int64_t* invalid_ids) const {
  SR_ASSIGN_OR_RETURN(auto features, tables_.SelectFeatures(input));
  const int64_t width = MaxDim();
  const auto nnz = static_cast<int64_t>(features.values().size());
  // Uninitialised: the kernel writes each id's row in its feature's columns,
  // which is all that is copied out below.
  Tensor packed = Tensor::Empty(dtype::kFloat32, {nnz, width});
  const auto rows = Rows(features);
  const std::vector<int64_t> cols(rows.size(), 0);
  SR_RETURN_IF_ERROR(tables_.Forward(features, rows, cols, packed, invalid_ids));

  std::map<std::string, JaggedTensor> out;
  const auto value_offsets = features.offset_per_key();
  const float* src = packed.data<float>();
  for (size_t f = 0; f < tables_.features().size(); ++f) {
    const auto& feature = tables_.features()[f];
    const int64_t dim = tables_.configs()[static_cast<size_t>(feature.table)].embedding_dim;
    const int64_t n = value_offsets[f + 1] - value_offsets[f];
    JaggedTensor jt;
    jt.values = Tensor::Empty(dtype::kFloat32, {n, dim});
    float* dst = jt.values.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + i * dim, src + (value_offsets[f] + i) * width, static_cast<size_t>(dim) * sizeof(float));
    }
    // The feature's lengths only (Feature() would copy its ids too).
    const auto bags = features.lengths().begin();
    jt.lengths.assign(bags + features.BagOffset(static_cast<int>(f)), bags + features.BagOffset(static_cast<int>(f) + 1));
    out.emplace(feature.name, std::move(jt));
  }
  return out;
}

Status EmbeddingCollection::Backward(const KeyedJaggedTensor& input, const std::map<std::string, Tensor>& grads,
                                     int64_t iteration, double learning_rate) const {
  SR_ASSIGN_OR_RETURN(auto features, tables_.SelectFeatures(input));
  const int64_t width = MaxDim();
  const auto nnz = static_cast<int64_t>(features.values().size());
  Tensor packed = Tensor::Zeros(dtype::kFloat32, {nnz, width});
  const auto value_offsets = features.offset_per_key();
  for (size_t f = 0; f < tables_.features().size(); ++f) {
    const auto& feature = tables_.features()[f];
    const int64_t dim = tables_.configs()[static_cast<size_t>(feature.table)].embedding_dim;
    const int64_t n = value_offsets[f + 1] - value_offsets[f];
    const auto it = grads.find(feature.name);
    if (it == grads.end()) return Status(SR_NOT_FOUND, "no gradient for feature '" + feature.name + "'");
    const std::string what = "gradient of feature '" + feature.name + "'";
    SR_RETURN_IF_ERROR(ExpectTensor(it->second, what, dtype::kFloat32, 2));
    if (it->second.size(0) != n || it->second.size(1) != dim) {
      return InvalidArgumentError(fmt::format("{}: expected shape [{}, {}], got {}", what, n, dim,
                                              ShapeString(it->second.shape())));
    }
    float* dst = packed.data<float>();
    const float* src = it->second.data<float>();
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + (value_offsets[f] + i) * width, src + i * dim, static_cast<size_t>(dim) * sizeof(float));
    }
  }
  const auto rows = Rows(features);
  const std::vector<int64_t> cols(rows.size(), 0);
  return tables_.Backward(features, rows, cols, packed, iteration, learning_rate);
}

}  // namespace shardrec
