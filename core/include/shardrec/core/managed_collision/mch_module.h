// MchManagedCollisionModule (TorchRec's torchrec.modules.mc_modules.
// MCHManagedCollisionModule): maps raw int64 ids of any range onto the
// fixed rows of one table, admitting and evicting ids with an eviction-
// policy plugin. A training forward is TorchRec's profile then remap:
//
//   profile  counts every id of the step into the current window (per id:
//            accesses and last iteration); every eviction_interval steps
//            an eviction round runs, still before this step's remap;
//   round    per bucket: the window's ids, after the optional threshold
//            filter, update the metadata of the ids holding slots; the
//            others become candidates, ordered by window count (desc),
//            then id; the policy scores [slots in raw-id order ‖
//            candidates]; the slot holders and candidates with the
//            zch-capacity highest scores (ties: the earlier entry) keep or
//            get a slot, the best evicted slot going to the best admitted
//            candidate. Evicted rows are queued for a reset (TakeEvicted-
//            Rows), which the embedding module applies (weights and
//            optimizer state) through its kernel;
//   remap    an id holding a slot -> that row; any other id -> a row of
//            the residual (mch) range by hash, or its bucket's default row.
//
// New ids are therefore not admitted before the next round, as in
// TorchRec. docs/managed_collision.md has the rules, ties included, and
// where this differs from TorchRec. A failed step (e.g. the policy returns
// an error) changes nothing: the module is as before the call.
// Not thread-safe.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardrec/core/managed_collision/managed_collision_config.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec {

namespace mc {
class MchBucket;
struct RoundPlan;
}

// Counters since creation (or the last ResetStats); sums over buckets.
struct ManagedCollisionStats {
  int64_t lookups = 0;     // ids remapped
  int64_t hits = 0;        // ids that held a slot
  int64_t defaulted = 0;   // ids that read a default row
  int64_t residual = 0;    // ids hashed into the residual (mch) range
  int64_t admissions = 0;  // ids given a slot by an eviction round
  int64_t refusals = 0;    // candidates a round left out (threshold filter included)
  int64_t evictions = 0;   // ids that lost their slot
  int64_t rounds = 0;      // eviction rounds run (per bucket)
  int64_t occupied = 0;    // slots holding an id now
  int64_t capacity = 0;    // slots that can hold an id (zch_size less the default rows)

  double hit_rate() const { return lookups ? static_cast<double>(hits) / lookups : 0.0; }
  double default_rate() const { return lookups ? static_cast<double>(defaulted) / lookups : 0.0; }
  double occupancy() const { return capacity ? static_cast<double>(occupied) / capacity : 0.0; }
  ManagedCollisionStats& operator+=(const ManagedCollisionStats& o);
};

// A bucket range [first, last) of a table's buckets: the part one rank manages.
struct BucketRange {
  int64_t first = 0;
  int64_t last = -1;  // -1: every bucket
};

class MchManagedCollisionModule {
 public:
  // `config.policy` names a loaded eviction component (see
  // ResolveEvictionPolicies for paths). Errors name the table.
  static StatusOr<MchManagedCollisionModule> Create(const PluginRegistry& registry, std::string table,
                                                    ManagedCollisionConfig config, BucketRange buckets = {});
  MchManagedCollisionModule(MchManagedCollisionModule&&) noexcept;
  MchManagedCollisionModule& operator=(MchManagedCollisionModule&&) noexcept;
  ~MchManagedCollisionModule();

  // TorchRec's preprocess: the input hash, in place (no-op without one).
  void Preprocess(std::span<int64_t> ids) const;
  // The bucket of a preprocessed id.
  int64_t BucketOf(int64_t id) const;

  // profile (training only) then remap: `rows` gets one table row per id.
  // ids must be preprocessed and belong to this module's buckets.
  Status Forward(std::span<const int64_t> ids, std::span<int64_t> rows, bool training);
  // Forward in two phases, so that several modules (tables, ranks) fail
  // or succeed together: Stage records the ids and plans a due round
  // without changing what remap sees; then exactly one of Apply (commit
  // and remap the same ids) or Discard (undo the Stage).
  Status Stage(std::span<const int64_t> ids, bool training);
  void Apply(std::span<const int64_t> ids, std::span<int64_t> rows);
  void Discard();
  // TorchRec's evict(): rows whose id was evicted since the last call
  // (sorted, unique); the caller resets them in the embedding table.
  std::vector<int64_t> TakeEvictedRows();

