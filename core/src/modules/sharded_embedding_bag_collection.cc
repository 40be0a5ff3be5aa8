// ShardedEmbeddingBagCollection (sharded_embedding_bag_collection.h).
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"

#include <chrono>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "lap.h"

#include "shardrec/core/dist/pooled_all_to_all.h"
#include "shardrec/core/dist/pooled_reduce_scatter.h"

namespace shardrec {

StatusOr<ShardedEmbeddingBagCollection> ShardedEmbeddingBagCollection::Create(const PluginRegistry& registry,
                                                                              const ProcessGroup& group,
                                                                              const ShardingPlan& plan,
                                                                              const EmbeddingModuleOptions& options,
                                                                              ShardedModuleOptions sharded) {
  for (const auto& t : plan.tables) {
    if (t.config.pooling == PoolingType::kNone) {
      return InvalidArgumentError("table '" + t.config.name +
                                  "' has pooling none: sequence tables belong in an EmbeddingCollection");
    }
  }
  SR_ASSIGN_OR_RETURN(ShardedTables tables, ShardedTables::Create(registry, group, plan, options, /*pooled=*/true));
  Path path = Path::kGeneric;
  if (sharded.fast_paths && tables.layout().all_table_wise()) path = Path::kTableWise;
  if (sharded.fast_paths && tables.layout().all_row_wise()) path = Path::kRowWise;
  return ShardedEmbeddingBagCollection(std::move(tables), path);
}

const char* ShardedEmbeddingBagCollection::output_dist() const {
  switch (path_) {
    case Path::kTableWise: return "table_wise";
    case Path::kRowWise: return "row_wise";
    case Path::kGeneric: break;
  }
  return "generic";
}

std::vector<int64_t> ShardedEmbeddingBagCollection::SlotColumns(int rank) const {
  std::vector<int64_t> cols;
  for (const auto& s : tables_.layout().slots(rank)) cols.push_back(s.col);
  return cols;
}

StatusOr<int64_t> ShardedEmbeddingBagCollection::BatchSize(const KeyedJaggedTensor& local) const {
  const auto& strides = local.stride_per_key();
  for (size_t f = 1; f < strides.size(); ++f) {
    if (strides[f] != strides[0]) {
      return InvalidArgumentError(fmt::format(
          "EmbeddingBagCollection needs one batch size for all features: '{}' has {} samples, '{}' has {}",
          local.keys()[0], strides[0], local.keys()[f], strides[f]));
    }
  }
  return strides.empty() ? 0 : strides[0];
}

StatusOr<Tensor> ShardedEmbeddingBagCollection::Lookup(const DistributedInput& in) const {
  const int me = tables_.group().rank();
  const int64_t global_batch = std::accumulate(batch_per_rank_.begin(), batch_per_rank_.end(), int64_t{0});
  Tensor pooled = Tensor::Empty(dtype::kFloat32, {global_batch, tables_.layout().lookup_width(me)});
  const auto cols = SlotColumns(me);
  SR_RETURN_IF_ERROR(tables_.shards().Forward(in.received, std::vector<int64_t>(cols.size(), 0), cols, pooled));
  return pooled;
}

Status ShardedEmbeddingBagCollection::PlaceOutput(const Tensor& pooled, Tensor& out) const {
  const ShardLayout& layout = tables_.layout();
  const ProcessGroup& group = tables_.group();
  const int world = group.world_size(), me = group.rank();
  const int64_t batch = out.size(0), width = out.size(1);
  float* dst = out.data<float>();
  const auto& features = layout.features();
  if (path_ == Path::kRowWise) {
    // Every rank's row block of every feature, summed: [batch, sharded width].
    SR_ASSIGN_OR_RETURN(Tensor summed, PooledReduceScatter(group, pooled, batch_per_rank_));
    const float* src = summed.data<float>();
    const int64_t w = layout.lookup_width(me);
    for (int64_t b = 0; b < batch; ++b) {
      for (const ShardSlot& s : layout.slots(me)) {
        const auto& f = features[static_cast<size_t>(s.feature)];
        std::memcpy(dst + b * width + f.output_col, src + b * w + s.col, static_cast<size_t>(f.dim) * sizeof(float));
      }
    }
  } else if (path_ == Path::kTableWise) {
    std::vector<int64_t> widths;
    for (int r = 0; r < world; ++r) widths.push_back(layout.lookup_width(r));
    SR_ASSIGN_OR_RETURN(Tensor gathered, PooledAllToAll(group, pooled, widths, batch_per_rank_));
    const float* src = gathered.data<float>();
    const int64_t w = gathered.size(1);
    for (int64_t b = 0; b < batch; ++b) {
      int64_t base = 0;
      for (int r = 0; r < world; ++r) {
        for (const ShardSlot& s : layout.slots(r)) {
          const auto& f = features[static_cast<size_t>(s.feature)];
          std::memcpy(dst + b * width + f.output_col, src + b * w + base + s.col,
                      static_cast<size_t>(f.dim) * sizeof(float));
        }
        base += widths[static_cast<size_t>(r)];
      }
    }
  } else {
    // Generic: rank d sends each rank its samples' rows; column blocks land
    // at their columns, row blocks add (in rank order).
    const int64_t mine = layout.lookup_width(me);
    std::vector<int64_t> send_counts, recv_counts;
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      send_counts.push_back(batch_per_rank_[static_cast<size_t>(r)] * mine);
      recv_counts.push_back(batch * layout.lookup_width(r));
      total += recv_counts.back();
    }
    Tensor recv = Tensor::Empty(dtype::kFloat32, {total});
    SR_RETURN_IF_ERROR(group.AllToAllV(pooled, send_counts, &recv, recv_counts).WithContext("pooled output dist"));
    const float* src = recv.data<float>();
    for (int r = 0; r < world; ++r) {
      const int64_t w = layout.lookup_width(r);
      for (int64_t b = 0; b < batch; ++b) {
        for (const ShardSlot& s : layout.slots(r)) {
          const sr_shard& shard = layout.shard(s);
          float* o = dst + b * width + features[static_cast<size_t>(s.feature)].output_col + shard.col_offset;
          const float* p = src + b * w + s.col;
          for (int64_t c = 0; c < shard.num_cols; ++c) o[c] += p[c];
        }
      }
      src += batch * w;
    }
  }
  // Mean pooling: divide by the bag's length over all row blocks.
  const auto& local = last_->local;
  for (size_t f = 0; f < features.size(); ++f) {
    const auto& config = layout.plan().tables[static_cast<size_t>(features[f].table)].config;
    if (config.pooling != PoolingType::kMean || layout.replicated(features[f].table)) continue;
    const int64_t first = local.BagOffset(static_cast<int>(f));
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = local.lengths()[static_cast<size_t>(first + b)];
      if (n <= 1) continue;
      float* o = dst + b * width + features[f].output_col;
      for (int64_t c = 0; c < features[f].dim; ++c) o[c] /= static_cast<float>(n);
    }
  }
  return Status::Ok();
}

