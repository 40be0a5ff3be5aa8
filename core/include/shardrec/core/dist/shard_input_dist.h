// Input dist of the sharded modules, step one: every id of this rank's
// local batch goes to each shard that holds its row (one per column block
// of its row block), renamed to its row inside that shard, under the slot
// key of ShardLayout. The result is grouped by destination rank in layout
// order, ready for KjtAllToAll; on the receiving rank it is exactly the
// rank's lookup input. Ids outside their table follow the bounds-check
// mode: fatal is an error naming the feature, sample and table; otherwise
// they are dropped and counted (a mean still divides by the bag's full
// length, as the unsharded kernel does).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "shardrec/core/sharding/shard_layout.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"

namespace shardrec {

struct ShardedInput {
  KeyedJaggedTensor kjt;          // slot keys, grouped by destination rank
  std::vector<int64_t> splits;    // keys per destination (layout.slot_counts())
  std::vector<int64_t> origin;    // per value of kjt: its index in the input's values
  int64_t invalid = 0;            // ids dropped as out of range
};

// A table whose ids become rows only where they arrive (managed collision
// fused into the input dist: docs/managed_collision.md#sharded). The route
// rewrites the ids in place into what is sent (e.g. the input hash) and
// picks each one's row block; they are not bounds-checked, and the
// receiving rank must turn them into local rows before any lookup.
using IdRoute = std::function<void(std::span<int64_t> ids, int32_t* block)>;
// Per table of the plan; an empty route (or an empty vector): by row.
using IdRoutes = std::vector<IdRoute>;

// `input` holds layout.features() in order (data-parallel features are
// skipped). with_weights: send weights (the input's, or 1 where it has none).
// routes: tables routed before they are rows (null: none).
StatusOr<ShardedInput> RouteToShards(const ShardLayout& layout, const KeyedJaggedTensor& input, int32_t bounds_check,
                                     bool with_weights, const IdRoutes* routes = nullptr);

}  // namespace shardrec
