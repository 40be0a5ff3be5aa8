// Conformance checks for sharders: creation and option validation, the
// two-call shard_table protocol, and that every placement is valid — ranks
// inside the world, and either an exact tiling of the table (every cell owned
// once) or a replicated placement of whole tables — for an ordinary table and
// for a table with fewer rows than ranks.
#include <string>
#include <vector>

#include "recorder.h"
#include "shardrec/core/plugin_objects.h"

namespace shardrec::conformance {
namespace {

struct Placement {
  std::vector<sr_shard> shards;
  int32_t placement = -1;
};

StatusOr<Placement> ShardTable(const Sharder& s, const sr_table_desc& t, const sr_topology& topo) {
  Placement p;
  size_t needed = 0;
  sr_shard_table_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_shard_table_args, placement);
  a.table = &t;
  a.topology = &topo;
  a.num_shards = &needed;
  a.placement = &p.placement;
  SR_RETURN_IF_ERROR(s.ShardTable(a));  // size query
  p.shards.assign(needed, sr_shard{});
  a.shards = p.shards.data();
  a.shards_capacity = needed;
  size_t again = 0;
  a.num_shards = &again;
  SR_RETURN_IF_ERROR(s.ShardTable(a));
  if (again != needed) {
    return InternalError("the size query said " + std::to_string(needed) +
                         " shards, the second call " + std::to_string(again));
  }
  return p;
}

// Empty when valid, else why not.
std::string Validate(const Placement& p, const sr_table_desc& t, const sr_topology& topo) {
  if (p.shards.empty()) return "no shards";
  for (const sr_shard& s : p.shards) {
    if (s.rank < 0 || s.rank >= topo.world_size) {
      return "shard on rank " + std::to_string(s.rank) + " outside world " +
             std::to_string(topo.world_size);
    }
    if (s.row_offset < 0 || s.num_rows < 0 || s.col_offset < 0 || s.num_cols < 0 ||
        s.row_offset + s.num_rows > t.num_rows || s.col_offset + s.num_cols > t.num_cols) {
      return "shard rows [" + std::to_string(s.row_offset) + ", +" + std::to_string(s.num_rows) +
             ") cols [" + std::to_string(s.col_offset) + ", +" + std::to_string(s.num_cols) +
             ") falls outside the table";
    }
  }
  if (p.placement == SR_PLACEMENT_REPLICATED) {
    for (const sr_shard& s : p.shards) {
      if (s.num_rows != t.num_rows || s.num_cols != t.num_cols) return "a replica is not the whole table";
    }
    return {};
  }
  if (p.placement != SR_PLACEMENT_GRID) return "placement is neither GRID nor REPLICATED";
  std::vector<int> owners(static_cast<size_t>(t.num_rows * t.num_cols), 0);
  for (const sr_shard& s : p.shards) {
    for (int64_t r = s.row_offset; r < s.row_offset + s.num_rows; ++r) {
      for (int64_t c = s.col_offset; c < s.col_offset + s.num_cols; ++c) ++owners[r * t.num_cols + c];
    }
  }
  for (size_t i = 0; i < owners.size(); ++i) {
    if (owners[i] != 1) {
      return "cell (" + std::to_string(i / t.num_cols) + ", " + std::to_string(i % t.num_cols) +
             ") is owned by " + std::to_string(owners[i]) + " shards";
    }
  }
  return {};
}

}  // namespace

void CheckSharder(const ComponentRef& ref, const OptionList& options, Recorder& rec) {
  auto bad = Sharder::Create(ref, UnknownOption());
  rec.ExpectError(bad.status(), SR_INVALID_ARGUMENT, "create refuses an unknown option");
  auto created = Sharder::Create(ref, options);
  if (!rec.ExpectOk(created.status(), "create with the given options")) return;

  struct Case {
    const char* what;
    int64_t rows, cols;
    int32_t world;
  };
  for (const Case& c : {Case{"100x16 table on 3 ranks", 100, 16, 3},
                        Case{"2x8 table on 4 ranks (fewer rows than ranks)", 2, 8, 4}}) {
    sr_table_desc t{};
    t.struct_size = SR_STRUCT_SIZE(sr_table_desc, state_bytes_per_row);
    t.name = "conformance_table";
    t.num_rows = c.rows;
    t.num_cols = c.cols;
    t.weight_dtype = {kDLFloat, 32, 1};
    sr_topology topo{};
    topo.struct_size = SR_STRUCT_SIZE(sr_topology, memory_bytes_per_rank);
    topo.world_size = c.world;
    topo.ranks_per_host = c.world;
    topo.device_type = kDLCPU;
    auto placed = ShardTable(created.value(), t, topo);
    if (!rec.ExpectOk(placed.status(), std::string("shard_table: ") + c.what)) continue;
    const std::string why = Validate(placed.value(), t, topo);
    rec.Expect(why.empty(), std::string("placement valid: ") + c.what, why);
  }
}

}  // namespace shardrec::conformance
