// What the sharded EmbeddingBagCollection and EmbeddingCollection share:
// the plan's layout, this rank's shards and data-parallel replicas, the
// input dist (select the features, route ids to shards, KJT all-to-all),
// the replicas' gradient gather, and reading a whole table back from its
// shards. Every method marked collective must be called by every rank of
// the group in the same order. The group must outlive this object.
#pragma once

#include <map>
#include <set>
#include <string>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/dist/shard_input_dist.h"
#include "shardrec/core/modules/rank_tables.h"
#include "shardrec/core/qcomm/qcomm_config.h"
#include "shardrec/core/sharding/shard_layout.h"

namespace shardrec {

// How the sharded modules run their dists.
struct ShardedModuleOptions {
  bool fast_paths = true;  // EBC; false: the generic output dist for every plan
  // Quantized comm codecs per comm op (docs/comm.md): the output dist's
  // all-to-all and reduce-scatter, forward and backward. Empty: float32.
  QCommConfig qcomm;
  std::map<std::string, OptionList> codec_options;  // --plugin-opt codec.NAME.*
};

// Seconds spent per phase, summed over steps (wall clock on this rank).
struct ShardedStepTimes {
  double input_dist = 0, lookup = 0, output_dist = 0, backward = 0;
  // Of backward: the gradient's return dist (its comm, and the wait for
  // the slowest rank); the rest of backward is this rank's own work.
  double backward_dist = 0;
  int64_t steps = 0;
  // Bytes this rank sent to other ranks: the input dist's ids, lengths and
  // weights, and the output dist's embeddings and gradients (what a
  // quantized comm codec shrinks).
  int64_t input_dist_bytes = 0, output_dist_bytes = 0;
};

// One Forward's input side, kept for the matching Backward.
struct DistributedInput {
  KeyedJaggedTensor local;            // this rank's batch: the layout's features, in order
  KeyedJaggedTensor received;         // this rank's lookup input (its slots, every rank's samples)
  std::vector<int64_t> origin;        // per id sent: its index in local.values()
  std::vector<int64_t> sent_per_key;  // ids sent per slot key, destination-major
  KeyedJaggedTensor replica_local;    // the data-parallel features of `local`
  int64_t invalid = 0;                // ids dropped as out of range
  // Some of `received` are not rows yet: ids routed by an IdRoute, which
  // their owner (managed collision) must remap before the lookup.
  bool rows_pending = false;
  // Filled by the sharded EBC's DistributeInput: every rank's batch size,
  // where each key of `local` starts in the caller's input values and how
  // many values that input had (for the id-weight gradient), and the wall
  // seconds the dist took (wherever it ran).
  std::vector<int64_t> batch_per_rank;
  std::vector<int64_t> input_value_at;
  size_t input_values = 0;
  double seconds = 0;
  int64_t bytes_sent = 0;  // to other ranks (ids, lengths, weights, sizes)
};

// A whole table as the unsharded module would hold it (float32).
struct TableContents {
  Tensor weights;  // [rows, dim]
  Tensor state;    // [rows, state_dim(dim)]; row-wise Adagrad: the first column block's
};

class ShardedTables {
 public:
  // pooled: shards pool by sum (mean divides at the output) or, for
  // sequence modules, return one row per id.
  static StatusOr<ShardedTables> Create(const PluginRegistry& registry, const ProcessGroup& group,
                                        const ShardingPlan& plan, const EmbeddingModuleOptions& options, bool pooled);

  const ShardLayout& layout() const { return layout_; }
  const ProcessGroup& group() const { return *group_; }
  const RankTables& shards() const { return shards_; }
  const RankTables& replicas() const { return replicas_; }
  const EmbeddingModuleOptions& options() const { return options_; }
  // Indices into layout().features() of the data-parallel features.
  const std::vector<int32_t>& replica_features() const { return replica_features_; }

  // Collective. Checks the input's keys (a key no table serves is an
  // error naming it; a missing feature too) and sends every id to its shards.
  // via: the group to send on (the same ranks: the module's group or a
  // Duplicate() of it, which a pipeline's second thread uses); null: the
  // module's. Reads only the layout, so it may run while another thread
  // looks up or updates the tables. routes: tables whose ids become rows
  // where they arrive (shard_input_dist.h); their ids leave `received`
  // with rows_pending set.
  StatusOr<DistributedInput> DistributeInput(const KeyedJaggedTensor& input, const ProcessGroup* via = nullptr,
                                             const IdRoutes* routes = nullptr) const;
  // Collective. Every rank's replica input, sample-concatenated in rank order.
  StatusOr<KeyedJaggedTensor> GatherReplicaInput(const KeyedJaggedTensor& replica_local) const;
  // Collective. The table named `name` assembled from every rank's shards.
  StatusOr<TableContents> ReadTable(const std::string& name) const;
  // Local (not collective): sets this rank's part of table `name` from the
  // whole table, as ReadTable returns it (state may be empty: left as is).
  Status WriteTable(const std::string& name, const TableContents& contents) const;
  // Local (not collective): re-initialises the global `rows` of table
  // `name` in this rank's shards and replicas (each rank calls it with the
  // same rows: managed collision's evictions).
  Status ResetRows(const std::string& name, std::span<const int64_t> rows) const;
  // Device bytes this rank holds (weights and optimizer state).
  StatusOr<int64_t> BytesOnRank() const;
  // Local: every cached table's changed rows onto its file (checkpoints
  // call it before they read rows).
  Status Flush() const;
  // Local: the rows of `in` (this module's DistributeInput of the next
  // batch) that cached tables asking for prefetch_pipeline hold on their
  // files, read ahead (EmbeddingTables::Prefetch). May run on a pipeline's
  // thread while the step thread trains the current batch. Ids not yet
  // remapped to rows (rows_pending) are skipped.
  Status Prefetch(const DistributedInput& in) const;

 private:
  ShardedTables(ShardLayout layout, const ProcessGroup& group, RankTables shards, RankTables replicas,
                EmbeddingModuleOptions options, bool with_weights);

  StatusOr<int32_t> TableIndex(const std::string& name) const;

  ShardLayout layout_;
  const ProcessGroup* group_;
  RankTables shards_, replicas_;
  EmbeddingModuleOptions options_;
  bool with_weights_;
  std::vector<int32_t> replica_features_;
  std::vector<std::string> feature_names_;
  std::set<std::string> served_;  // feature_names_, for the per-step key check
};

}  // namespace shardrec
