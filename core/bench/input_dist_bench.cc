// The input dist's host work per id (input_dist_bench.h).
#include "input_dist_bench.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include <unistd.h>

#include "shardrec/abi/kernel.h"
#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/dist/kjt_all_to_all.h"
#include "shardrec/core/dist/shard_input_dist.h"
#include "shardrec/core/sharding/shard_layout.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/sdk/init.hpp"

namespace shardrec::bench {

StatusOr<InputDistBenchResult> RunInputDistBench(const PluginRegistry& registry, const InputDistBenchConfig& c) {
  if (c.batch <= 0 || c.pooling <= 0 || c.rows <= 0 || !(c.min_time > 0) || c.reps <= 0) {
    return InvalidArgumentError("input dist bench: batch, pooling, rows, min_time and reps must be positive");
  }
  EmbeddingTableConfig table;
  table.name = "t0";
  table.feature_names = {"f0"};
  table.num_embeddings = c.rows;
  table.embedding_dim = 16;
  PlanRequest request;
  request.tables = {table};
  SR_ASSIGN_OR_RETURN(ShardingPlan plan, MakePlan(registry, request));
  SR_ASSIGN_OR_RETURN(ShardLayout layout, ShardLayout::Create(registry, std::move(plan)));
  ProcessGroupConfig pc;
  pc.comm = "local";
  pc.rendezvous = "local:bench-input-dist-" + std::to_string(::getpid());
  pc.prefix = "input-dist";
  SR_ASSIGN_OR_RETURN(ProcessGroup group, ProcessGroup::Create(registry, pc));

  std::vector<int64_t> ids(static_cast<size_t>(c.batch * c.pooling)), lengths(static_cast<size_t>(c.batch), c.pooling);
  for (size_t i = 0; i < ids.size(); ++i) {
    ids[i] = static_cast<int64_t>(sdk::Mix64(i + 1) % static_cast<uint64_t>(c.rows));
  }
  SR_ASSIGN_OR_RETURN(KeyedJaggedTensor batch,
                      KeyedJaggedTensor::FromLengths({"f0"}, std::move(ids), std::move(lengths), std::nullopt));
  auto once = [&]() -> Status {
    SR_ASSIGN_OR_RETURN(ShardedInput routed, RouteToShards(layout, batch, SR_BOUNDS_CHECK_FATAL, false));
    SR_ASSIGN_OR_RETURN(KeyedJaggedTensor received, KjtAllToAll(group, routed.kjt, routed.splits));
    if (received.values().size() != batch.values().size()) {
      return InternalError("input dist bench: the ids did not all arrive");
    }
    return Status::Ok();
  };
  SR_RETURN_IF_ERROR(once());  // warm: allocations and first touches
  std::vector<double> per_id;
  for (int r = 0; r < c.reps; ++r) {
    int64_t n = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      SR_RETURN_IF_ERROR(once());
      ++n;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < c.min_time);
    per_id.push_back(elapsed / static_cast<double>(n * c.batch * c.pooling));
  }
  std::sort(per_id.begin(), per_id.end());
  InputDistBenchResult result;
  result.seconds_per_id = per_id[per_id.size() / 2];
  result.best_seconds_per_id = per_id.front();
  result.ids = c.batch * c.pooling;
  return result;
}

}  // namespace shardrec::bench
