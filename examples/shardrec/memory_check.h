// What a command's tables will take in this process, for the check against
// the machine's memory (or --max-memory) made before anything is allocated
// (shardrec/core/resources/memory.h).
#pragma once

#include <cstdint>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/sharding/sharding_plan.h"

namespace shardrec::cli {

// Weights and `optimizer`'s state (SR_OPTIMIZER_*) of unsharded `tables`.
// Saturates at INT64_MAX.
int64_t UnshardedTableBytes(const std::vector<EmbeddingTableConfig>& tables, int32_t optimizer);

// The bytes `plan` puts in this process: every rank's when the ranks are
// threads of it (the local backend), only `group`'s rank's otherwise (each
// rank process checks its own, against what is left when it starts).
int64_t PlanBytesInThisProcess(const ShardingPlan& plan, const ProcessGroup& group);

}  // namespace shardrec::cli
