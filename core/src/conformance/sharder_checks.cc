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
    const sr_table_desc t = MakeTableDesc("conformance_table", c.rows, c.cols);
    const sr_topology topo = MakeTopology(c.world, c.world);
    auto placed = PlaceTable(created.value(), t, topo);
    rec.ExpectOk(placed.status(), std::string("placement valid: ") + c.what);
  }
}

}  // namespace shardrec::conformance
