// Forward orchestration: one ForwardJob per feature, then one parallel_for
// over the global bag range of the call (so many small features still make
// one balanced loop); each task walks the features its bag range crosses.
// Bags are independent and each is reduced by one task in id order, so the
// output does not depend on the thread count.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>

#include "forward.h"

namespace shardrec::kernel_cpu {
namespace {

// Below this many ids a call runs on the calling thread: entering the arena
// and splitting costs more than it saves.
constexpr int64_t kSerialIds = 4096;
// Roughly this many ids per task, so tasks amortise their scheduling.
constexpr int64_t kIdsPerTask = 2048;

void RunRange(const Lookup& lookup, const std::vector<ForwardJob>& jobs, int64_t b0, int64_t b1) {
  // The last feature starting at or before b0 (features are in bag order;
  // empty ones share a start with the next and are skipped here).
  auto it = std::upper_bound(lookup.features.begin(), lookup.features.end(), b0,
                             [](int64_t b, const FeatureWork& w) { return b < w.bag_begin; });
  size_t f = static_cast<size_t>(it - lookup.features.begin()) - 1;
  while (b0 < b1 && f < jobs.size()) {
    const int64_t e = std::min(b1, lookup.features[f].bag_end);
    if (e > b0) ForwardBags(jobs[f], b0, e);
    b0 = std::max(b0, e);
    ++f;
  }
}

}  // namespace

void RunForward(const std::vector<Table>& tables, const Lookup& lookup, float* out,
                int64_t out_row_stride, int64_t out_col_stride, int64_t prefetch,
                oneapi::tbb::task_arena& arena, std::vector<ForwardJob>& jobs) {
  jobs.resize(lookup.features.size());
  for (size_t f = 0; f < lookup.features.size(); ++f) {
    const FeatureWork& w = lookup.features[f];
    const Table& t = tables[static_cast<size_t>(w.table)];
    ForwardJob& j = jobs[f];
    j.table = t.weights.data();
    j.type = t.type;
    j.quantization = t.quantization;
    j.row_bytes = t.bytes_per_row;
    j.num_rows = static_cast<uint64_t>(t.num_rows);
    j.dim = t.dim;
    j.offsets = lookup.offsets;
    j.indices = lookup.indices;
    j.weights = w.pooling == SR_POOLING_NONE ? nullptr : lookup.weights;
    j.pooling = w.pooling;
    j.skip_invalid = lookup.skip_invalid;
    j.prefetch = prefetch;
    j.out = out + w.out_row * out_row_stride + w.out_col * out_col_stride;
    j.out_row_stride = out_row_stride;
    j.out_col_stride = out_col_stride;
    j.bag_first = w.bag_begin;
    j.id_first = w.id_begin;
  }
  if (lookup.num_bags == 0 || jobs.empty()) return;
  if (lookup.nnz < kSerialIds) {
    RunRange(lookup, jobs, 0, lookup.num_bags);
    return;
  }
  const int64_t grain =
      std::max<int64_t>(1, lookup.num_bags * kIdsPerTask / std::max<int64_t>(lookup.nnz, 1));
  arena.execute([&] {
    oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<int64_t>(0, lookup.num_bags, grain),
                              [&](const oneapi::tbb::blocked_range<int64_t>& r) {
                                RunRange(lookup, jobs, r.begin(), r.end());
                              });
  });
}

}  // namespace shardrec::kernel_cpu