StatusOr<KeyedTensor> ShardedEmbeddingBagCollection::Forward(const KeyedJaggedTensor& input, int64_t* invalid_ids) {
  Lap lap;
  last_.reset();
  SR_ASSIGN_OR_RETURN(DistributedInput in, tables_.DistributeInput(input));
  SR_ASSIGN_OR_RETURN(const int64_t batch, BatchSize(in.local));
  const ProcessGroup& group = tables_.group();
  auto batches = AllGatherValues(group, batch);
  if (!batches.ok()) return batches.status().WithContext("batch sizes");
  batch_per_rank_ = std::move(batches).value();
  times_.input_dist += lap();

  const ShardLayout& layout = tables_.layout();
  SR_ASSIGN_OR_RETURN(Tensor pooled, Lookup(in));
  Tensor out = Tensor::Zeros(dtype::kFloat32, {batch, layout.output_width()});
  int64_t invalid = in.invalid;
  if (!tables_.replica_features().empty()) {
    std::vector<int64_t> cols;
    for (int32_t f : tables_.replica_features()) cols.push_back(layout.features()[static_cast<size_t>(f)].output_col);
    SR_RETURN_IF_ERROR(tables_.replicas().Forward(in.replica_local, std::vector<int64_t>(cols.size(), 0), cols, out,
                                                  &invalid));
  }
  times_.lookup += lap();

  last_ = std::move(in);
  SR_RETURN_IF_ERROR(PlaceOutput(pooled, out));
  times_.output_dist += lap();
  if (invalid_ids != nullptr) *invalid_ids = invalid;
  std::vector<std::string> names;
  std::vector<int64_t> dims;
  for (const auto& f : layout.features()) {
    names.push_back(f.name);
    dims.push_back(f.dim);
  }
  return KeyedTensor::Create(std::move(names), std::move(dims), std::move(out));
}

