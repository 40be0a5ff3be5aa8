// ManagedCollisionCollection (TorchRec's torchrec.modules.mc_modules.
// ManagedCollisionCollection): one MchManagedCollisionModule per managed
// table, applied to a KJT. Forward returns the same KJT with every managed
// feature's ids replaced by table rows; features of unmanaged tables pass
// unchanged (TorchRec requires every table to be managed; mixing is
// allowed here). A table's features are profiled together, as one step of
// its module. Either every table's step succeeds or nothing changes.
//
// ShardedManagedCollisionCollection is the same over a process group:
// each table's buckets are split over the ranks (rank r manages buckets
// [r*B/W, (r+1)*B/W)), every id travels to the rank of its bucket and its
// row comes back, so each rank manages its own slice of slots. With the
// same configs it gives exactly the unsharded collection's rows for the
// concatenation of every rank's batch.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/managed_collision/mch_module.h"
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
  static StatusOr<ShardedManagedCollisionCollection> Create(const PluginRegistry& registry, const ProcessGroup& group,
                                                            const std::vector<EmbeddingTableConfig>& tables,
                                                            const ManagedCollisionConfigs& managed);

  // Collective. input: this rank's batch of raw ids. via: the group to
  // send on (the same ranks, e.g. a pipeline's Duplicate()); null: the
  // collection's. Forward and Evict touch only the collection, never the
  // tables, so they may run on a pipeline's thread while another batch
  // trains.
  StatusOr<KeyedJaggedTensor> Forward(const KeyedJaggedTensor& input, bool training, const ProcessGroup* via = nullptr);
  // Collective: every rank's evictions since the last call, per table (the
  // same on every rank).
  StatusOr<std::map<std::string, std::vector<int64_t>>> Evict(const ProcessGroup* via = nullptr);
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
  StatusOr<const ProcessGroup*> GroupFor(const ProcessGroup* via) const;
  ShardedManagedCollisionCollection(const ProcessGroup& group, std::vector<MchManagedCollisionModule> modules,
                                    std::vector<Managed> managed)
      : group_(&group), modules_(std::move(modules)), managed_(std::move(managed)) {}

  const ProcessGroup* group_;
  std::vector<MchManagedCollisionModule> modules_;
  std::vector<Managed> managed_;
  bool round_pending_ = false;  // a round ran since the last Evict (the same on every rank)
};

}  // namespace shardrec
