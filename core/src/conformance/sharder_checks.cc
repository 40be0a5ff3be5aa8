// Conformance checks for sharders: creation and option validation, the
// two-call shard_table protocol, and that every placement is valid — ranks
// inside the world, and either an exact tiling of the table (every cell owned
// once) or a replicated placement of whole tables — for an ordinary table and
// for a table with fewer rows than ranks.
#include <string>

#include "recorder.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/sharding/table_placement.h"

namespace shardrec::conformance {

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
    auto placed = PlaceTable(created.value(), t, topo);
    rec.ExpectOk(placed.status(), std::string("placement valid: ") + c.what);
  }
}

}  // namespace shardrec::conformance
