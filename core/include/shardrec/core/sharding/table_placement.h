// Where one table lives: a sharder plugin's answer (sr_shard_table_args)
// fetched with the two-call protocol, and checked: every shard inside the
// table and the world, and either an exact tiling (every cell owned once)
// or whole-table replicas. The planner and the conformance kit both go
// through here, so a sharder's mistake is caught the same way everywhere.
#pragma once

#include <string>
#include <vector>

#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_options.h"

namespace shardrec {

struct TablePlacement {
  std::vector<sr_shard> shards;
  bool replicated = false;  // SR_PLACEMENT_REPLICATED: every shard is the whole table
};

// The ABI descriptions of a table and of the machines, filled in (struct
// sizes included). `name` must outlive the result; `memory_bytes_per_rank`
// is borrowed (NULL: unlimited).
sr_table_desc MakeTableDesc(const char* name, int64_t rows, int64_t cols, DLDataType dtype = {kDLFloat, 32, 1},
                            int64_t state_bytes_per_row = 0);
sr_topology MakeTopology(int world_size, int ranks_per_host, const int64_t* memory_bytes_per_rank = nullptr);

// Asks `sharder` to place `table` on `topology` with per-call `options`
// (e.g. rank=2) and validates the answer; errors name the table.
StatusOr<TablePlacement> PlaceTable(const Sharder& sharder, const sr_table_desc& table,
                                    const sr_topology& topology, const OptionList& options = {});

// "" when `placement` is valid for `table` on `topology`, else why not.
std::string ValidatePlacement(const TablePlacement& placement, const sr_table_desc& table,
                              const sr_topology& topology);

}  // namespace shardrec
