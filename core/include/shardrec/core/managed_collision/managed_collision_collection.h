// ManagedCollisionCollection (TorchRec's torchrec.modules.mc_modules.
// ManagedCollisionCollection): one MchManagedCollisionModule per managed
// table, applied to a KJT. Forward returns the same KJT with every managed
// feature's ids replaced by table rows; features of unmanaged tables pass
// unchanged (TorchRec requires every table to be managed; mixing is
// allowed here). A table's features are profiled together, as one step of
// its module. Either every table's step succeeds or nothing changes.
//
// ShardedManagedCollisionCollection is the same over a process group, in
// one of two ways per table (docs/managed_collision.md#sharded):
//   fused     where the embedding's plan puts each bucket's rows in one
//             row block held whole by one rank (table_wise; row_wise with
//             block edges on bucket edges), that rank manages the bucket:
//             raw ids ride the embedding's own input dist (routes()) and
//             become local rows where they arrive (RemapReceived), and
//             evicted rows are reset where they live. No collective of
//             its own but a round's agreement.
//   separate  otherwise: rank r manages buckets [r*B/W, (r+1)*B/W), every
//             id travels to the rank of its bucket and its row comes back
//             (Forward) before the embedding's input dist; evictions are
//             gathered to every rank (Evict).
// Either way, with the same configs it gives exactly the unsharded
// collection's rows for the concatenation of every rank's batch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/managed_collision/mch_module.h"
#include "shardrec/core/modules/sharded_tables.h"
#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"

namespace shardrec {

// Table name -> its managed-collision settings.
using ManagedCollisionConfigs = std::map<std::string, ManagedCollisionConfig>;

// The tables' own managed_collision specs (zch_size defaults to the rows).
StatusOr<ManagedCollisionConfigs> ManagedCollisionFromTables(const std::vector<EmbeddingTableConfig>& tables);

// Checks that every named table exists and has zch_size + mch_size rows.
Status ValidateManagedTables(const std::vector<EmbeddingTableConfig>& tables, const ManagedCollisionConfigs& managed);

class ManagedCollisionCollection {
 public:
  static StatusOr<ManagedCollisionCollection> Create(const PluginRegistry& registry,
                                                     const std::vector<EmbeddingTableConfig>& tables,
                                                     const ManagedCollisionConfigs& managed);

  // preprocess, profile (training only), remap.
  StatusOr<KeyedJaggedTensor> Forward(const KeyedJaggedTensor& input, bool training);
  // TorchRec's evict(): per table, the rows evicted since the last call
  // (tables with none are left out).
  std::map<std::string, std::vector<int64_t>> Evict();

  std::vector<MchManagedCollisionModule>& modules() { return modules_; }
  const std::vector<MchManagedCollisionModule>& modules() const { return modules_; }
  // Per table, in table order.
  std::map<std::string, ManagedCollisionStats> Stats() const;

 private:
  struct Managed {
    size_t module;
    std::vector<std::string> features;
  };
  explicit ManagedCollisionCollection(std::vector<MchManagedCollisionModule> modules, std::vector<Managed> managed)
      : modules_(std::move(modules)), managed_(std::move(managed)) {}

  std::vector<MchManagedCollisionModule> modules_;
  std::vector<Managed> managed_;
};

class ShardedManagedCollisionCollection {
 public:
  // layout: the embedding's; tables it lets fuse are fused. null: every
  // table separate.
  static StatusOr<ShardedManagedCollisionCollection> Create(const PluginRegistry& registry, const ProcessGroup& group,
                                                            const std::vector<EmbeddingTableConfig>& tables,
                                                            const ManagedCollisionConfigs& managed,
                                                            const ShardLayout* layout = nullptr);

  // Collective. input: this rank's batch of raw ids; the separate tables'
  // ids come back as rows, the fused tables' are left raw. via: the group
  // to send on (the same ranks, e.g. a pipeline's Duplicate()); null: the
  // collection's. Forward, RemapReceived and Evict touch only the
  // collection, never the tables, so they may run on a pipeline's thread
  // while another batch trains.
  StatusOr<KeyedJaggedTensor> Forward(const KeyedJaggedTensor& input, bool training, const ProcessGroup* via = nullptr);
  // The embedding's input dist routes for the fused tables (an id goes to
  // the row block of its bucket, input hash applied); empty when none is.
  const IdRoutes& routes() const { return routes_; }
  // After the embedding's DistributeInput(..., &routes()): profiles and
  // remaps this rank's buckets' ids in in.received into local rows of its
  // shards. Collective only at a step where a round is due (every rank
  // agrees before any applies).
  Status RemapReceived(DistributedInput& in, bool training, const ProcessGroup* via = nullptr);
  // Collective: the evictions since the last call, per table: a separate
  // table's from every rank (the same on every rank), a fused table's from
  // this rank's buckets only (rows of its own shard).
  StatusOr<std::map<std::string, std::vector<int64_t>>> Evict(const ProcessGroup* via = nullptr);
  // Per managed table: "fused", or "separate: " and why.
  const std::map<std::string, std::string>& dist() const { return dist_; }
  // Collective: the counters summed over ranks.
  StatusOr<std::map<std::string, ManagedCollisionStats>> Stats() const;

  // This rank's modules (its buckets of each table).
  const std::vector<MchManagedCollisionModule>& modules() const { return modules_; }
  std::vector<MchManagedCollisionModule>& modules() { return modules_; }
  const ProcessGroup& group() const { return *group_; }

 private:
  struct Managed {
    size_t module;
    std::vector<std::string> features;
    std::vector<int> bucket_rank;  // owner of each bucket
  };
  // A fused table on this rank: its slots' keys in the received KJT and
  // its shard's rows (every bucket it manages maps into them).
  struct Fused {
    size_t module;
    std::vector<size_t> keys;
    int64_t first_row = 0, num_rows = 0;
  };
  StatusOr<const ProcessGroup*> GroupFor(const ProcessGroup* via) const;
  ShardedManagedCollisionCollection(const ProcessGroup& group, std::vector<MchManagedCollisionModule> modules,
                                    std::vector<Managed> managed)
      : group_(&group), modules_(std::move(modules)), managed_(std::move(managed)) {}

  const ProcessGroup* group_;
  std::vector<MchManagedCollisionModule> modules_;
  std::vector<Managed> managed_;  // the separate tables
  std::vector<Fused> fused_;
  IdRoutes routes_;
  std::map<std::string, std::string> dist_;
  bool round_pending_ = false;  // a separate table's round ran since the last Evict (the same on every rank)
};

}  // namespace shardrec
