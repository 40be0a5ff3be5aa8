// Output dist for row-wise and table-row-wise shards: the seeds'
// PooledEmbeddingsReduceScatter. Every rank holds partial pooled sums of its
// row blocks for every rank's samples, [sum of batch_size_per_rank, D] in
// rank order; afterwards rank r holds the full sums of its own samples,
// [batch_size_per_rank[r], D]. The backward hands each rank the gradient of
// every sample (all-gather), since each partial sum fed the same output.
#pragma once

#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

// codec: the quantized comm codec (null: float32 as it is); with one, the
// slices travel encoded and are summed in float32 after decoding. bytes:
// add the bytes sent to other ranks.
StatusOr<Tensor> PooledReduceScatter(const ProcessGroup& group, const Tensor& partial_sums,
                                     const std::vector<int64_t>& batch_size_per_rank, const Codec* codec = nullptr,
                                     int64_t* bytes = nullptr);

// `grad` is [batch_size_per_rank[rank], D]; returns [sum of batches, D].
StatusOr<Tensor> PooledReduceScatterBackward(const ProcessGroup& group, const Tensor& grad,
                                             const std::vector<int64_t>& batch_size_per_rank,
                                             const Codec* codec = nullptr, int64_t* bytes = nullptr);

}  // namespace shardrec
