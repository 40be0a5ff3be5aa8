// Row-wise input dist, step one: the seeds' bucketize_kjt_before_all2all.
// Every id goes to the bucket (row block, i.e. destination rank) holding its
// row and becomes a row inside that block; the result is grouped
// bucket-major, [bucket 0: f0..fF-1][bucket 1: f0..]..., so it is ordered by
// destination for KjtAllToAll, with every key once per bucket. Within a
// bucket, ids keep their order. Weights travel with their ids.
#pragma once

#include <vector>

#include "shardrec/core/sparse/keyed_jagged_tensor.h"

namespace shardrec {

struct BucketizedKjt {
  KeyedJaggedTensor kjt;  // F x num_buckets keys, bucket-major
  // permute[i]: where input id i sits in kjt.values() (the seeds'
  // output_permute), to put results back in input order.
  std::vector<int64_t> permute;
};

// bucket_offsets[f]: num_buckets + 1 ascending row boundaries of feature f
// (bucket b holds rows [offsets[b], offsets[b + 1])). An id outside
// [offsets[0], offsets.back()) is an error naming the feature and sample.
StatusOr<BucketizedKjt> BucketizeKjt(const KeyedJaggedTensor& kjt,
                                     const std::vector<std::vector<int64_t>>& bucket_offsets);

// The seeds' form: num_buckets blocks of block_sizes[f] rows for feature f
// (bucket = id / block, new id = id - bucket * block).
StatusOr<BucketizedKjt> BucketizeKjtByBlockSize(const KeyedJaggedTensor& kjt, int num_buckets,
                                                const std::vector<int64_t>& block_sizes);

}  // namespace shardrec
