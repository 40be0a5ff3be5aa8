// Quantized pooled lookups, whole and sharded (see quant_embedding_bag_collection.h).
#include "shardrec/core/inference/quant_embedding_bag_collection.h"

#include <fmt/format.h>

#include "shardrec/core/modules/table_weights.h"

namespace shardrec {

namespace {
Status ServesOnly(const EmbeddingModuleOptions& options, const char* who) {
  if (options.optimizer.optimizer != SR_OPTIMIZER_NONE) {
    return InvalidArgumentError(std::string(who) + " serves only: its optimizer must be none, not " +
                                options.optimizer.ToString());
  }
  return Status::Ok();
}
}  // namespace

StatusOr<QuantEmbeddingBagCollection> QuantEmbeddingBagCollection::Create(const PluginRegistry& registry,
                                                                          std::vector<EmbeddingBagConfig> tables,
                                                                          const EmbeddingModuleOptions& options) {
  SR_RETURN_IF_ERROR(ServesOnly(options, "QuantEmbeddingBagCollection"));
  SR_ASSIGN_OR_RETURN(auto ebc, EmbeddingBagCollection::Create(registry, std::move(tables), options));
  return QuantEmbeddingBagCollection(std::move(ebc));
}

StatusOr<QuantEmbeddingBagCollection> QuantEmbeddingBagCollection::Quantize(const PluginRegistry& registry,
                                                                            const EmbeddingBagCollection& trained,
                                                                            const QuantConfig& config,
                                                                            EmbeddingModuleOptions options,
                                                                            std::vector<QuantizationError>* errors) {
  const auto& from = trained.tables().configs();
  SR_RETURN_IF_ERROR(config.CheckTables(from));
  options.optimizer = OptimizerSpec{};
  SR_ASSIGN_OR_RETURN(auto made, Create(registry, config.Apply(from), options));
  if (errors) errors->clear();
  for (size_t t = 0; t < from.size(); ++t) {
    const auto table = static_cast<int32_t>(t);
    const EmbeddingTableConfig& served = made.tables().configs()[t];
    const std::string what = "table '" + from[t].name + "'";
    SR_ASSIGN_OR_RETURN(Tensor stored, trained.tables().ReadWeights(table));
    SR_ASSIGN_OR_RETURN(Tensor f32, DecodeWeights(stored, from[t], what));
    SR_ASSIGN_OR_RETURN(Tensor encoded, EncodeWeights(f32, served, what));
    SR_RETURN_IF_ERROR(made.tables().WriteWeights(table, encoded));
    if (!errors) continue;
    SR_ASSIGN_OR_RETURN(Tensor back, DecodeWeights(encoded, served, what));
    SR_ASSIGN_OR_RETURN(QuantizationError e, MeasureQuantizationError(f32, back));
    errors->push_back(e);
  }
  return made;
}

StatusOr<ShardedQuantEmbeddingBagCollection> ShardedQuantEmbeddingBagCollection::Create(
    const PluginRegistry& registry, const ProcessGroup& group, const ShardingPlan& plan,
    const EmbeddingModuleOptions& options) {
  SR_RETURN_IF_ERROR(ServesOnly(options, "ShardedQuantEmbeddingBagCollection"));
  std::vector<std::string> features;
  bool weighted = false;
  for (const ShardedTable& t : plan.tables) {
    weighted |= t.config.is_weighted;
    for (size_t c = 0; c < t.placement.shards.size(); ++c) {
      const sr_shard& s = t.placement.shards[c];
      if (IsRowQuantized(t.config.data_type) && s.num_rows > 0 &&
          (s.col_offset != 0 || s.num_cols != t.config.embedding_dim)) {
        return InvalidArgumentError(fmt::format("table '{}' is {}: a plan that splits its rows by column cannot "
                                                "serve it", t.config.name, DataTypeName(t.config.data_type)));
      }
    }
    features.insert(features.end(), t.config.feature_names.begin(), t.config.feature_names.end());
  }
  SR_ASSIGN_OR_RETURN(auto ebc, ShardedEmbeddingBagCollection::Create(registry, group, plan, options));
  return ShardedQuantEmbeddingBagCollection(std::move(ebc), std::move(features), weighted);
}

StatusOr<std::optional<KeyedTensor>> ShardedQuantEmbeddingBagCollection::Forward(const KeyedJaggedTensor* input,
                                                                                int64_t* invalid_ids) {
  if (input != nullptr) {
    SR_ASSIGN_OR_RETURN(KeyedTensor out, collection_.Forward(*input, invalid_ids));
    return std::optional<KeyedTensor>(std::move(out));
  }
  // An idle rank: no samples of its own, but its shards serve the caller's.
  std::optional<SharedArray<float>> no_weights;
  if (weighted_) no_weights = SharedArray<float>(std::vector<float>{});
  SR_ASSIGN_OR_RETURN(KeyedJaggedTensor none, KeyedJaggedTensor::FromLengths(features_, {}, {}, std::move(no_weights)));
  SR_RETURN_IF_ERROR(collection_.Forward(none, invalid_ids).status());
  return std::optional<KeyedTensor>();
}

}  // namespace shardrec