StatusOr<Tensor> ShardedEmbeddingBagCollection::ReturnGradient(const Tensor& grad) const {
  const ShardLayout& layout = tables_.layout();
  const ProcessGroup& group = tables_.group();
  const int world = group.world_size(), me = group.rank();
  const int64_t batch = grad.size(0), width = grad.size(1);
  const auto& features = layout.features();
  // The mean's division, applied to the gradient of the sharded features.
  Tensor scaled = grad;
  const auto& local = last_->local;
  for (size_t f = 0; f < features.size(); ++f) {
    const auto& config = layout.plan().tables[static_cast<size_t>(features[f].table)].config;
    if (config.pooling != PoolingType::kMean || layout.replicated(features[f].table)) continue;
    if (scaled.raw_data() == grad.raw_data()) scaled = grad.Clone();
    const int64_t first = local.BagOffset(static_cast<int>(f));
    float* g = scaled.data<float>();
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = local.lengths()[static_cast<size_t>(first + b)];
      if (n <= 1) continue;
      for (int64_t c = 0; c < features[f].dim; ++c) g[b * width + features[f].output_col + c] /= static_cast<float>(n);
    }
  }
  const float* g = scaled.data<float>();
  const int64_t global_batch = std::accumulate(batch_per_rank_.begin(), batch_per_rank_.end(), int64_t{0});
  if (path_ == Path::kRowWise) {
    const int64_t w = layout.lookup_width(me);
    Tensor packed = Tensor::Empty(dtype::kFloat32, {batch, w});
    float* p = packed.data<float>();
    for (int64_t b = 0; b < batch; ++b) {
      for (const ShardSlot& s : layout.slots(me)) {
        const auto& f = features[static_cast<size_t>(s.feature)];
        std::memcpy(p + b * w + s.col, g + b * width + f.output_col, static_cast<size_t>(f.dim) * sizeof(float));
      }
    }
    return PooledReduceScatterBackward(group, packed, batch_per_rank_);
  }
  if (path_ == Path::kTableWise) {
    std::vector<int64_t> widths;
    int64_t w = 0;
    for (int r = 0; r < world; ++r) {
      widths.push_back(layout.lookup_width(r));
      w += widths.back();
    }
    Tensor packed = Tensor::Empty(dtype::kFloat32, {batch, w});
    float* p = packed.data<float>();
    for (int64_t b = 0; b < batch; ++b) {
      int64_t base = 0;
      for (int r = 0; r < world; ++r) {
        for (const ShardSlot& s : layout.slots(r)) {
          const auto& f = features[static_cast<size_t>(s.feature)];
          std::memcpy(p + b * w + base + s.col, g + b * width + f.output_col, static_cast<size_t>(f.dim) * sizeof(float));
        }
        base += widths[static_cast<size_t>(r)];
      }
    }
    return PooledAllToAllBackward(group, packed, widths, batch_per_rank_);
  }
  // Generic: each shard's owner gets its columns of every rank's samples.
  std::vector<int64_t> send_counts, recv_counts;
  int64_t send_total = 0;
  for (int r = 0; r < world; ++r) {
    send_counts.push_back(batch * layout.lookup_width(r));
    recv_counts.push_back(batch_per_rank_[static_cast<size_t>(r)] * layout.lookup_width(me));
    send_total += send_counts.back();
  }
  Tensor send = Tensor::Empty(dtype::kFloat32, {send_total});
  float* p = send.data<float>();
  for (int r = 0; r < world; ++r) {
    const int64_t w = layout.lookup_width(r);
    for (int64_t b = 0; b < batch; ++b) {
      for (const ShardSlot& s : layout.slots(r)) {
        const sr_shard& shard = layout.shard(s);
        std::memcpy(p + b * w + s.col, g + b * width + features[static_cast<size_t>(s.feature)].output_col + shard.col_offset,
                    static_cast<size_t>(shard.num_cols) * sizeof(float));
      }
    }
    p += batch * w;
  }
  Tensor recv = Tensor::Empty(dtype::kFloat32, {global_batch, layout.lookup_width(me)});
  SR_RETURN_IF_ERROR(group.AllToAllV(send, send_counts, &recv, recv_counts).WithContext("gradient dist"));
  return recv;
}

