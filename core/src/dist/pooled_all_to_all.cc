// PooledAllToAll and its backward (pooled_all_to_all.h). Rank r's rows of
// the local [B_global, D_local] tensor are contiguous, so they are sent as
// they are; the receiver interleaves the sources' column blocks.
#include "shardrec/core/dist/pooled_all_to_all.h"

#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "shardrec/core/qcomm/quantized_collectives.h"

namespace shardrec {

namespace {

struct Layout {
  std::vector<int64_t> batch, dims, batch_at, dim_at;
  int64_t global_batch = 0, total_dim = 0;
};

StatusOr<Layout> MakeLayout(const ProcessGroup& g, const std::vector<int64_t>& dims, std::vector<int64_t> batch,
                            int64_t global_batch_hint) {
  const int world = g.world_size();
  if (static_cast<int>(dims.size()) != world) {
    return InvalidArgumentError(fmt::format("pooled all-to-all: {} dims for a world of {}", dims.size(), world));
  }
  if (batch.empty()) {
    if (global_batch_hint % world != 0) {
      return InvalidArgumentError(fmt::format(
          "pooled all-to-all: a global batch of {} does not split evenly over {} ranks; give batch_size_per_rank",
          global_batch_hint, world));
    }
    batch.assign(world, global_batch_hint / world);
  }
  if (static_cast<int>(batch.size()) != world) {
    return InvalidArgumentError(fmt::format("pooled all-to-all: {} batch sizes for a world of {}", batch.size(), world));
  }
  Layout l;
  l.batch = std::move(batch);
  l.dims = dims;
  l.batch_at.assign(world + 1, 0);
  l.dim_at.assign(world + 1, 0);
  for (int r = 0; r < world; ++r) {
    if (l.batch[r] < 0 || l.dims[r] < 0) return InvalidArgumentError("pooled all-to-all: negative batch or dim");
    l.batch_at[r + 1] = l.batch_at[r] + l.batch[r];
    l.dim_at[r + 1] = l.dim_at[r] + l.dims[r];
  }
  l.global_batch = l.batch_at[world];
  l.total_dim = l.dim_at[world];
  return l;
}

}  // namespace

StatusOr<Tensor> PooledAllToAll(const ProcessGroup& g, const Tensor& local, const std::vector<int64_t>& dims,
                                std::vector<int64_t> batch, const Codec* codec, int64_t* bytes) {
  if (local.ndim() != 2) {
    return InvalidArgumentError("pooled all-to-all: local embeddings must be [global batch, local dims], got " +
                                ShapeString(local.shape()));
  }
  SR_ASSIGN_OR_RETURN(Layout l, MakeLayout(g, dims, std::move(batch), local.size(0)));
  const int world = g.world_size(), me = g.rank();
  if (local.size(0) != l.global_batch || local.size(1) != l.dims[me]) {
    return InvalidArgumentError(fmt::format("pooled all-to-all: rank {} holds {} but the layout says [{}, {}]", me,
                                            ShapeString(local.shape()), l.global_batch, l.dims[me]));
  }
  const int64_t received = l.batch[me] * l.total_dim;
  Tensor flat = Tensor::Empty(local.dtype(), {received});
  if (codec == nullptr && local.dtype().bits != 32) {
    // Not float32 (a caller's own tensors): the elements as they are.
    std::vector<int64_t> send(world), recv(world);
    for (int r = 0; r < world; ++r) {
      send[r] = l.batch[r] * l.dims[me];
      recv[r] = l.batch[me] * l.dims[r];
    }
    SR_RETURN_IF_ERROR(g.AllToAllV(local, send, &flat, recv).WithContext("pooled all-to-all"));
  } else {
    std::vector<FloatBlock> send(world), recv(world);
    for (int r = 0; r < world; ++r) {
      send[r] = {l.batch[r], l.dims[me]};
      recv[r] = {l.batch[me], l.dims[r]};
    }
    SR_ASSIGN_OR_RETURN(int64_t sent, QuantizedAllToAll(g, codec, local, send, &flat, recv, "pooled all-to-all"));
    if (bytes != nullptr) *bytes += sent;
  }
  // Source s's block is [B_me, D_s]; it becomes columns [dim_at[s], dim_at[s+1]).
  Tensor out = Tensor::Empty(local.dtype(), {l.batch[me], l.total_dim});
  const size_t es = DTypeSize(local.dtype());
  const char* src = static_cast<const char*>(flat.raw_data());
  char* dst = static_cast<char*>(out.raw_data());
  int64_t at = 0;
  for (int s = 0; s < world; ++s) {
    for (int64_t b = 0; b < l.batch[me]; ++b) {
      std::memcpy(dst + (b * l.total_dim + l.dim_at[s]) * es, src + (at + b * l.dims[s]) * es, l.dims[s] * es);
    }
    at += l.batch[me] * l.dims[s];
  }
  return out;
}

StatusOr<Tensor> PooledAllToAllBackward(const ProcessGroup& g, const Tensor& grad, const std::vector<int64_t>& dims,
                                        const std::vector<int64_t>& batch, const Codec* codec, int64_t* bytes) {
  if (grad.ndim() != 2) return InvalidArgumentError("pooled all-to-all backward: grad must be 2-D");
  SR_ASSIGN_OR_RETURN(Layout l, MakeLayout(g, dims, batch, grad.size(0) * g.world_size()));
  const int world = g.world_size(), me = g.rank();
  if (grad.size(0) != l.batch[me] || grad.size(1) != l.total_dim) {
    return InvalidArgumentError(fmt::format("pooled all-to-all backward: rank {} holds {} but the layout says [{}, {}]",
                                            me, ShapeString(grad.shape()), l.batch[me], l.total_dim));
  }
  // Regroup columns by owner: [D_s blocks of B_me rows], then send block s to s.
  const size_t es = DTypeSize(grad.dtype());
  Tensor regrouped = Tensor::Empty(grad.dtype(), {l.batch[me] * l.total_dim});
  const char* src = static_cast<const char*>(grad.raw_data());
  char* dst = static_cast<char*>(regrouped.raw_data());
  int64_t at = 0;
  std::vector<FloatBlock> send(world), recv(world);
  for (int s = 0; s < world; ++s) {
    for (int64_t b = 0; b < l.batch[me]; ++b) {
      std::memcpy(dst + (at + b * l.dims[s]) * es, src + (b * l.total_dim + l.dim_at[s]) * es, l.dims[s] * es);
    }
    at += l.batch[me] * l.dims[s];
    send[s] = {l.batch[me], l.dims[s]};
    recv[s] = {l.batch[s], l.dims[me]};
  }
  Tensor out = Tensor::Empty(grad.dtype(), {l.global_batch, l.dims[me]});
  if (codec == nullptr && grad.dtype().bits != 32) {
    std::vector<int64_t> send_counts, recv_counts;
    for (int s = 0; s < world; ++s) {
      send_counts.push_back(send[s].numel());
      recv_counts.push_back(recv[s].numel());
    }
    SR_RETURN_IF_ERROR(g.AllToAllV(regrouped, send_counts, &out, recv_counts).WithContext("pooled all-to-all backward"));
    return out;
  }
  SR_ASSIGN_OR_RETURN(int64_t sent,
                      QuantizedAllToAll(g, codec, regrouped, send, &out, recv, "pooled all-to-all backward"));
  if (bytes != nullptr) *bytes += sent;
  return out;
}

}  // namespace shardrec
