// ShardedEmbeddingCollection (sharded_embedding_collection.h).
//
// Row bookkeeping. On the owning rank, slot k's received ids are source-
// major (KjtAllToAll concatenates the sources' batches per key), so source
// src's rows of slot k start at offset_per_key[k] + sum_{s<src} n[k][s],
// where n comes from the count all-to-all. On the sending rank, the ids it
// sent are in send-key order (destination-major, slot order, sample order)
// and DistributedInput::origin maps each back to its place in the local
// batch; rows returning from a shard come back in that same order.
#include "shardrec/core/modules/sharded_embedding_collection.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include <fmt/format.h>

#include "lap.h"
#include "shardrec/core/qcomm/quantized_collectives.h"

namespace shardrec {

namespace {

// offset_per_key without its final total: where each key's rows start.
std::vector<int64_t> KeyRows(const KeyedJaggedTensor& kjt) {
  auto offsets = kjt.offset_per_key();
  offsets.pop_back();
  return offsets;
}
}  // namespace

StatusOr<ShardedEmbeddingCollection> ShardedEmbeddingCollection::Create(const PluginRegistry& registry,
                                                                        const ProcessGroup& group,
                                                                        const ShardingPlan& plan,
                                                                        const EmbeddingModuleOptions& options,
                                                                        const ShardedModuleOptions& sharded) {
  SR_ASSIGN_OR_RETURN(ShardedTables tables, ShardedTables::Create(registry, group, plan, options, /*pooled=*/false));
  SR_ASSIGN_OR_RETURN(QCommCodecs codecs, QCommCodecs::Create(registry, sharded.qcomm, sharded.codec_options));
  return ShardedEmbeddingCollection(std::move(tables), std::move(codecs));
}

int64_t ShardedEmbeddingCollection::MaxSlotCols(int rank) const {
  int64_t cols = 1;
  for (const ShardSlot& s : tables_.layout().slots(rank)) cols = std::max(cols, tables_.layout().shard(s).num_cols);
  return cols;
}

Status ShardedEmbeddingCollection::ExchangeCounts(const DistributedInput& in) {
  const ShardLayout& layout = tables_.layout();
  const ProcessGroup& group = tables_.group();
  const int world = group.world_size(), me = group.rank();
  const auto mine = static_cast<int64_t>(layout.slots(me).size());
  // sent_per_key is destination-major already: rank d's segment is its slots.
  std::vector<int64_t> send_counts, recv_counts(static_cast<size_t>(world), mine);
  for (int d = 0; d < world; ++d) send_counts.push_back(static_cast<int64_t>(layout.slots(d).size()));
  Tensor recv = Tensor::Empty(dtype::kInt64, {world * mine});
  SR_RETURN_IF_ERROR(group.AllToAllV(Tensor::FromVector(in.sent_per_key), send_counts, &recv, recv_counts)
                         .WithContext("sequence id counts"));
  const int64_t* n = recv.data<int64_t>();
  counts_.assign(static_cast<size_t>(world * mine), 0);
  for (int src = 0; src < world; ++src) {
    for (int64_t k = 0; k < mine; ++k) counts_[static_cast<size_t>(k * world + src)] = n[src * mine + k];
  }
  return Status::Ok();
}

StatusOr<Tensor> ShardedEmbeddingCollection::Lookup(const DistributedInput& in) const {
  const int me = tables_.group().rank();
  const auto rows = KeyRows(in.received);
  const auto nnz = static_cast<int64_t>(in.received.values().size());
  // Uninitialised: the kernels write each id's row in its shard's columns,
  // which is all the output dist sends.
  Tensor out = Tensor::Empty(dtype::kFloat32, {nnz, MaxSlotCols(me)});
  SR_RETURN_IF_ERROR(tables_.shards().Forward(in.received, rows, std::vector<int64_t>(rows.size(), 0), out));
  return out;
}

void ShardedEmbeddingCollection::ExchangeSizes(const DistributedInput& in, std::vector<int64_t>& held,
                                               std::vector<int64_t>& sent) const {
  const ShardLayout& layout = tables_.layout();
  const int world = tables_.group().world_size(), me = tables_.group().rank();
  held.assign(static_cast<size_t>(world), 0);
  sent.assign(static_cast<size_t>(world), 0);
  const auto& slots = layout.slots(me);
  for (size_t k = 0; k < slots.size(); ++k) {
    for (int r = 0; r < world; ++r) {
      held[static_cast<size_t>(r)] += counts_[k * static_cast<size_t>(world) + static_cast<size_t>(r)] * layout.shard(slots[k]).num_cols;
    }
  }
  size_t key = 0;
  for (int d = 0; d < world; ++d) {
    for (const ShardSlot& s : layout.slots(d)) sent[static_cast<size_t>(d)] += in.sent_per_key[key++] * layout.shard(s).num_cols;
  }
}

Status ShardedEmbeddingCollection::PlaceOutput(const DistributedInput& in, const Tensor& rows,
                                               std::vector<Tensor>& out) {
  const ShardLayout& layout = tables_.layout();
  const ProcessGroup& group = tables_.group();
  const int world = group.world_size(), me = group.rank();
  const auto& features = layout.features();
  const auto& slots = layout.slots(me);
  // Send: to each rank r, per slot in order, the rows of r's ids.
  std::vector<int64_t> send_counts, recv_counts;
  ExchangeSizes(in, send_counts, recv_counts);
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < world; ++r) {
    send_total += send_counts[static_cast<size_t>(r)];
    recv_total += recv_counts[static_cast<size_t>(r)];
  }
  Tensor send = Tensor::Empty(dtype::kFloat32, {send_total});
  float* p = send.data<float>();
  const float* src = rows.data<float>();
  const int64_t width = rows.size(1);
  std::vector<int64_t> cursor = KeyRows(in.received);
  for (int r = 0; r < world; ++r) {
    for (size_t k = 0; k < slots.size(); ++k) {
      const int64_t cols = layout.shard(slots[k]).num_cols;
      const int64_t n = counts_[k * static_cast<size_t>(world) + static_cast<size_t>(r)];
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(p, src + (cursor[k] + i) * width, static_cast<size_t>(cols) * sizeof(float));
        p += cols;
      }
      cursor[k] += n;
    }
  }
  Tensor recv = Tensor::Empty(dtype::kFloat32, {recv_total});
  // Per peer, one block per slot (their widths differ): what a per-row codec encodes.
  BlockParts send_parts(static_cast<size_t>(world)), recv_parts(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    for (size_t k = 0; k < slots.size(); ++k) {
      send_parts[static_cast<size_t>(r)].push_back(
          {counts_[k * static_cast<size_t>(world) + static_cast<size_t>(r)], layout.shard(slots[k]).num_cols});
    }
  }
  for (int d = 0, key = 0; d < world; ++d) {
    for (const ShardSlot& s : layout.slots(d)) {
      recv_parts[static_cast<size_t>(d)].push_back({in.sent_per_key[static_cast<size_t>(key++)], layout.shard(s).num_cols});
    }
  }
  SR_ASSIGN_OR_RETURN(int64_t sent, QuantizedAllToAll(group, codecs_.forward(CommOp::kSequenceAllToAll), send,
                                                      send_parts, &recv, recv_parts, "sequence output dist"));
  times_.output_dist_bytes += sent;
  // Receive: the rows of the ids this rank sent, in send order.
  const auto local_offsets = in.local.offset_per_key();
  const float* q = recv.data<float>();
  size_t key = 0, id = 0;
  for (int d = 0; d < world; ++d) {
    for (const ShardSlot& s : layout.slots(d)) {
      const sr_shard& shard = layout.shard(s);
      const auto f = static_cast<size_t>(s.feature);
      const int64_t dim = features[f].dim;
      float* o = out[f].data<float>();
      for (int64_t i = 0; i < in.sent_per_key[key]; ++i, ++id) {
        const int64_t row = in.origin[id] - local_offsets[f];
        std::memcpy(o + row * dim + shard.col_offset, q, static_cast<size_t>(shard.num_cols) * sizeof(float));
        q += shard.num_cols;
      }
      ++key;
    }
  }
  return Status::Ok();
}

