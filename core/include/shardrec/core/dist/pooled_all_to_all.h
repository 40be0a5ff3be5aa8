// Output dist for table-wise and column-wise shards: the seeds'
// PooledEmbeddingsAllToAll (alltoall_pooled). Each rank holds pooled
// embeddings of its own tables for the global batch, [B_global, D_local];
// afterwards each rank holds every table's embeddings for its own samples,
// [B_rank, sum of dim_sum_per_rank], columns in rank order. The backward is
// the same exchange in reverse: gradients [B_rank, sum of dims] back to
// [B_global, D_local].
#pragma once

#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

// dim_sum_per_rank[r]: columns rank r contributes (every rank's, the same on
// all ranks); batch_size_per_rank[r]: rank r's samples (empty: the global
// batch split evenly, as the seeds do when it is not given).
// codec: the forward's quantized comm codec (null: float32 as it is);
// bytes: add the bytes sent to other ranks.
StatusOr<Tensor> PooledAllToAll(const ProcessGroup& group, const Tensor& local_embeddings,
                                const std::vector<int64_t>& dim_sum_per_rank,
                                std::vector<int64_t> batch_size_per_rank = {}, const Codec* codec = nullptr,
                                int64_t* bytes = nullptr);

// The backward: `grad` is [B_rank, sum of dims]; returns [B_global, D_local].
StatusOr<Tensor> PooledAllToAllBackward(const ProcessGroup& group, const Tensor& grad,
                                        const std::vector<int64_t>& dim_sum_per_rank,
                                        const std::vector<int64_t>& batch_size_per_rank, const Codec* codec = nullptr,
                                        int64_t* bytes = nullptr);

}  // namespace shardrec
