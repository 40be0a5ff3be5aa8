// Output dist for row-wise and table-row-wise shards: the seeds'
// PooledEmbeddingsReduceScatter. Every rank holds partial pooled sums of its
// row blocks for every rank's samples, [sum of batch_size_per_rank, D] in
// rank order; afterwards rank r holds the full sums of its own samples,
// [batch_size_per_rank[r], D]. The backward hands each rank the gradient of
// every sample (all-gather), since each partial sum fed the same output.
#pragma once

#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

StatusOr<Tensor> PooledReduceScatter(const ProcessGroup& group, const Tensor& partial_sums,
                                     const std::vector<int64_t>& batch_size_per_rank);

// `grad` is [batch_size_per_rank[rank], D]; returns [sum of batches, D].
StatusOr<Tensor> PooledReduceScatterBackward(const ProcessGroup& group, const Tensor& grad,
                                             const std::vector<int64_t>& batch_size_per_rank);

}  // namespace shardrec
