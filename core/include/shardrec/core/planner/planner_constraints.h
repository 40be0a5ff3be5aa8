// Per-table constraints on the planner's choices (docs/planner.md):
//   {"constraints": {
//      "t0": {"sharding_types": ["row_wise", "table_row_wise"]},
//      "t1": {"compute_kernels": ["cpu"], "ranks": [2, 3]},
//      "t2": {"sharding_types": ["column_wise"], "sharder_options": {"block_cols": "32"}}}}
// sharding_types and compute_kernels list what a table may use (absent: any);
// ranks pins it: every shard on one of them (a replica on every rank, or
// rows over every rank, then need all ranks listed); sharder_options go to
// the sharder's placement call. Every table named must exist.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec {

struct TableConstraint {
  std::vector<std::string> sharding_types;   // empty: any
  std::vector<std::string> compute_kernels;  // empty: any
  std::vector<int> ranks;                    // empty: any
  std::vector<std::pair<std::string, std::string>> sharder_options;
};

using PlannerConstraints = std::map<std::string, TableConstraint>;

StatusOr<PlannerConstraints> ParseConstraintsJson(const std::string& json_text, const std::string& source);
StatusOr<PlannerConstraints> LoadConstraintsFile(const std::string& path);

}  // namespace shardrec
