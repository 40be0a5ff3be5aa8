// PlaceTable and ValidatePlacement (table_placement.h).
#include "shardrec/core/sharding/table_placement.h"

#include <algorithm>

namespace shardrec {

sr_table_desc MakeTableDesc(const char* name, int64_t rows, int64_t cols, DLDataType dtype,
                            int64_t state_bytes_per_row) {
  sr_table_desc t{};
  t.struct_size = SR_STRUCT_SIZE(sr_table_desc, state_bytes_per_row);
  t.name = name;
  t.num_rows = rows;
  t.num_cols = cols;
  t.weight_dtype = dtype;
  t.state_bytes_per_row = state_bytes_per_row;
  return t;
}

sr_topology MakeTopology(int world_size, int ranks_per_host, const int64_t* memory_bytes_per_rank) {
  sr_topology t{};
  t.struct_size = SR_STRUCT_SIZE(sr_topology, memory_bytes_per_rank);
  t.world_size = world_size;
  t.ranks_per_host = ranks_per_host;
  t.device_type = kDLCPU;
  t.memory_bytes_per_rank = memory_bytes_per_rank;
  return t;
}

std::string ValidatePlacement(const TablePlacement& p, const sr_table_desc& t, const sr_topology& topo) {
  if (p.shards.empty()) return "no shards";
  for (const sr_shard& s : p.shards) {
    if (s.rank < 0 || s.rank >= topo.world_size) {
      return "a shard is on rank " + std::to_string(s.rank) + ", outside the world of " +
             std::to_string(topo.world_size);
    }
    if (s.row_offset < 0 || s.num_rows < 0 || s.col_offset < 0 || s.num_cols < 0 ||
        s.row_offset + s.num_rows > t.num_rows || s.col_offset + s.num_cols > t.num_cols) {
      return "shard rows [" + std::to_string(s.row_offset) + ", +" + std::to_string(s.num_rows) + ") cols [" +
             std::to_string(s.col_offset) + ", +" + std::to_string(s.num_cols) + ") falls outside the " +
             std::to_string(t.num_rows) + "x" + std::to_string(t.num_cols) + " table";
    }
  }
  if (p.replicated) {
    for (const sr_shard& s : p.shards) {
      if (s.row_offset != 0 || s.col_offset != 0 || s.num_rows != t.num_rows || s.num_cols != t.num_cols) {
        return "a replica is not the whole table";
      }
    }
    return {};
  }
  // Exact tiling, checked on the grid of distinct row and column cuts (no
  // per-cell pass: tables have millions of rows).
  std::vector<int64_t> row_cuts = {0, t.num_rows}, col_cuts = {0, t.num_cols};
  for (const sr_shard& s : p.shards) {
    row_cuts.push_back(s.row_offset);
    row_cuts.push_back(s.row_offset + s.num_rows);
    col_cuts.push_back(s.col_offset);
    col_cuts.push_back(s.col_offset + s.num_cols);
  }
  for (auto* cuts : {&row_cuts, &col_cuts}) {
    std::sort(cuts->begin(), cuts->end());
    cuts->erase(std::unique(cuts->begin(), cuts->end()), cuts->end());
  }
  const size_t nr = row_cuts.size() - 1, nc = col_cuts.size() - 1;
  std::vector<int> owners(nr * nc, 0);
  auto index = [](const std::vector<int64_t>& cuts, int64_t v) {
    return static_cast<size_t>(std::lower_bound(cuts.begin(), cuts.end(), v) - cuts.begin());
  };
  for (const sr_shard& s : p.shards) {
    const size_t r_end = index(row_cuts, s.row_offset + s.num_rows);
    const size_t c_begin = index(col_cuts, s.col_offset), c_end = index(col_cuts, s.col_offset + s.num_cols);
    for (size_t r = index(row_cuts, s.row_offset); r < r_end; ++r) {
      for (size_t c = c_begin; c < c_end; ++c) ++owners[r * nc + c];
    }
  }
  for (size_t r = 0; r < nr; ++r) {
    for (size_t c = 0; c < nc; ++c) {
      if (owners[r * nc + c] != 1) {
        return "rows [" + std::to_string(row_cuts[r]) + ", " + std::to_string(row_cuts[r + 1]) + ") x cols [" +
               std::to_string(col_cuts[c]) + ", " + std::to_string(col_cuts[c + 1]) + ") are owned by " +
               std::to_string(owners[r * nc + c]) + " shards: shards must tile the table exactly once";
      }
    }
  }
  return {};
}

StatusOr<TablePlacement> PlaceTable(const Sharder& sharder, const sr_table_desc& table, const sr_topology& topology,
                                    const OptionList& options) {
  const std::string who = "table '" + std::string(table.name ? table.name : "") + "'";
  TablePlacement p;
  int32_t placement = -1;
  size_t needed = 0;
  sr_shard_table_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_shard_table_args, placement);
  a.table = &table;
  a.topology = &topology;
  a.options = options.view();
  a.num_shards = &needed;
  a.placement = &placement;
  SR_RETURN_IF_ERROR(sharder.ShardTable(a).WithContext(who));  // size query
  p.shards.assign(needed, sr_shard{});
  a.shards = p.shards.data();
  a.shards_capacity = needed;
  size_t again = 0;
  a.num_shards = &again;
  SR_RETURN_IF_ERROR(sharder.ShardTable(a).WithContext(who));
  if (again != needed) {
    return InternalError(sharder.Describe() + ": " + who + ": the size query said " + std::to_string(needed) +
                         " shards, the second call " + std::to_string(again));
  }
  if (placement != SR_PLACEMENT_GRID && placement != SR_PLACEMENT_REPLICATED) {
    return InternalError(sharder.Describe() + ": " + who + ": placement " + std::to_string(placement) +
                         " is neither GRID nor REPLICATED");
  }
  p.replicated = placement == SR_PLACEMENT_REPLICATED;
  if (std::string why = ValidatePlacement(p, table, topology); !why.empty()) {
    return InvalidArgumentError(sharder.Describe() + ": " + who + ": " + why);
  }
  return p;
}

}  // namespace shardrec
