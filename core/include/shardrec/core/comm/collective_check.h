// Every collective of a comm backend checked against a result each rank
// computes locally: the acceptance suite of issue 4, run by the unit tests
// (ranks as threads) and by `shardrec comm check` (ranks as processes,
// on one host or several). Each rank knows the formula for what every peer
// sends, so it computes its expected output without communicating.
//
// Covered: all_to_all_v, reduce_scatter_v (sum and max; float32, float16,
// bfloat16, int64), all_gather_v, all_reduce (sum, max), broadcast from
// every root, barrier; count patterns with empty per-peer slices, very
// uneven splits (one rank gets everything), tiny (1 element) messages and
// optionally large ones (>= 64 MiB per rank); several requests in flight;
// the intra-/cross-host sub-groups and invoke_on_rank_and_broadcast_result.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardrec/core/comm/process_group.h"

namespace shardrec {

struct CollectiveCheckOptions {
  // Also move `large_bytes` per rank through all_to_all_v, all_gather_v,
  // reduce_scatter_v and all_reduce.
  bool large = false;
  int64_t large_bytes = int64_t{64} << 20;
  // Called with one line per case on rank 0 ("all_to_all_v float32 uneven: ok").
  std::function<void(const std::string&)> progress;
};

struct CollectiveCheckReport {
  int passed = 0;
  std::vector<std::string> failures;  // one line each, naming case, rank and element
  bool ok() const { return failures.empty(); }
};

// Collective over `group`: every rank must call it with the same options.
// Stops at the first collective that returns an error (the communicator is
// unusable after that) and reports it as a failure.
CollectiveCheckReport RunCollectiveChecks(const ProcessGroup& group, const CollectiveCheckOptions& options);

}  // namespace shardrec