  const std::string& table() const { return table_; }
  const ManagedCollisionConfig& config() const { return config_; }
  const BucketRange& buckets() const { return range_; }
  int64_t iteration() const { return iteration_; }
  int64_t last_round() const { return last_round_; }
  // Between Stage and Apply or Discard (a checkpoint then would save half a step).
  bool staged() const { return staged_; }
  // Whether rounds are incremental: eviction_mode=fast with a policy that
  // declares `incremental`, no metadata columns and no select; otherwise exact.
  bool incremental_rounds() const { return incremental_; }
  ManagedCollisionStats stats() const;
  // Every managed row of this module's buckets, in row order, with the id
  // holding it (default rows and empty slots hold none). For inspection.
  struct Slot {
    int64_t row;
    int64_t id;
    bool occupied;
  };
  std::vector<Slot> Slots() const;
  // Host bytes of the slot map, metadata and window.
  int64_t Bytes() const;

  // Checkpoints (docs/checkpoints.md). This module's buckets hold the
  // consecutive rows [FirstRow(), FirstRow() + NumRows()); ExportState
  // gives one row of StateWidth() int64 per table row there (occupied, id,
  // lifetime count, last access, window count, window last access, the
  // policy's metadata) and the window's candidates as (bucket, id, count,
  // last access) quadruples.
  int64_t StateWidth() const;
  int64_t FirstRow() const;
  int64_t NumRows() const;
  void ExportState(std::vector<int64_t>* rows, std::vector<int64_t>* candidates) const;
  // Replaces the state (rows as ExportState gives them; candidates of
  // other buckets are skipped) and the counters (`counters`' lookups ..
  // rounds; occupancy follows from the rows). Checked before anything
  // changes: a bad value is an error naming the table and the bucket.
  Status ImportState(std::span<const int64_t> rows, std::span<const int64_t> candidates, int64_t iteration,
                     int64_t last_round, const ManagedCollisionStats& counters);

 private:
  MchManagedCollisionModule(std::string table, ManagedCollisionConfig config, BucketRange range,
                            EvictionPolicy policy, int64_t metadata_columns, bool policy_incremental);
  // Groups ids by bucket into sorted_ids_ (identity for one bucket).
  Status Partition(std::span<const int64_t> ids);
  const int64_t* Grouped(std::span<const int64_t> ids) const;
  void FindSlots(std::span<const int64_t> ids);

  std::string table_;
  ManagedCollisionConfig config_;
  BucketRange range_;
  EvictionPolicy policy_;
  bool incremental_;
  std::vector<std::unique_ptr<mc::MchBucket>> buckets_;
  int64_t iteration_ = 0;
  int64_t last_round_ = 0;
  ManagedCollisionStats lookup_stats_;  // lookups/hits/defaulted/residual
  std::vector<int64_t> evicted_rows_;
  std::vector<uint64_t> sort_bits_;  // TakeEvictedRows' scratch
  std::vector<mc::RoundPlan> staged_plans_;  // one per bucket when a round is staged
  bool staged_ = false, staged_training_ = false, staged_round_ = false;
  // Scratch reused across steps (no allocation per step once warm).
  std::vector<int64_t> bucket_of_, order_, sorted_ids_, sorted_rows_, found_;
  std::vector<int64_t> candidate_of_;  // per grouped id: its window candidate, -1 with a slot (MchBucket::FindAndRecord)
  std::vector<int64_t> bucket_begin_;
};

// A module's Preprocess and BucketOf from its config alone: what a rank
// that manages none of a table's buckets needs to route its ids.
void PreprocessIds(const ManagedCollisionConfig& config, std::span<int64_t> ids);
int64_t BucketOfId(const ManagedCollisionConfig& config, int64_t id);

// Loads the libraries of policies given as paths ("dir/lib.so" or
// "dir/lib.so:component") and rewrites those configs' policy to the
// component's name. Names of loaded components pass through unchanged.
StatusOr<std::string> ResolveEvictionPolicy(PluginRegistry& registry, const std::string& policy);

}  // namespace shardrec
