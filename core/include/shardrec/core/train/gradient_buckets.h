// Data-parallel dense gradients, the DDP way: parameters are grouped into
// buckets of about `bucket_bytes` in the order backward finishes them
// (reverse registration order); the moment a bucket's last gradient is
// ready, its all-reduce is posted on the comm plugin, so it runs while
// backward goes on. Finish waits for every bucket and divides by the
// number of ranks: every replica then holds the same bits (an all-reduce
// gives all ranks one result), given the same initial values (a seeded,
// rank-independent initialisation).
//
// bucket_bytes 0: one bucket, posted by Finish (no overlap), for comparison.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/dense/dense_layer.h"

namespace shardrec {

class GradientBuckets {
 public:
  // `params` in registration order; the same on every rank.
  GradientBuckets(const ProcessGroup& group, std::vector<dense::Parameter*> params, int64_t bucket_bytes);
  // Gradients of `params` are final (a RecModel's GradientsReady).
  Status Ready(const std::vector<dense::Parameter*>& params);
  // Posts what is left, waits for all, averages. Then the next step may start.
  Status Finish();
  int buckets() const { return static_cast<int>(buckets_.size()); }
  // Seconds spent waiting in Finish (the all-reduce time backward did not hide).
  double exposed_seconds() const { return exposed_; }

 private:
  struct Bucket {
    std::vector<dense::Parameter*> params;
    int64_t elements = 0;
    int pending = 0;
    Tensor buffer;
    std::optional<CommRequest> request;
  };
  Status Post(Bucket* b);

  const ProcessGroup& group_;
  std::vector<Bucket> buckets_;
  std::map<const dense::Parameter*, size_t> bucket_of_;
  double exposed_ = 0;
};

// XXH3 of every parameter's bytes, all-gathered: an error naming the first
// rank whose replica differs from rank 0's.
Status CheckReplicasIdentical(const ProcessGroup& group, const std::vector<dense::Parameter*>& params);

}  // namespace shardrec