Status ShardedEmbeddingCollection::ReplicaForward(const DistributedInput& in, std::vector<Tensor>& out,
                                                  int64_t* invalid) const {
  const auto& replica = tables_.replica_features();
  if (replica.empty()) return Status::Ok();
  const auto& features = tables_.layout().features();
  const KeyedJaggedTensor& ids = in.replica_local;
  int64_t width = 1;
  for (int32_t f : replica) width = std::max(width, features[static_cast<size_t>(f)].dim);
  const auto rows = KeyRows(ids);
  Tensor packed = Tensor::Empty(dtype::kFloat32, {static_cast<int64_t>(ids.values().size()), width});
  SR_RETURN_IF_ERROR(tables_.replicas().Forward(ids, rows, std::vector<int64_t>(rows.size(), 0), packed, invalid));
  const float* src = packed.data<float>();
  for (size_t j = 0; j < replica.size(); ++j) {
    const auto f = static_cast<size_t>(replica[j]);
    const int64_t dim = features[f].dim;
    float* dst = out[f].data<float>();
    for (int64_t i = 0; i < out[f].size(0); ++i) {
      std::memcpy(dst + i * dim, src + (rows[j] + i) * width, static_cast<size_t>(dim) * sizeof(float));
    }
  }
  return Status::Ok();
}

