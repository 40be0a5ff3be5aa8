// The sharded EmbeddingCollection (TorchRec's ShardedEmbeddingCollection):
// sequence embeddings (pooling none), the same tables and the same numbers
// as the unsharded EmbeddingCollection, with the tables split across the
// ranks of a process group by a ShardingPlan.
//
// A step, as data: each rank holds its local batch; the input dist sends
// every id to the shards holding its row, and one small all-to-all of
// counts tells each shard's owner how many of its ids came from each rank;
// each rank's kernels write one row per id (every rank's ids of a slot,
// source-major); the output dist (the sequence-embedding all-to-all) sends
// each id's row back to the id's rank, where it lands at the id's place in
// its feature's output and at the shard's columns. Forward returns, per
// feature, a JaggedTensor of values [N_f, D_f] with the input's lengths,
// exactly the unsharded module's output. Backward runs the path in reverse
// and applies the fused optimizer on each shard. Data-parallel tables are
// looked up locally; their backward gathers every rank's ids and gradient
// rows so every replica applies the same update (the replicas stay
// bit-identical). Per-feature batch sizes may differ.
//
// Forward and Backward are collective; a Backward uses the input of the
// Forward before it. Not thread-safe; the group must outlive the module.
#pragma once

#include <limits>
#include <map>
#include <optional>

#include "shardrec/core/modules/sharded_tables.h"
#include "shardrec/core/qcomm/qcomm_codecs.h"

namespace shardrec {

class ShardedEmbeddingCollection {
 public:
  // Every table's pooling is taken as none (as the unsharded module does).
  // sharded.qcomm: the sequence_embeddings_all_to_all codecs (forward:
  // the rows to each id's rank; backward: their gradients back).
  static StatusOr<ShardedEmbeddingCollection> Create(const PluginRegistry& registry, const ProcessGroup& group,
                                                     const ShardingPlan& plan, const EmbeddingModuleOptions& options,
                                                     const ShardedModuleOptions& sharded = {});

  // input: this rank's batch (every feature the tables serve; a key no
  // table serves is an error).
  StatusOr<std::map<std::string, JaggedTensor>> Forward(const KeyedJaggedTensor& input, int64_t* invalid_ids = nullptr);
  // grads: per feature, float32 [N_f, D_f] for the last Forward's output.
  Status Backward(const std::map<std::string, Tensor>& grads, int64_t iteration,
                  double learning_rate = std::numeric_limits<double>::quiet_NaN());

  const ShardedTables& tables() const { return tables_; }
  // Collective: a whole table as the unsharded module would hold it.
  StatusOr<TableContents> ReadTable(const std::string& name) const { return tables_.ReadTable(name); }
  const ShardedStepTimes& times() const { return times_; }

 private:
  ShardedEmbeddingCollection(ShardedTables tables, QCommCodecs codecs)
      : tables_(std::move(tables)), codecs_(std::move(codecs)) {}
  int64_t MaxSlotCols(int rank) const;
  Status ExchangeCounts(const DistributedInput& in);
  StatusOr<Tensor> Lookup(const DistributedInput& in) const;
  // Floats of rows per peer: held[r], this rank's shards' rows of r's ids;
  // sent[d], the rows of this rank's ids on d's shards.
  void ExchangeSizes(const DistributedInput& in, std::vector<int64_t>& held, std::vector<int64_t>& sent) const;
  Status PlaceOutput(const DistributedInput& in, const Tensor& rows, std::vector<Tensor>& out);  // counts bytes
  Status ReplicaForward(const DistributedInput& in, std::vector<Tensor>& out, int64_t* invalid) const;
  StatusOr<Tensor> ReturnGradient(const std::vector<const Tensor*>& grads);  // counts bytes
  Status ReplicaBackward(const std::vector<const Tensor*>& grads, int64_t iteration, double learning_rate) const;

  ShardedTables tables_;
  QCommCodecs codecs_;
  ShardedStepTimes times_;
  // The last Forward's, for Backward.
  std::optional<DistributedInput> last_;
  // counts_[k * world + src]: ids source rank src sent for this rank's slot k.
  std::vector<int64_t> counts_;
};

}  // namespace shardrec
