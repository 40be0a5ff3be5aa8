// Managed collision fused into the embedding's input dist
// (managed_collision_collection.h, docs/managed_collision.md#sharded):
// which rank manages which buckets when a table's rows are laid out by an
// embedding plan, and the round agreement both sharded ways share.
#pragma once

#include <string>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/managed_collision/managed_collision_config.h"
#include "shardrec/core/managed_collision/mch_module.h"
#include "shardrec/core/sharding/shard_layout.h"

namespace shardrec::mc {

// Per bucket of a managed table, the row block holding all its rows
// (managed and residual), or why there is none.
struct BucketPlacement {
  std::vector<int32_t> bucket_block;  // empty when the table cannot fuse
  std::string why;                    // when it cannot
};

// Fusing needs every row block of table `t` held whole by one rank (no
// column split, no replica, no sharder routing of its own), at most one
// block per rank, and every bucket's rows inside one block.
BucketPlacement PlaceBuckets(const ShardLayout& layout, int32_t t, const ManagedCollisionConfig& config);

// Stages ids[m] on *modules[m] (a due round planned, nothing applied),
// then, when any rank has a round due (*due is the same on every rank:
// rounds run at the same steps everywhere), every rank learns whether one
// failed, so that all apply or none does: on failure every module is as
// before and the error names the rank that failed. Both sharded ways use it.
Status StageTogether(const std::vector<MchManagedCollisionModule*>& modules,
                     const std::vector<std::vector<int64_t>>& ids, bool training, const ProcessGroup& group,
                     bool* due);

}  // namespace shardrec::mc