StatusOr<std::map<std::string, JaggedTensor>> ShardedEmbeddingCollection::Forward(const KeyedJaggedTensor& input,
                                                                                  int64_t* invalid_ids) {
  Lap lap;
  last_.reset();
  const ShardLayout& layout = tables_.layout();
  SR_ASSIGN_OR_RETURN(DistributedInput in, tables_.DistributeInput(input));
  if (layout.any_sharded()) SR_RETURN_IF_ERROR(ExchangeCounts(in));
  times_.input_dist += lap();

  const auto& features = layout.features();
  const auto lengths = in.local.length_per_key();
  std::vector<Tensor> out;
  for (size_t f = 0; f < features.size(); ++f) {
    // Zeros: an id dropped as out of range keeps a zero row, as unsharded.
    out.push_back(Tensor::Zeros(dtype::kFloat32, {lengths[f], features[f].dim}));
  }
  Tensor rows;
  if (layout.any_sharded()) {
    SR_ASSIGN_OR_RETURN(rows, Lookup(in));
  }
  int64_t invalid = in.invalid;
  SR_RETURN_IF_ERROR(ReplicaForward(in, out, &invalid));
  times_.lookup += lap();

  if (layout.any_sharded()) SR_RETURN_IF_ERROR(PlaceOutput(in, rows, out));
  times_.output_dist += lap();
  if (invalid_ids != nullptr) *invalid_ids = invalid;

  std::map<std::string, JaggedTensor> result;
  const auto& bags = in.local.lengths();
  for (size_t f = 0; f < features.size(); ++f) {
    JaggedTensor jt;
    jt.values = std::move(out[f]);
    jt.lengths.assign(bags.begin() + in.local.BagOffset(static_cast<int>(f)),
                      bags.begin() + in.local.BagOffset(static_cast<int>(f) + 1));
    result.emplace(features[f].name, std::move(jt));
  }
  last_ = std::move(in);
  return result;
}

