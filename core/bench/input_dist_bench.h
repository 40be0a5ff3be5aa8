// The planner's input-dist figure (`shardrec bench topology`): the host
// work per id of the input dist, what the link's bandwidth does not cover:
// routing a batch's ids to their table's shard (RouteToShards) and the KJT
// all-to-all that delivers them (packing the sizes, lengths and ids, and
// unpacking them on arrival), over a one-rank local group so that no time
// on a link is in it. One id is sent and received once, so the figure is a
// sender's and a receiver's work together (the cost model splits it).
#pragma once

#include <cstdint>

#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/status.h"

namespace shardrec::bench {

struct InputDistBenchConfig {
  int64_t batch = 2048;     // samples
  int64_t pooling = 8;      // ids per sample
  int64_t rows = 1 << 18;   // the table's rows (ids uniform over them)
  double min_time = 0.2;    // seconds per measurement
  int reps = 3;
};

struct InputDistBenchResult {
  double seconds_per_id = 0;  // median of the measurements
  double best_seconds_per_id = 0;
  int64_t ids = 0;            // per measured batch
};

StatusOr<InputDistBenchResult> RunInputDistBench(const PluginRegistry& registry, const InputDistBenchConfig& config);

}  // namespace shardrec::bench
