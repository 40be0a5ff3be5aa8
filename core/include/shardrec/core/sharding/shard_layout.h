// The map of a sharded step, made once from a plan and the same on every
// rank: which rank looks up which (feature, shard) pair ("slots"), where
// each slot's columns sit in that rank's lookup output and in the pooled
// output, and how a table's ids route to its row blocks (block
// bucketization by row range, or the sharder's own route_ids). The input
// dist, the lookup and the output dist of the sharded modules all read it.
//
// Slots on a rank are ordered by table (plan order), then by shard, then by
// the table's features; that is also the order of the rank's shard tables,
// so the rank's received KJT is already in lookup order. Shards with no rows
// or no columns hold nothing and get no slot. Data-parallel tables
// (replicated placement) have no slots: every rank looks them up locally.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/sharding/sharding_plan.h"

namespace shardrec {

struct LayoutFeature {
  std::string name;
  int32_t table = 0;       // index in plan.tables
  int64_t dim = 0;
  int64_t output_col = 0;  // first column in the pooled output [B, sum of dims]
};

struct ShardSlot {
  int32_t feature = 0;  // index in ShardLayout::features()
  int32_t table = 0;
  int32_t shard = 0;    // index in the table's placement.shards
  std::string key;      // the name it travels under: "<feature>@<shard>"
  int64_t col = 0;      // first column in the owning rank's lookup output
};

// One table's row blocks: the distinct (row_offset, num_rows) pairs of its
// grid in order of first appearance (the ABI's numbering), each with the
// shards (column blocks) that hold it.
struct TableRouting {
  std::vector<int64_t> block_rows;               // rows per block
  std::vector<int64_t> block_row_offset;         // first global row (default routing)
  std::vector<std::vector<int32_t>> block_shards;
  // Default routing: block starts ascending and the block index of each.
  std::vector<int64_t> sorted_starts;
  std::vector<int32_t> sorted_block;
  int64_t uniform_block = 0;  // > 0: block b holds rows [b*u, (b+1)*u) (fast division)
  // The sharder's own routing, and per block the global row of each local
  // row (made once by routing every row).
  std::shared_ptr<const Sharder> router;
  std::vector<std::vector<int64_t>> block_global_rows;
};

class ShardLayout {
 public:
  static StatusOr<ShardLayout> Create(const PluginRegistry& registry, ShardingPlan plan);

  const ShardingPlan& plan() const { return plan_; }
  int world_size() const { return plan_.world_size; }
  const std::vector<LayoutFeature>& features() const { return features_; }
  int64_t output_width() const { return output_width_; }  // sum of every feature's dim
  bool replicated(int32_t table) const { return plan_.tables[static_cast<size_t>(table)].placement.replicated; }
  bool any_replicated() const { return any_replicated_; }
  bool any_sharded() const { return any_sharded_; }
  const TableRouting& routing(int32_t table) const { return routing_[static_cast<size_t>(table)]; }

  const std::vector<ShardSlot>& slots(int rank) const { return slots_[static_cast<size_t>(rank)]; }
  int64_t lookup_width(int rank) const { return lookup_width_[static_cast<size_t>(rank)]; }
  // Slots per rank, in rank order (the KJT all-to-all's splits).
  std::vector<int64_t> slot_counts() const;

  // Pure table-wise: every sharded table is one shard, whole. Pure row-wise:
  // every rank holds one non-empty full-width row block of every sharded
  // table, so every rank's lookup output has the sharded features' columns
  // in output order (a reduce-scatter adds the row blocks).
  bool all_table_wise() const { return all_table_wise_; }
  bool all_row_wise() const { return all_row_wise_; }

  // Routes in-range global ids of `table` to (row block, local row).
  Status Route(int32_t table, std::span<const int64_t> ids, int32_t* block, int64_t* local_row) const;
  // Global row of `local_row` of row block `block`.
  int64_t GlobalRow(int32_t table, int32_t block, int64_t local_row) const;
  // The shard a slot looks up.
  const sr_shard& shard(const ShardSlot& slot) const {
    return plan_.tables[static_cast<size_t>(slot.table)].placement.shards[static_cast<size_t>(slot.shard)];
  }
  // Row block of shard `shard` of `table`.
  int32_t BlockOfShard(int32_t table, int32_t shard) const {
    return shard_block_[static_cast<size_t>(table)][static_cast<size_t>(shard)];
  }

 private:
  ShardLayout() = default;
  Status BuildRouting(const PluginRegistry& registry, int32_t table);

  ShardingPlan plan_;
  std::vector<LayoutFeature> features_;
  int64_t output_width_ = 0;
  bool any_replicated_ = false, any_sharded_ = false;
  bool all_table_wise_ = false, all_row_wise_ = false;
  std::vector<TableRouting> routing_;
  std::vector<std::vector<int32_t>> shard_block_;  // per table, per shard: row block (-1: empty shard)
  std::vector<std::vector<ShardSlot>> slots_;
  std::vector<int64_t> lookup_width_;
};

}  // namespace shardrec