StatusOr<Tensor> ShardedEmbeddingCollection::ReturnGradient(const std::vector<const Tensor*>& grads) {
  const DistributedInput& in = *last_;
  const ShardLayout& layout = tables_.layout();
  const ProcessGroup& group = tables_.group();
  const int world = group.world_size(), me = group.rank();
  const auto& features = layout.features();
  const auto& slots = layout.slots(me);
  // The output dist's counts, the other way.
  std::vector<int64_t> send_counts, recv_counts;
  ExchangeSizes(in, recv_counts, send_counts);
  int64_t send_total = 0, recv_total = 0;
  for (int r = 0; r < world; ++r) {
    send_total += send_counts[static_cast<size_t>(r)];
    recv_total += recv_counts[static_cast<size_t>(r)];
  }
  // Send: per destination, per slot, the gradient rows of the ids sent
  // there (send order), the shard's columns.
  Tensor send = Tensor::Empty(dtype::kFloat32, {send_total});
  float* p = send.data<float>();
  const auto local_offsets = in.local.offset_per_key();
  size_t key = 0, id = 0;
  for (int d = 0; d < world; ++d) {
    for (const ShardSlot& s : layout.slots(d)) {
      const sr_shard& shard = layout.shard(s);
      const auto f = static_cast<size_t>(s.feature);
      const int64_t dim = features[f].dim;
      const float* g = grads[f]->data<float>();
      for (int64_t i = 0; i < in.sent_per_key[key]; ++i, ++id) {
        const int64_t row = in.origin[id] - local_offsets[f];
        std::memcpy(p, g + row * dim + shard.col_offset, static_cast<size_t>(shard.num_cols) * sizeof(float));
        p += shard.num_cols;
      }
      ++key;
    }
  }
  Tensor recv = Tensor::Empty(dtype::kFloat32, {recv_total});
  BlockParts send_parts(static_cast<size_t>(world)), recv_parts(static_cast<size_t>(world));
  for (int d = 0, k = 0; d < world; ++d) {
    for (const ShardSlot& s : layout.slots(d)) {
      send_parts[static_cast<size_t>(d)].push_back({in.sent_per_key[static_cast<size_t>(k++)], layout.shard(s).num_cols});
    }
  }
  for (int src = 0; src < world; ++src) {
    for (size_t k = 0; k < slots.size(); ++k) {
      recv_parts[static_cast<size_t>(src)].push_back(
          {counts_[k * static_cast<size_t>(world) + static_cast<size_t>(src)], layout.shard(slots[k]).num_cols});
    }
  }
  SR_ASSIGN_OR_RETURN(int64_t sent, QuantizedAllToAll(group, codecs_.backward(CommOp::kSequenceAllToAll), send,
                                                      send_parts, &recv, recv_parts, "sequence gradient dist"));
  times_.output_dist_bytes += sent;
  // Receive: per source, per slot, at the rows the lookup wrote.
  const int64_t width = MaxSlotCols(me);
  Tensor packed = Tensor::Zeros(dtype::kFloat32, {static_cast<int64_t>(in.received.values().size()), width});
  float* dst = packed.data<float>();
  const float* q = recv.data<float>();
  std::vector<int64_t> cursor = KeyRows(in.received);
  for (int src = 0; src < world; ++src) {
    for (size_t k = 0; k < slots.size(); ++k) {
      const int64_t cols = layout.shard(slots[k]).num_cols;
      const int64_t n = counts_[k * static_cast<size_t>(world) + static_cast<size_t>(src)];
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(dst + (cursor[k] + i) * width, q, static_cast<size_t>(cols) * sizeof(float));
        q += cols;
      }
      cursor[k] += n;
    }
  }
  return packed;
}

