// What the planner may do with one table (internal to core/src/planner):
// each sharder's placement of it ("shape"), with the lookup share and bytes
// of every shard, and how the placement may move over the ranks, read from
// the per-call options the sharder declares ("call_options"):
//   "rank"  the placement starts at any rank (table_wise; column_wise's
//           consecutive blocks): the shards' ranks shift together;
//   "host"  it goes to any host (table_row_wise): shift by whole hosts;
//   else    it stays where the sharder put it (row_wise, data_parallel,
//           a plugin that declares neither).
// Column blocks narrower than the sharder's own are not tried: on the machine
// this was measured on, a hot table split by columns ran slower than the
// model said (docs/planner.md, "What the model leaves out").
#pragma once

#include <string>
#include <vector>

#include "shardrec/core/planner/planner.h"
#include "shardrec/core/plugin_objects.h"

namespace shardrec::planner_internal {

enum class Relocate { kFixed, kShift, kHost };

struct Shape {
  std::string sharder;
  Relocate relocate = Relocate::kFixed;
  std::vector<sr_shard> shards;  // where the sharder put it, asked with no rank
  bool replicated = false;
  std::vector<double> share;     // per shard: its share of the table's lookups
  std::vector<int64_t> bytes;    // per shard: weights + optimizer state
  std::string refused;           // not an option: why (placement failed, constraints)
};

// The sharders of a run, created once each.
struct SharderSet {
  std::vector<std::string> names;
  std::vector<Sharder> sharders;
  std::vector<Relocate> relocate;
  const Sharder* Find(const std::string& name) const;
};

StatusOr<SharderSet> CreateSharders(const PluginRegistry& registry, const std::vector<std::string>& only,
                                    const std::map<std::string, OptionList>& options);

// Shares and bytes of a placement of `table`: by row range from the
// workload's histogram (a sharder routing ids itself: by rows held), then
// the sharder's estimate_cost; bytes from its estimate_storage, else rows x
// (row bytes + optimizer state).
Status FillShares(const Sharder* sharder, const sr_table_desc& desc, const sr_topology& topo,
                  const TableWorkload& workload, int64_t batch_per_rank, Shape& shape);
Status FillBytes(const Sharder* sharder, const sr_table_desc& desc, const sr_topology& topo, Shape& shape);

// Ranks as people read them: "0-3" for a run of more than two, else "0,2".
std::string FormatRanks(const std::vector<int>& sorted_unique);

// `shape`'s shards moved by `offset` (a rank for kShift, a host for kHost).
std::vector<sr_shard> Moved(const Shape& shape, int offset, int world, int ranks_per_host);

}  // namespace shardrec::planner_internal
