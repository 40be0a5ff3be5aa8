// Serving pooled embeddings from quantized tables: TorchRec's
// QuantEmbeddingBagCollection (torchrec.quant.embedding_modules) and its
// inference sharding (ShardedQuantEmbeddingBagCollection, built by
// QuantEmbeddingBagCollectionSharder).
//
//   QuantEmbeddingBagCollection         one process, the tables whole;
//                                       Quantize() makes one from a trained
//                                       EmbeddingBagCollection and a QuantConfig.
//   ShardedQuantEmbeddingBagCollection  the tables sharded over a group's
//                                       ranks (table_wise, row_wise,
//                                       table_row_wise, data_parallel: a
//                                       quantized row cannot be split by
//                                       column). As in TorchRec's inference
//                                       sharding, one rank (the caller's)
//                                       holds the batch: its ids go out to
//                                       the shards (a synchronous input
//                                       dist), every rank looks up its
//                                       shards, and the pooled results come
//                                       back to the caller alone.
//
// Tables may be int8/int4/int2 (row-wise quantized, sdk/quantized_rows.hpp)
// or fp16/bf16/fp32; either way they serve only: no optimizer, no backward.
#pragma once

#include <optional>
#include <vector>

#include "shardrec/core/inference/quant_config.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"

namespace shardrec {

class QuantEmbeddingBagCollection {
 public:
  // Tables of any data type (their rows start as the initial weights, in
  // that type); options.optimizer must be none.
  static StatusOr<QuantEmbeddingBagCollection> Create(const PluginRegistry& registry,
                                                      std::vector<EmbeddingBagConfig> tables,
                                                      const EmbeddingModuleOptions& options);
  // The trained collection's tables, each in the type `config` gives it;
  // the error each table's values took, in table order, into *errors.
  static StatusOr<QuantEmbeddingBagCollection> Quantize(const PluginRegistry& registry,
                                                        const EmbeddingBagCollection& trained,
                                                        const QuantConfig& config, EmbeddingModuleOptions options,
                                                        std::vector<QuantizationError>* errors = nullptr);

  StatusOr<KeyedTensor> Forward(const KeyedJaggedTensor& input, int64_t* invalid_ids = nullptr) const {
    return collection_.Forward(input, invalid_ids);
  }
  const EmbeddingBagCollection& collection() const { return collection_; }
  const EmbeddingTables& tables() const { return collection_.tables(); }

 private:
  explicit QuantEmbeddingBagCollection(EmbeddingBagCollection c) : collection_(std::move(c)) {}
  EmbeddingBagCollection collection_;
};

class ShardedQuantEmbeddingBagCollection {
 public:
  // The plan must keep every quantized row whole (MakePlan refuses
  // column splits of int8/int4/int2 tables) and options.optimizer be none.
  static StatusOr<ShardedQuantEmbeddingBagCollection> Create(const PluginRegistry& registry, const ProcessGroup& group,
                                                             const ShardingPlan& plan,
                                                             const EmbeddingModuleOptions& options);
  // Collective. The caller's rank passes its batch, every other rank null;
  // the caller gets the pooled embeddings [B, sum of dims] (features in
  // table order), the others an empty optional. A batch the caller's
  // checks refuse (a missing or unknown feature, weights missing, an id
  // outside its table under the fatal bounds check) is its error alone:
  // its rank still takes part as an idle one, so the others do not wait.
  StatusOr<std::optional<KeyedTensor>> Forward(const KeyedJaggedTensor* input, int64_t* invalid_ids = nullptr);

  ShardedEmbeddingBagCollection& collection() { return collection_; }
  const ShardedTables& tables() const { return collection_.tables(); }

 private:
  ShardedQuantEmbeddingBagCollection(ShardedEmbeddingBagCollection c, std::vector<std::string> features,
                                     std::vector<int64_t> rows, bool weighted, int32_t bounds_check)
      : collection_(std::move(c)),
        features_(std::move(features)),
        rows_(std::move(rows)),
        weighted_(weighted),
        bounds_check_(bounds_check) {}
  // What the input dist would refuse on the caller's rank before its first
  // collective, checked here first.
  Status CheckInput(const KeyedJaggedTensor& input) const;
  // The idle rank's part of a Forward.
  Status ForwardIdle(int64_t* invalid_ids);

  ShardedEmbeddingBagCollection collection_;
  std::vector<std::string> features_;  // every feature the tables serve: an idle rank's empty batch
  std::vector<int64_t> rows_;          // per feature, its table's rows
  bool weighted_;                      // some table is weighted: that batch carries (no) weights too
  int32_t bounds_check_;
};

}  // namespace shardrec
