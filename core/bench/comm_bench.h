// `shardrec bench comm`: one collective of a comm backend at a large size
// (bandwidth) and a small one (latency), timed on every rank of a group,
// beside the machine's own limit measured in the same run on the same
// buffers:
//   gloo   Gloo's own algorithm called directly (gloo::alltoallv,
//          gloo::allgatherv, gloo::allreduce ring, and the legacy
//          ReduceScatterHalvingDoubling), so the ratio is the plugin's
//          overhead over raw Gloo;
//   local  a memcpy of the same bytes by every rank's thread at once: the
//          memory bandwidth the threads share.
// Times are the slowest rank's (an all-reduce of max), best and median of
// `reps` measurements of at least `min_time` each. Bandwidths follow
// nccl-tests: algbw = bytes / time, busbw = algbw x (n-1)/n (all-to-all,
// all-gather, reduce-scatter) or x 2(n-1)/n (all-reduce). `bytes` is the
// size of the send buffer per rank (all-gather: of the receive buffer).
#pragma once

#include <functional>
#include <string>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/sdk/collective_ops.hpp"

namespace shardrec::bench {

// The collectives the bench times: all_to_all_v, reduce_scatter_v,
// all_gather_v and all_reduce, named as the SDK names them.
using CommBenchOp = sdk::CollectiveOp;
StatusOr<CommBenchOp> ParseCommBenchOp(const std::string& name);
inline const char* CommBenchOpName(CommBenchOp op) { return sdk::CollectiveName(op); }

struct CommBenchConfig {
  CommBenchOp op = CommBenchOp::kAllToAllV;
  int64_t bytes = int64_t{64} << 20;
  int64_t small_bytes = 8;
  double min_time = 0.3;  // seconds per measurement
  int reps = 5;
  bool baseline = true;   // run the backend's baseline (when it has one)
  // Where the direct-Gloo baseline binds: the plugin's own hostname/iface
  // options, so both use the same network (empty: the plugin's defaults).
  std::string gloo_hostname, gloo_iface;
};

struct Timing {
  double best = 0, median = 0;  // seconds per operation, slowest rank
};

struct CommBenchResult {
  Timing op, small, baseline;
  std::string baseline_name;  // "" when the backend has none
  double algbw_gbps = 0, busbw_gbps = 0, bus_factor = 0;
  // baseline.median / op.median: 1.0 means as fast as the baseline; and the
  // same from the best measurements (less sensitive to a noisy machine).
  double baseline_ratio = 0, baseline_ratio_best = 0;
};

// Collective over `group`; every rank gets the same result.
StatusOr<CommBenchResult> RunCommBench(const ProcessGroup& group, const CommBenchConfig& config,
                                       const std::function<void(const std::string&)>& progress);

}  // namespace shardrec::bench
