// The device half of argument checking (launch.h, LaunchLookupCheck): one
// thread per bag tests its offsets and, when bounds are checked, its ids.
// Counters are combined with atomics (a count and two minima: the result is
// the same whatever the order); no table row is touched.
#include "launch.h"
#include "row_access.cuh"

namespace shardrec::kernel_cuda {
namespace {

constexpr int kThreads = 256;

__global__ void LookupCheckKernel(DeviceLookup a, int check_bounds, CheckResult* r,
                                  int64_t* feature_ids) {
  const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (b <= a.num_features) feature_ids[b] = a.offsets[a.bag_starts[b]];
  if (b == 0) {
    r->first_offset = a.offsets[0];
    r->last_offset = a.offsets[a.num_bags];
  }
  if (b >= a.num_bags) return;
  const int64_t begin = a.offsets[b];
  const int64_t end = a.offsets[b + 1];
  if (end < begin) {
    atomicMin(reinterpret_cast<long long*>(&r->first_negative_bag), static_cast<long long>(b));
    return;
  }
  // Bags outside [0, nnz) are reported through the two ends or a negative
  // length elsewhere; never read past indices.
  if (!check_bounds || begin < 0 || end > a.nnz) return;
  const DeviceFeature& f = a.features[FeatureOfBag(a.bag_starts, a.num_features, b)];
  const uint64_t rows = static_cast<uint64_t>(a.tables[f.table].num_rows);
  unsigned long long bad = 0;
  for (int64_t i = begin; i < end; ++i) bad += static_cast<uint64_t>(a.indices[i]) >= rows;
  if (bad != 0) {
    atomicAdd(reinterpret_cast<unsigned long long*>(&r->invalid_ids), bad);
    atomicMin(reinterpret_cast<long long*>(&r->first_invalid_bag), static_cast<long long>(b));
  }
}

}  // namespace

void LaunchLookupCheck(const DeviceLookup& lookup, bool check_bounds, CheckResult* result,
                       int64_t* feature_ids, cudaStream_t stream) {
  const int64_t threads = lookup.num_bags > lookup.num_features ? lookup.num_bags
                                                                : lookup.num_features + 1;
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  LookupCheckKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
      lookup, check_bounds ? 1 : 0, result, feature_ids);
}

}  // namespace shardrec::kernel_cuda
