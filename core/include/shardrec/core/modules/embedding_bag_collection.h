// The unsharded EmbeddingBagCollection (TorchRec's torchrec.modules.
// embedding_modules.EmbeddingBagCollection): pooled tables (sum or mean),
// forward(KJT) -> KeyedTensor [B, sum of dims] with the features in table
// order, and a backward that hands the output gradient to the kernel's
// fused optimizer. The seeds' example: tables t1 (dim 3, f1) and t2 (dim 4,
// f2) give values [3, 7] and offset_per_key [0, 3, 7].
#pragma once

#include <limits>

#include "shardrec/core/modules/embedding_tables.h"
#include "shardrec/core/sparse/keyed_tensor.h"

namespace shardrec {

class EmbeddingBagCollection {
 public:
  // Every table must pool (sum or mean); sequence tables belong in an
  // EmbeddingCollection.
  static StatusOr<EmbeddingBagCollection> Create(const PluginRegistry& registry,
                                                 std::vector<EmbeddingBagConfig> tables,
                                                 const EmbeddingModuleOptions& options);

  // Looks up the input's features (extra keys are ignored; a missing one
  // is NOT_FOUND). Every feature must have the same batch size.
  StatusOr<KeyedTensor> Forward(const KeyedJaggedTensor& input, int64_t* invalid_ids = nullptr) const;
  // grad: float32 [B, sum of dims], the gradient of Forward's values for
  // the same input. Updates the tables with the fused optimizer; iteration
  // is 1-based (Adam's bias correction); NaN learning rate = the configured.
  Status Backward(const KeyedJaggedTensor& input, const Tensor& grad, int64_t iteration,
                  double learning_rate = std::numeric_limits<double>::quiet_NaN()) const;
  // As Backward, and first (from the rows before the update) the gradient
  // with respect to every id's per-sample weight: one float per value of
  // `input`, 0 for ids of unweighted tables or of keys no table serves.
  Status Backward(const KeyedJaggedTensor& input, const Tensor& grad, int64_t iteration, double learning_rate,
                  std::vector<float>* id_weight_grad) const;

  const EmbeddingTables& tables() const { return tables_; }
  std::vector<std::string> feature_names() const;
  std::vector<int64_t> embedding_dims() const;  // per feature
  bool is_weighted() const;

 private:
  explicit EmbeddingBagCollection(EmbeddingTables tables) : tables_(std::move(tables)) {}
  StatusOr<int64_t> BatchSize(const KeyedJaggedTensor& features) const;
  std::vector<int64_t> Columns() const;

  EmbeddingTables tables_;
};

}  // namespace shardrec
