// Managed collision fused into the embedding's input dist
// (managed_collision_collection.h, docs/managed_collision.md#sharded):
// which rank manages which buckets when a table's rows are laid out by an
// embedding plan, and the round agreement both sharded ways share.
#pragma once

#include <string>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/managed_collision/managed_collision_config.h"
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

// Collective when any rank has a round due (`due` is the same on every
// rank: rounds run at the same steps everywhere): every rank learns
// whether one failed, so that all apply or none does. Returns `failed`,
// or an error naming the rank that failed.
Status AgreeOnRound(const ProcessGroup& group, bool due, Status failed);

// Whether this step of `module`'s table runs a round.
bool RoundDue(int64_t iteration, int64_t last_round, const ManagedCollisionConfig& config, bool training);

}  // namespace shardrec::mc
