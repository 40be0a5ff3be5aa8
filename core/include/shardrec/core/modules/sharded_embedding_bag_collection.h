// The sharded EmbeddingBagCollection (TorchRec's ShardedEmbeddingBagCollection):
// the same tables and the same numbers as the unsharded module, with the
// tables split across the ranks of a process group by a ShardingPlan.
//
// A step, as data (DESIGN.md): each rank holds its local batch; the input
// dist sends every id to the shards holding its row; each rank's kernels
// pool partial sums per (bag, shard) for every rank's samples; the output
// dist sends them back to the sample's rank, where column blocks land at
// their columns and row blocks add; mean pooling divides by the global bag
// length last. Forward returns [local batch, sum of dims], features in
// table order, exactly the unsharded module's layout. Backward runs the
// path in reverse and applies the fused optimizer on each shard.
// Data-parallel tables are looked up locally; their backward gathers every
// rank's ids and gradients so every replica applies the same update (the
// replicas stay bit-identical).
//
// One generic output dist serves every shard grid (one all-to-all, then
// place-and-add). Pure table-wise plans use the seeds' PooledEmbeddings-
// AllToAll and pure row-wise ones a reduce-scatter instead; both give the
// generic path's numbers (tested), and `fast_paths = false` turns them off.
//
// Forward and Backward are collective; a Backward uses the input of the
// Forward before it. Not thread-safe; the group must outlive the module.
#pragma once

#include <limits>

#include "shardrec/core/modules/sharded_tables.h"
#include "shardrec/core/qcomm/qcomm_codecs.h"
#include "shardrec/core/sparse/keyed_tensor.h"

namespace shardrec {

class ShardedEmbeddingBagCollection {
 public:
  static StatusOr<ShardedEmbeddingBagCollection> Create(const PluginRegistry& registry, const ProcessGroup& group,
                                                        const ShardingPlan& plan, const EmbeddingModuleOptions& options,
                                                        ShardedModuleOptions sharded = {});

  // input: this rank's batch (every feature the tables serve, one batch
  // size; a key no table serves is an error).
  StatusOr<KeyedTensor> Forward(const KeyedJaggedTensor& input, int64_t* invalid_ids = nullptr);
  // Forward in two halves, what a train pipeline overlaps: the input dist
  // (collective on `via`, a Duplicate() of the module's group, or on the
  // module's group when null; it reads only the layout, so it may run on a
  // second thread while this module looks up and updates another batch),
  // then the rest of Forward on its result. Forward(input) is exactly
  // Forward(DistributeInput(input)).
  // routes: see ShardedTables::DistributeInput; Forward refuses an input
  // whose routed ids were not made rows.
  StatusOr<DistributedInput> DistributeInput(const KeyedJaggedTensor& input, const ProcessGroup* via = nullptr,
                                             const IdRoutes* routes = nullptr) const;
  StatusOr<KeyedTensor> Forward(DistributedInput in, int64_t* invalid_ids = nullptr);
  // grad: float32 [local batch, sum of dims] for the last Forward's output.
  Status Backward(const Tensor& grad, int64_t iteration,
                  double learning_rate = std::numeric_limits<double>::quiet_NaN());
  // As Backward, and first the gradient with respect to every id's
  // per-sample weight (what a PositionWeightedModule trains): one float
  // per value of the last Forward's input, in its order; 0 for ids of
  // unweighted tables or of keys no table serves. Shards compute it where
  // the rows live, from the rows before this update (<row, dL/dpooled of
  // the bag>, column blocks' parts added), and send it back along the
  // input dist's path.
  Status Backward(const Tensor& grad, int64_t iteration, double learning_rate, std::vector<float>* id_weight_grad);

  const ShardedTables& tables() const { return tables_; }
  // Collective: a whole table as the unsharded module would hold it.
  StatusOr<TableContents> ReadTable(const std::string& name) const { return tables_.ReadTable(name); }
  const ShardedStepTimes& times() const { return times_; }
  // "table_wise", "row_wise" or "generic": the output dist in use.
  const char* output_dist() const;
  const QCommCodecs& codecs() const { return codecs_; }

 private:
  enum class Path { kGeneric, kTableWise, kRowWise };
  ShardedEmbeddingBagCollection(ShardedTables tables, Path path, QCommCodecs codecs)
      : tables_(std::move(tables)), path_(path), codecs_(std::move(codecs)) {}
  // The codecs of this module's output dist: the reduce-scatter's on the
  // row-wise path, the all-to-all's on the others.
  const Codec* ForwardCodec() const;
  const Codec* BackwardCodec() const;
  StatusOr<int64_t> BatchSize(const KeyedJaggedTensor& local) const;
  StatusOr<Tensor> Lookup(const DistributedInput& in) const;
  Status PlaceOutput(const Tensor& pooled, Tensor& out);  // counts the bytes it sends
  StatusOr<Tensor> ReturnGradient(const Tensor& grad);  // counts the bytes it sends
  Status ReplicaBackward(const Tensor& grad, int64_t iteration, double learning_rate) const;
  // Per id of last_->local: the sharded features' part (shard_grad: this
  // rank's shards' gradient, from ReturnGradient) and the replicas' part.
  Status IdWeightGradient(const Tensor& grad, const Tensor* shard_grad, std::vector<float>& local) const;
  std::vector<int64_t> SlotColumns(int rank) const;

  ShardedTables tables_;
  Path path_;
  QCommCodecs codecs_;
  ShardedStepTimes times_;
  // The last Forward's, for Backward.
  std::optional<DistributedInput> last_;
  std::vector<int64_t> batch_per_rank_;
};

}  // namespace shardrec
