// VariableBatchPooledAllToAll (variable_batch_all_to_all.h).
#include "shardrec/core/dist/variable_batch_all_to_all.h"

#include <numeric>

#include <fmt/format.h>

namespace shardrec {

StatusOr<VariableBatchSplits> VariableBatchPooledSplits(const int me,
                                                        const std::vector<std::vector<int64_t>>& dims,
                                                        const std::vector<std::vector<int64_t>>& batch_per_rank,
                                                        const std::vector<int64_t>& batch_pre_a2a) {
  const int world = static_cast<int>(dims.size());
  if (me < 0 || me >= world || static_cast<int>(batch_per_rank.size()) != world) {
    return InvalidArgumentError(fmt::format(
        "variable-batch all-to-all: {} dims lists and {} batch lists for rank {}; both need one per rank", world,
        batch_per_rank.size(), me));
  }
  VariableBatchSplits s;
  for (int dst = 0; dst < world; ++dst) {
    if (batch_per_rank[dst].size() != dims[me].size()) {
      return InvalidArgumentError(fmt::format("variable-batch all-to-all: rank {} lists {} batch sizes for rank {}, "
                                              "which needs one per local feature ({})",
                                              me, batch_per_rank[dst].size(), dst, dims[me].size()));
    }
    int64_t n = 0;
    for (size_t j = 0; j < dims[me].size(); ++j) n += batch_per_rank[dst][j] * dims[me][j];
    s.input.push_back(n);
  }
  size_t global = 0;
  for (int src = 0; src < world; ++src) {
    int64_t n = 0;
    for (size_t j = 0; j < dims[src].size(); ++j, ++global) {
      if (global >= batch_pre_a2a.size()) {
        return InvalidArgumentError("variable-batch all-to-all: batch_size_per_feature_pre_a2a is shorter than the "
                                    "features of all ranks");
      }
      n += batch_pre_a2a[global] * dims[src][j];
    }
    s.output.push_back(n);
  }
  if (global != batch_pre_a2a.size()) {
    return InvalidArgumentError(fmt::format("variable-batch all-to-all: {} pre-a2a batch sizes for {} features",
                                            batch_pre_a2a.size(), global));
  }
  return s;
}

StatusOr<Tensor> VariableBatchPooledAllToAll(const ProcessGroup& g, const Tensor& local,
                                             const std::vector<std::vector<int64_t>>& dims,
                                             const std::vector<std::vector<int64_t>>& batch_per_rank,
                                             const std::vector<int64_t>& batch_pre_a2a) {
  if (static_cast<int>(dims.size()) != g.world_size()) {
    return InvalidArgumentError(
        fmt::format("variable-batch all-to-all: {} dims lists for a world of {}", dims.size(), g.world_size()));
  }
  SR_ASSIGN_OR_RETURN(VariableBatchSplits s, VariableBatchPooledSplits(g.rank(), dims, batch_per_rank, batch_pre_a2a));
  const int64_t in = std::accumulate(s.input.begin(), s.input.end(), int64_t{0});
  if (local.numel() != in) {
    return InvalidArgumentError(fmt::format("variable-batch all-to-all: rank {} holds {} values, its splits need {}",
                                            g.rank(), local.numel(), in));
  }
  Tensor out = Tensor::Empty(local.dtype(), {std::accumulate(s.output.begin(), s.output.end(), int64_t{0})});
  SR_RETURN_IF_ERROR(g.AllToAllV(local, s.input, &out, s.output).WithContext("variable-batch pooled all-to-all"));
  return out;
}

}  // namespace shardrec
