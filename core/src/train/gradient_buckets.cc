#include "shardrec/core/train/gradient_buckets.h"

#include <algorithm>

#include <fmt/format.h>

#include "shardrec/core/checkpoint/checksum.h"

namespace shardrec {

GradientBuckets::GradientBuckets(const ProcessGroup& group, std::vector<dense::Parameter*> params, int64_t bucket_bytes)
    : group_(group) {
  // Backward finishes the last-registered parameters first.
  std::reverse(params.begin(), params.end());
  for (dense::Parameter* p : params) {
    if (buckets_.empty() || (bucket_bytes > 0 && buckets_.back().elements * 4 >= bucket_bytes)) buckets_.emplace_back();
    Bucket& b = buckets_.back();
    b.params.push_back(p);
    b.elements += p->grad.numel();
    bucket_of_[p] = buckets_.size() - 1;
  }
  for (Bucket& b : buckets_) {
    b.buffer = Tensor::Empty(dtype::kFloat32, {b.elements});
    b.pending = static_cast<int>(b.params.size());
  }
}

Status GradientBuckets::Post(Bucket* b) {
  float* out = b->buffer.data<float>();
  for (dense::Parameter* p : b->params) out = std::copy_n(p->grad.data<float>(), p->grad.numel(), out);
  SR_ASSIGN_OR_RETURN(CommRequest request, group_.PostAllReduce(b->buffer, &b->buffer));
  b->request.emplace(std::move(request));
  return Status::Ok();
}

Status GradientBuckets::Ready(const std::vector<dense::Parameter*>& params) {
  for (dense::Parameter* p : params) {
    auto it = bucket_of_.find(p);
    if (it == bucket_of_.end()) return InternalError("gradient of an unknown parameter " + p->name + " reported ready");
    Bucket& b = buckets_[it->second];
    // A single bucket (bucket_bytes 0) waits for Finish.
    if (--b.pending == 0 && buckets_.size() > 1) SR_RETURN_IF_ERROR(Post(&b));
  }
  return Status::Ok();
}

Status GradientBuckets::Finish() {
  const auto start = std::chrono::steady_clock::now();
  const float scale = 1.0f / static_cast<float>(group_.world_size());
  Status failed = Status::Ok();
  // Post in bucket order what Ready did not (every rank does the same).
  for (Bucket& b : buckets_) {
    if (!b.request && failed.ok()) failed = Post(&b);
  }
  for (Bucket& b : buckets_) {
    if (b.request) {
      const Status done = b.request->Wait(group_.timeout_ms());
      if (failed.ok()) failed = done.WithContext("all-reduce of dense gradients");
      b.request.reset();
    }
    b.pending = static_cast<int>(b.params.size());
    if (!failed.ok()) continue;
    const float* in = b.buffer.data<float>();
    for (dense::Parameter* p : b.params) {
      float* g = p->grad.data<float>();
      for (int64_t i = 0; i < p->grad.numel(); ++i) g[i] = in[i] * scale;
      in += p->grad.numel();
    }
  }
  exposed_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return failed;
}

Status CheckReplicasIdentical(const ProcessGroup& group, const std::vector<dense::Parameter*>& params) {
  Xxh3Stream hash;
  for (const dense::Parameter* p : params) hash.Update(p->value.raw_data(), p->value.nbytes());
  SR_ASSIGN_OR_RETURN(auto all, AllGatherValues(group, static_cast<int64_t>(hash.Digest())));
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] != all[0]) {
      return InternalError(fmt::format("dense replicas differ: rank {}'s parameters are not rank 0's bit for bit", r));
    }
  }
  return Status::Ok();
}

}  // namespace shardrec
