// The unsharded EmbeddingCollection (TorchRec's torchrec.modules.
// embedding_modules.EmbeddingCollection): sequence tables (pooling none),
// forward(KJT) -> one JaggedTensor per feature whose values are [N_f, D]
// (one row per id) with the input's lengths. Tables may differ in dim here
// (TorchRec requires one dim; this is a superset).
#pragma once

#include <limits>
#include <map>

#include "shardrec/core/modules/embedding_tables.h"

namespace shardrec {

class EmbeddingCollection {
 public:
  // Every table's pooling is taken as none (EmbeddingConfig has no pooling).
  static StatusOr<EmbeddingCollection> Create(const PluginRegistry& registry,
                                              std::vector<EmbeddingConfig> tables,
                                              const EmbeddingModuleOptions& options);

  StatusOr<std::map<std::string, JaggedTensor>> Forward(const KeyedJaggedTensor& input,
                                                        int64_t* invalid_ids = nullptr) const;
  // grads: per feature, float32 [N_f, D] (the gradient of Forward's values).
  Status Backward(const KeyedJaggedTensor& input, const std::map<std::string, Tensor>& grads,
                  int64_t iteration, double learning_rate = std::numeric_limits<double>::quiet_NaN()) const;

  const EmbeddingTables& tables() const { return tables_; }

 private:
  explicit EmbeddingCollection(EmbeddingTables tables) : tables_(std::move(tables)) {}
  // Rows of each feature in the packed [sum N_f, max D] output, and max D.
  std::vector<int64_t> Rows(const KeyedJaggedTensor& features) const;
  int64_t MaxDim() const;

  EmbeddingTables tables_;
};

}  // namespace shardrec
