// Quantized pooled lookups, whole and sharded (see quant_embedding_bag_collection.h).
#include "shardrec/core/inference/quant_embedding_bag_collection.h"

#include <set>

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
  std::vector<int64_t> rows;
  bool weighted = false;
  for (const ShardedTable& t : plan.tables) {
    weighted |= t.config.is_weighted;
    features.insert(features.end(), t.config.feature_names.begin(), t.config.feature_names.end());
    rows.insert(rows.end(), t.config.feature_names.size(), t.config.num_embeddings);
  }
  SR_ASSIGN_OR_RETURN(auto ebc, ShardedEmbeddingBagCollection::Create(registry, group, plan, options));
  return ShardedQuantEmbeddingBagCollection(std::move(ebc), std::move(features), std::move(rows), weighted,
                                            options.bounds_check);
}

Status ShardedQuantEmbeddingBagCollection::CheckInput(const KeyedJaggedTensor& input) const {
  std::set<std::string> served(features_.begin(), features_.end());
  for (const std::string& key : input.keys()) {
    if (!served.count(key)) return InvalidArgumentError("the batch has feature '" + key + "', which no table serves");
  }
  SR_ASSIGN_OR_RETURN(KeyedJaggedTensor mine, input.Select(features_));
  if (weighted_ && !mine.has_weights()) {
    return InvalidArgumentError("the tables are weighted but the batch has no weights");
  }
  for (size_t f = 1; f < features_.size(); ++f) {
    if (mine.stride_per_key()[f] != mine.stride_per_key()[0]) {
      return InvalidArgumentError(fmt::format("feature '{}' has {} samples, feature '{}' {}: every feature needs one "
                                              "batch size", features_[f], mine.stride_per_key()[f], features_[0],
                                              mine.stride_per_key()[0]));
    }
  }
  if (bounds_check_ != SR_BOUNDS_CHECK_FATAL) return Status::Ok();
  const auto offsets = mine.offset_per_key();
  for (size_t f = 0; f < features_.size(); ++f) {
    for (auto i = static_cast<size_t>(offsets[f]); i < static_cast<size_t>(offsets[f + 1]); ++i) {
      const int64_t id = mine.values()[i];
      if (id < 0 || id >= rows_[f]) {
        return Status(SR_OUT_OF_RANGE, fmt::format("feature '{}': id {} is outside its table's {} rows", features_[f],
                                                   id, rows_[f]));
      }
    }
  }
  return Status::Ok();
}

Status ShardedQuantEmbeddingBagCollection::ForwardIdle(int64_t* invalid_ids) {
  // No samples of its own, but its shards serve the caller's.
  std::optional<SharedArray<float>> no_weights;
  if (weighted_) no_weights = SharedArray<float>(std::vector<float>{});
  SR_ASSIGN_OR_RETURN(KeyedJaggedTensor none, KeyedJaggedTensor::FromLengths(features_, {}, {}, std::move(no_weights)));
  return collection_.Forward(none, invalid_ids).status();
}

StatusOr<std::optional<KeyedTensor>> ShardedQuantEmbeddingBagCollection::Forward(const KeyedJaggedTensor* input,
                                                                                int64_t* invalid_ids) {
  if (input == nullptr) {
    SR_RETURN_IF_ERROR(ForwardIdle(invalid_ids));
    return std::optional<KeyedTensor>();
  }
  if (Status refused = CheckInput(*input); !refused.ok()) {
    // The other ranks are already in this Forward's collectives: take part
    // as an idle rank, then report.
    SR_RETURN_IF_ERROR(ForwardIdle(nullptr));
    return refused;
  }
  SR_ASSIGN_OR_RETURN(KeyedTensor out, collection_.Forward(*input, invalid_ids));
  return std::optional<KeyedTensor>(std::move(out));
}

}  // namespace shardrec
