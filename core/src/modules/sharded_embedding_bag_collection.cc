// ShardedEmbeddingBagCollection (sharded_embedding_bag_collection.h).
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "lap.h"

#include "shardrec/core/dist/pooled_all_to_all.h"
#include "shardrec/core/dist/pooled_reduce_scatter.h"
#include "shardrec/core/qcomm/quantized_collectives.h"

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
  SR_ASSIGN_OR_RETURN(QCommCodecs codecs, QCommCodecs::Create(registry, sharded.qcomm, sharded.codec_options));
  return ShardedEmbeddingBagCollection(std::move(tables), path, std::move(codecs));
}

const Codec* ShardedEmbeddingBagCollection::ForwardCodec() const {
  return codecs_.forward(path_ == Path::kRowWise ? CommOp::kPooledReduceScatter : CommOp::kPooledAllToAll);
}

const Codec* ShardedEmbeddingBagCollection::BackwardCodec() const {
  return codecs_.backward(path_ == Path::kRowWise ? CommOp::kPooledReduceScatter : CommOp::kPooledAllToAll);
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

Status ShardedEmbeddingBagCollection::PlaceOutput(const Tensor& pooled, Tensor& out) {
  const ShardLayout& layout = tables_.layout();
  const ProcessGroup& group = tables_.group();
  const int world = group.world_size(), me = group.rank();
  const int64_t batch = out.size(0), width = out.size(1);
  float* dst = out.data<float>();
  const auto& features = layout.features();
  if (path_ == Path::kRowWise) {
    // Every rank's row block of every feature, summed: [batch, sharded width].
    SR_ASSIGN_OR_RETURN(Tensor summed,
                        PooledReduceScatter(group, pooled, batch_per_rank_, ForwardCodec(), &times_.output_dist_bytes));
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
    SR_ASSIGN_OR_RETURN(Tensor gathered, PooledAllToAll(group, pooled, widths, batch_per_rank_, ForwardCodec(),
                                                        &times_.output_dist_bytes));
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
    std::vector<FloatBlock> send_blocks, recv_blocks;
    int64_t total = 0;
    for (int r = 0; r < world; ++r) {
      send_blocks.push_back({batch_per_rank_[static_cast<size_t>(r)], mine});
      recv_blocks.push_back({batch, layout.lookup_width(r)});
      total += recv_blocks.back().numel();
    }
    Tensor recv = Tensor::Empty(dtype::kFloat32, {total});
    SR_ASSIGN_OR_RETURN(int64_t sent, QuantizedAllToAll(group, ForwardCodec(), pooled, send_blocks, &recv, recv_blocks,
                                                        "pooled output dist"));
    times_.output_dist_bytes += sent;
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

StatusOr<DistributedInput> ShardedEmbeddingBagCollection::DistributeInput(const KeyedJaggedTensor& input,
                                                                          const ProcessGroup* via,
                                                                          const IdRoutes* routes) const {
  Lap lap;
  SR_ASSIGN_OR_RETURN(DistributedInput in, tables_.DistributeInput(input, via, routes));
  SR_ASSIGN_OR_RETURN(const int64_t batch, BatchSize(in.local));
  auto batches = AllGatherValues(via != nullptr ? *via : tables_.group(), batch);
  if (!batches.ok()) return batches.status().WithContext("batch sizes");
  in.batch_per_rank = std::move(batches).value();
  const auto input_at = input.offset_per_key();
  for (const auto& key : in.local.keys()) {
    in.input_value_at.push_back(input_at[static_cast<size_t>(input.KeyIndex(key))]);
  }
  in.input_values = input.values().size();
  in.seconds = lap();
  return in;
}

StatusOr<KeyedTensor> ShardedEmbeddingBagCollection::Forward(const KeyedJaggedTensor& input, int64_t* invalid_ids) {
  SR_ASSIGN_OR_RETURN(DistributedInput in, DistributeInput(input));
  return Forward(std::move(in), invalid_ids);
}

StatusOr<KeyedTensor> ShardedEmbeddingBagCollection::Forward(DistributedInput in, int64_t* invalid_ids) {
  Lap lap;
  last_.reset();
  if (in.batch_per_rank.size() != static_cast<size_t>(tables_.group().world_size())) {
    return InvalidArgumentError("Forward: the input was not made by this module's DistributeInput");
  }
  if (in.rows_pending) {
    return FailedPreconditionError("Forward: the input holds routed ids that were never remapped to rows "
                                   "(managed collision's RemapReceived)");
  }
  SR_ASSIGN_OR_RETURN(const int64_t batch, BatchSize(in.local));
  batch_per_rank_ = in.batch_per_rank;
  times_.input_dist += in.seconds;
  times_.input_dist_bytes += in.bytes_sent;

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

StatusOr<Tensor> ShardedEmbeddingBagCollection::ReturnGradient(const Tensor& grad) {
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
    return PooledReduceScatterBackward(group, packed, batch_per_rank_, BackwardCodec(), &times_.output_dist_bytes);
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
    return PooledAllToAllBackward(group, packed, widths, batch_per_rank_, BackwardCodec(), &times_.output_dist_bytes);
  }
  // Generic: each shard's owner gets its columns of every rank's samples.
  std::vector<FloatBlock> send_blocks, recv_blocks;
  int64_t send_total = 0;
  for (int r = 0; r < world; ++r) {
    send_blocks.push_back({batch, layout.lookup_width(r)});
    recv_blocks.push_back({batch_per_rank_[static_cast<size_t>(r)], layout.lookup_width(me)});
    send_total += send_blocks.back().numel();
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
  SR_ASSIGN_OR_RETURN(int64_t sent,
                      QuantizedAllToAll(group, BackwardCodec(), send, send_blocks, &recv, recv_blocks, "gradient dist"));
  times_.output_dist_bytes += sent;
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

Status ShardedEmbeddingBagCollection::IdWeightGradient(const Tensor& grad, const Tensor* shard_grad,
                                                       std::vector<float>& local) const {
  const ShardLayout& layout = tables_.layout();
  const ProcessGroup& group = tables_.group();
  const int world = group.world_size(), me = group.rank();
  const DistributedInput& in = *last_;
  local.assign(in.local.values().size(), 0.0f);
  bool sharded_weighted = false;
  for (const auto& t : layout.plan().tables) sharded_weighted |= t.config.is_weighted && !t.placement.replicated;
  if (shard_grad != nullptr && sharded_weighted) {
    // Each received id's part, on the shard holding its row.
    const KeyedJaggedTensor& received = in.received;
    std::vector<float> part(received.values().size());
    const auto cols = SlotColumns(me);
    SR_RETURN_IF_ERROR(tables_.shards().IdWeightGradient(received, std::vector<int64_t>(cols.size(), 0), cols,
                                                         *shard_grad, part));
    // Back to each id's rank: source r's ids of every slot, slot by slot,
    // which is the order r sent them in.
    std::vector<int64_t> send_counts(static_cast<size_t>(world), 0), recv_counts(static_cast<size_t>(world), 0);
    std::vector<float> send;
    send.reserve(part.size());
    for (int r = 0; r < world; ++r) {
      int64_t before = 0;
      for (int q = 0; q < r; ++q) before += batch_per_rank_[static_cast<size_t>(q)];
      for (int k = 0; k < received.num_keys(); ++k) {
        const int64_t bag = received.BagOffset(k) + before;
        const int64_t from = received.offsets()[static_cast<size_t>(bag)];
        const int64_t to = received.offsets()[static_cast<size_t>(bag + batch_per_rank_[static_cast<size_t>(r)])];
        send.insert(send.end(), part.begin() + from, part.begin() + to);
        send_counts[static_cast<size_t>(r)] += to - from;
      }
    }
    const auto slots = layout.slot_counts();
    size_t key = 0;
    for (int d = 0; d < world; ++d) {
      for (int64_t k = 0; k < slots[static_cast<size_t>(d)]; ++k) recv_counts[static_cast<size_t>(d)] += in.sent_per_key[key++];
    }
    Tensor recv = Tensor::Empty(dtype::kFloat32, {static_cast<int64_t>(in.origin.size())});
    SR_RETURN_IF_ERROR(group.AllToAllV(Tensor::FromVector(send), send_counts, &recv, recv_counts)
                           .WithContext("id weight gradient dist"));
    // Column blocks of one row each sent a part: they add up.
    const float* got = recv.data<float>();
    for (size_t j = 0; j < in.origin.size(); ++j) local[static_cast<size_t>(in.origin[j])] += got[j];
  }
  if (!tables_.replica_features().empty()) {
    std::vector<int64_t> cols;
    for (int32_t f : tables_.replica_features()) cols.push_back(layout.features()[static_cast<size_t>(f)].output_col);
    std::vector<float> part(in.replica_local.values().size());
    SR_RETURN_IF_ERROR(tables_.replicas().IdWeightGradient(in.replica_local, std::vector<int64_t>(cols.size(), 0),
                                                           cols, grad, part));
    const auto from = in.replica_local.offset_per_key(), at = in.local.offset_per_key();
    for (int k = 0; k < in.replica_local.num_keys(); ++k) {
      const int index = in.local.KeyIndex(in.replica_local.keys()[static_cast<size_t>(k)]);
      std::copy(part.begin() + from[static_cast<size_t>(k)], part.begin() + from[static_cast<size_t>(k) + 1],
                local.begin() + at[static_cast<size_t>(index)]);
    }
  }
  return Status::Ok();
}

Status ShardedEmbeddingBagCollection::Backward(const Tensor& grad, int64_t iteration, double learning_rate) {
  return Backward(grad, iteration, learning_rate, nullptr);
}

Status ShardedEmbeddingBagCollection::Backward(const Tensor& grad, int64_t iteration, double learning_rate,
                                               std::vector<float>* id_weight_grad) {
  if (!last_) return FailedPreconditionError("Backward needs a Forward first (each Backward uses the last Forward's input)");
  Lap lap;
  const int64_t batch = last_->local.stride_per_key().empty() ? 0 : last_->local.stride_per_key()[0];
  SR_RETURN_IF_ERROR(ExpectTensor(grad, "gradient", dtype::kFloat32, 2));
  if (grad.size(0) != batch || grad.size(1) != tables_.layout().output_width()) {
    return InvalidArgumentError(fmt::format("gradient: expected shape [{}, {}] (batch, sum of dims), got {}", batch,
                                            tables_.layout().output_width(), ShapeString(grad.shape())));
  }
  std::optional<Tensor> shard_grad;
  if (tables_.layout().any_sharded()) {
    Lap dist;
    SR_ASSIGN_OR_RETURN(shard_grad, ReturnGradient(grad));
    times_.backward_dist += dist();
  }
  if (id_weight_grad != nullptr) {
    // Before any row changes.
    std::vector<float> local;
    SR_RETURN_IF_ERROR(IdWeightGradient(grad, shard_grad ? &*shard_grad : nullptr, local));
    id_weight_grad->assign(last_->input_values, 0.0f);
    const auto at = last_->local.offset_per_key();
    for (int k = 0; k < last_->local.num_keys(); ++k) {
      std::copy(local.begin() + at[static_cast<size_t>(k)], local.begin() + at[static_cast<size_t>(k) + 1],
                id_weight_grad->begin() + last_->input_value_at[static_cast<size_t>(k)]);
    }
  }
  if (shard_grad) {
    const auto cols = SlotColumns(tables_.group().rank());
    SR_RETURN_IF_ERROR(tables_.shards().Backward(last_->received, std::vector<int64_t>(cols.size(), 0), cols,
                                                 *shard_grad, iteration, learning_rate));
  }
  SR_RETURN_IF_ERROR(ReplicaBackward(grad, iteration, learning_rate));
  times_.backward += lap();
  ++times_.steps;
  return Status::Ok();
}

}  // namespace shardrec