Status ShardedEmbeddingCollection::ReplicaBackward(const std::vector<const Tensor*>& grads, int64_t iteration,
                                                   double learning_rate) const {
  const auto& replica = tables_.replica_features();
  if (replica.empty()) return Status::Ok();
  const auto& features = tables_.layout().features();
  const ProcessGroup& group = tables_.group();
  const int world = group.world_size();
  const auto nr = static_cast<int64_t>(replica.size());
  const KeyedJaggedTensor& local = last_->replica_local;
  // Every rank's ids per replica feature: [world, features].
  Tensor all_counts = Tensor::Empty(dtype::kInt64, {world * nr});
  SR_RETURN_IF_ERROR(group.AllGatherV(Tensor::FromVector(local.length_per_key()), &all_counts,
                                      std::vector<int64_t>(static_cast<size_t>(world), nr))
                         .WithContext("data-parallel id counts"));
  const int64_t* n = all_counts.data<int64_t>();
  // This rank's gradient rows, feature after feature; then every rank's.
  std::vector<float> mine;
  for (int32_t f : replica) {
    const Tensor& g = *grads[static_cast<size_t>(f)];
    mine.insert(mine.end(), g.data<float>(), g.data<float>() + g.numel());
  }
  std::vector<int64_t> counts(static_cast<size_t>(world), 0);
  int64_t total = 0;
  for (int r = 0; r < world; ++r) {
    for (int64_t j = 0; j < nr; ++j) {
      counts[static_cast<size_t>(r)] += n[r * nr + j] * features[static_cast<size_t>(replica[static_cast<size_t>(j)])].dim;
    }
    total += counts[static_cast<size_t>(r)];
  }
  Tensor all = Tensor::Empty(dtype::kFloat32, {total});
  SR_RETURN_IF_ERROR(group.AllGatherV(Tensor::FromVector(mine), &all, counts).WithContext("data-parallel gradients"));
  // The gathered ids are feature-major, ranks concatenated: pack to match.
  SR_ASSIGN_OR_RETURN(auto ids, tables_.GatherReplicaInput(local));
  int64_t width = 1;
  for (int32_t f : replica) width = std::max(width, features[static_cast<size_t>(f)].dim);
  const auto rows = KeyRows(ids);
  Tensor packed = Tensor::Empty(dtype::kFloat32, {static_cast<int64_t>(ids.values().size()), width});
  float* dst = packed.data<float>();
  std::vector<const float*> src(static_cast<size_t>(world));  // rank r's next feature block
  const float* base = all.data<float>();
  for (int r = 0; r < world; ++r) {
    src[static_cast<size_t>(r)] = base;
    base += counts[static_cast<size_t>(r)];
  }
  for (int64_t j = 0; j < nr; ++j) {
    const int64_t dim = features[static_cast<size_t>(replica[static_cast<size_t>(j)])].dim;
    int64_t row = rows[static_cast<size_t>(j)];
    for (int r = 0; r < world; ++r) {
      const int64_t m = n[r * nr + j];
      const float*& s = src[static_cast<size_t>(r)];
      for (int64_t i = 0; i < m; ++i, ++row) std::memcpy(dst + row * width, s + i * dim, static_cast<size_t>(dim) * sizeof(float));
      s += m * dim;
    }
  }
  return tables_.replicas().Backward(ids, rows, std::vector<int64_t>(rows.size(), 0), packed, iteration, learning_rate);
}

Status ShardedEmbeddingCollection::Backward(const std::map<std::string, Tensor>& grads, int64_t iteration,
                                            double learning_rate) {
  if (!last_) return FailedPreconditionError("Backward needs a Forward first (each Backward uses the last Forward's input)");
  Lap lap;
  const ShardLayout& layout = tables_.layout();
  const auto& features = layout.features();
  const auto lengths = last_->local.length_per_key();
  std::vector<const Tensor*> g(features.size(), nullptr);
  for (size_t f = 0; f < features.size(); ++f) {
    const auto& feature = features[f];
    const auto it = grads.find(feature.name);
    if (it == grads.end()) return Status(SR_NOT_FOUND, "no gradient for feature '" + feature.name + "'");
    const std::string what = "gradient of feature '" + feature.name + "'";
    SR_RETURN_IF_ERROR(ExpectTensor(it->second, what, dtype::kFloat32, 2));
    if (it->second.size(0) != lengths[f] || it->second.size(1) != feature.dim) {
      return InvalidArgumentError(fmt::format("{}: expected shape [{}, {}], got {}", what, lengths[f], feature.dim,
                                              ShapeString(it->second.shape())));
    }
    g[f] = &it->second;
  }
  if (layout.any_sharded()) {
    Lap dist;
    SR_ASSIGN_OR_RETURN(Tensor shard_grad, ReturnGradient(g));
    times_.backward_dist += dist();
    const auto rows = KeyRows(last_->received);
    SR_RETURN_IF_ERROR(tables_.shards().Backward(last_->received, rows, std::vector<int64_t>(rows.size(), 0), shard_grad,
                                                 iteration, learning_rate));
  }
  SR_RETURN_IF_ERROR(ReplicaBackward(g, iteration, learning_rate));
  times_.backward += lap();
  ++times_.steps;
  return Status::Ok();
}

}  // namespace shardrec