Status ShardedEmbeddingBagCollection::ReplicaBackward(const Tensor& grad, int64_t iteration,
                                                      double learning_rate) const {
  const auto& replica = tables_.replica_features();
  if (replica.empty()) return Status::Ok();
  const ShardLayout& layout = tables_.layout();
  const ProcessGroup& group = tables_.group();
  const int64_t batch = grad.size(0), width = grad.size(1);
  std::vector<int64_t> cols;
  int64_t w = 0;
  for (int32_t f : replica) {
    cols.push_back(w);
    w += layout.features()[static_cast<size_t>(f)].dim;
  }
  Tensor mine = Tensor::Empty(dtype::kFloat32, {batch, w});
  for (int64_t b = 0; b < batch; ++b) {
    for (size_t i = 0; i < replica.size(); ++i) {
      const auto& f = layout.features()[static_cast<size_t>(replica[i])];
      std::memcpy(mine.data<float>() + b * w + cols[i], grad.data<float>() + b * width + f.output_col,
                  static_cast<size_t>(f.dim) * sizeof(float));
    }
  }
  auto gathered = AllGatherRows(group, mine, batch_per_rank_);
  if (!gathered.ok()) return gathered.status().WithContext("data-parallel gradients");
  const Tensor& all = gathered.value();
  SR_ASSIGN_OR_RETURN(auto ids, tables_.GatherReplicaInput(last_->replica_local));
  return tables_.replicas().Backward(ids, std::vector<int64_t>(cols.size(), 0), cols, all, iteration, learning_rate);
}

Status ShardedEmbeddingBagCollection::Backward(const Tensor& grad, int64_t iteration, double learning_rate) {
  if (!last_) return FailedPreconditionError("Backward needs a Forward first (each Backward uses the last Forward's input)");
  Lap lap;
  const int64_t batch = last_->local.stride_per_key().empty() ? 0 : last_->local.stride_per_key()[0];
  SR_RETURN_IF_ERROR(ExpectTensor(grad, "gradient", dtype::kFloat32, 2));
  if (grad.size(0) != batch || grad.size(1) != tables_.layout().output_width()) {
    return InvalidArgumentError(fmt::format("gradient: expected shape [{}, {}] (batch, sum of dims), got {}", batch,
                                            tables_.layout().output_width(), ShapeString(grad.shape())));
  }
  if (tables_.layout().any_sharded()) {
    SR_ASSIGN_OR_RETURN(Tensor shard_grad, ReturnGradient(grad));
    const auto cols = SlotColumns(tables_.group().rank());
    SR_RETURN_IF_ERROR(tables_.shards().Backward(last_->received, std::vector<int64_t>(cols.size(), 0), cols,
                                                 shard_grad, iteration, learning_rate));
  }
  SR_RETURN_IF_ERROR(ReplicaBackward(grad, iteration, learning_rate));
  times_.backward += lap();
  ++times_.steps;
  return Status::Ok();
}

}  // namespace shardrec
