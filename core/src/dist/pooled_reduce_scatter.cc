// PooledReduceScatter and its backward (pooled_reduce_scatter.h): one
// reduce-scatter-v / all-gather-v each, counts = samples x D per rank.
#include "shardrec/core/dist/pooled_reduce_scatter.h"

#include <numeric>

#include <fmt/format.h>

#include "shardrec/core/qcomm/quantized_collectives.h"

namespace shardrec {

namespace {
StatusOr<std::vector<int64_t>> Counts(const ProcessGroup& g, const std::vector<int64_t>& batch, int64_t dim) {
  if (static_cast<int>(batch.size()) != g.world_size()) {
    return InvalidArgumentError(fmt::format("pooled reduce-scatter: {} batch sizes for a world of {}", batch.size(),
                                            g.world_size()));
  }
  std::vector<int64_t> counts;
  for (int64_t b : batch) {
    if (b < 0) return InvalidArgumentError("pooled reduce-scatter: a negative batch size");
    counts.push_back(b * dim);
  }
  return counts;
}
}  // namespace

StatusOr<Tensor> PooledReduceScatter(const ProcessGroup& g, const Tensor& partial, const std::vector<int64_t>& batch,
                                     const Codec* codec, int64_t* bytes) {
  if (partial.ndim() != 2) return InvalidArgumentError("pooled reduce-scatter: partial sums must be 2-D");
  const int64_t dim = partial.size(1);
  SR_ASSIGN_OR_RETURN(std::vector<int64_t> counts, Counts(g, batch, dim));
  const int64_t total = std::accumulate(batch.begin(), batch.end(), int64_t{0});
  if (partial.size(0) != total) {
    return InvalidArgumentError(fmt::format("pooled reduce-scatter: partial sums have {} rows, the batches sum to {}",
                                            partial.size(0), total));
  }
  Tensor out = Tensor::Empty(partial.dtype(), {batch[g.rank()], dim});
  if (codec == nullptr && partial.dtype().bits != 32) {
    SR_RETURN_IF_ERROR(g.ReduceScatterV(partial, &out, counts).WithContext("pooled reduce-scatter"));
    return out;
  }
  SR_ASSIGN_OR_RETURN(int64_t sent, QuantizedReduceScatter(g, codec, partial, batch, &out, "pooled reduce-scatter"));
  if (bytes != nullptr) *bytes += sent;
  return out;
}

StatusOr<Tensor> PooledReduceScatterBackward(const ProcessGroup& g, const Tensor& grad,
                                             const std::vector<int64_t>& batch, const Codec* codec, int64_t* bytes) {
  if (grad.ndim() != 2) return InvalidArgumentError("pooled reduce-scatter backward: grad must be 2-D");
  const int64_t dim = grad.size(1);
  SR_ASSIGN_OR_RETURN(std::vector<int64_t> counts, Counts(g, batch, dim));
  if (grad.size(0) != batch[g.rank()]) {
    return InvalidArgumentError(fmt::format("pooled reduce-scatter backward: rank {} has {} rows, expected {}",
                                            g.rank(), grad.size(0), batch[g.rank()]));
  }
  Tensor out = Tensor::Empty(grad.dtype(), {std::accumulate(batch.begin(), batch.end(), int64_t{0}), dim});
  if (codec == nullptr && grad.dtype().bits != 32) {
    SR_RETURN_IF_ERROR(g.AllGatherV(grad, &out, counts).WithContext("pooled reduce-scatter backward"));
    return out;
  }
  SR_ASSIGN_OR_RETURN(int64_t sent,
                      QuantizedAllGather(g, codec, grad, batch, &out, "pooled reduce-scatter backward"));
  if (bytes != nullptr) *bytes += sent;
  return out;
}

}  // namespace shardrec
