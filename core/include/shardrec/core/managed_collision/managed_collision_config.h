// One table's managed-collision settings (TorchRec's MCHManagedCollisionModule
// arguments plus the eviction policy), parsed from the tables file or from
// `--managed-collision TABLE:zch_size=...,policy=lru,eviction_interval=...`.
//
// Rows of a managed table: [0, zch_size) are the managed slots, split into
// `buckets` equal ranges (ids are assigned to a bucket by hash; each bucket
// keeps its own slots, default row and eviction round); [zch_size,
// zch_size + mch_size) is the optional residual range that ids with no slot
// hash into. Without a residual range an id with no slot reads its bucket's
// default row, the last row of the bucket, which is never evicted.
// Buckets are what sharded managed collision distributes over ranks: a
// run with B buckets gives the same slots on any world size dividing B.
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/core/plugin_options.h"
#include "shardrec/core/status.h"

namespace shardrec {

enum class IdHash { kNone, kFmix64 };
enum class ThresholdFilter { kNone, kAverage, kDynamic };
// How an eviction round finds the residents to evict (docs/managed_collision.md).
// kFast: for a policy that declares `incremental` (lru, lfu; no select, no
// metadata columns), each round
// touches only the slots the window saw and the residents it evicts, kept
// in a heap; the same admissions as kExact but for ties among residents.
// Other policies run the exact round. kExact: every round scores and ranks
// every slot and candidate (TorchRec's rule, its tie order included).
enum class EvictionMode { kFast, kExact };

struct ManagedCollisionConfig {
  int64_t zch_size = 0;           // managed slots (rows), > 0
  int64_t eviction_interval = 1;  // training steps between eviction rounds, > 0
  // preprocess: ids -> hash(id) mod input_hash_size (TorchRec's input_hash_func).
  IdHash input_hash = IdHash::kNone;
  int64_t input_hash_size = INT64_MAX;  // TorchRec's default 2^63, less one
  int64_t mch_size = 0;                 // residual rows (TorchRec's mch_size), >= 0
  int64_t buckets = 1;                  // independent slot ranges, 1 <= buckets <= zch_size / 2
  std::string policy = "lru";           // an eviction component: name or path/to/lib.so[:name]
  OptionList policy_options;            // e.g. decay_exponent=2
  ThresholdFilter threshold = ThresholdFilter::kNone;
  double threshold_skew_multiplier = 10.0;  // the dynamic filter's multiplier
  EvictionMode eviction_mode = EvictionMode::kFast;

  int64_t num_rows() const { return zch_size + mch_size; }
};

// Checks the numbers (names the table and the field).
Status ValidateManagedCollision(const std::string& table, const ManagedCollisionConfig& config);

// "zch_size=1000,eviction_interval=10,policy=lfu,decay_exponent=2,...".
// Keys: zch_size, eviction_interval, input_hash (none|fmix64),
// input_hash_size, mch_size, buckets, policy, threshold (none|average|
// dynamic), threshold_skew_multiplier, eviction_mode (fast|exact); any other key is handed to the
// policy as an option. Unknown policy options are refused by the policy.
// table_rows > 0: zch_size may be left out and defaults to table_rows - mch_size.
StatusOr<ManagedCollisionConfig> ParseManagedCollision(const std::string& table, const std::string& spec,
                                                       int64_t table_rows = 0);
// The same settings as a one-line spec (ParseManagedCollision's inverse).
std::string ManagedCollisionSpec(const ManagedCollisionConfig& config);

const char* IdHashName(IdHash h);
const char* ThresholdFilterName(ThresholdFilter f);
const char* EvictionModeName(EvictionMode m);

}  // namespace shardrec
