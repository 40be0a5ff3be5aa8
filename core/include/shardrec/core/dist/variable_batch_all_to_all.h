// The pooled output dist when every feature has its own batch size: the
// seeds' VariableBatchPooledEmbeddingsAllToAll (variable_batch_alltoall_pooled).
// Tensors are flat: this rank's pooled embeddings, for each destination in
// rank order and within it for each of this rank's features in order,
// batch x dim values. Rank r receives, from each source in rank order, the
// source's features for r's samples. The splits follow the seeds' formulas:
//   input_splits[dst]  = sum_j batch_size_per_rank_per_feature[dst][j] * dims[me][j]
//   output_splits[src] = sum_{j of src} batch_size_per_feature_pre_a2a[global j] * dims[src][j]
// where batch_size_per_feature_pre_a2a lists rank 0's features, then rank 1's...
#pragma once

#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

struct VariableBatchSplits {
  std::vector<int64_t> input, output;  // elements per peer
};

// The splits alone (for checking, and for the backward, which swaps them).
StatusOr<VariableBatchSplits> VariableBatchPooledSplits(
    int rank, const std::vector<std::vector<int64_t>>& emb_dim_per_rank_per_feature,
    const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
    const std::vector<int64_t>& batch_size_per_feature_pre_a2a);

StatusOr<Tensor> VariableBatchPooledAllToAll(const ProcessGroup& group, const Tensor& local_embeddings,
                                             const std::vector<std::vector<int64_t>>& emb_dim_per_rank_per_feature,
                                             const std::vector<std::vector<int64_t>>& batch_size_per_rank_per_feature,
                                             const std::vector<int64_t>& batch_size_per_feature_pre_a2a);

}  // namespace shardrec
