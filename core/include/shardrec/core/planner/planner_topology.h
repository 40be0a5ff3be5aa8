// The machines a plan is made for, as the planner's cost model sees them
// (docs/planner.md): ranks per host, memory per rank, each compute kernel's
// speed, and the links inside a host and between hosts. Measured on this
// machine by `shardrec bench topology -o topo.json`, or written by hand for
// a cluster the planner cannot see:
//   {"format": "shardrec-topology", "version": 1,
//    "ranks_per_host": 2, "cores_per_host": 2, "memory_bytes_per_rank": 8589934592,
//    "kernels": {"cpu": {"forward": {"seconds_per_lookup": 2e-8, "seconds_per_byte": 1e-10},
//                        "backward": {"seconds_per_lookup": 6e-8, "seconds_per_byte": 4e-10}}},
//    "intra_host": {"bytes_per_s": 5e9, "latency_s": 2e-5},
//    "inter_host": {"bytes_per_s": 1.2e9, "latency_s": 1e-4},
//    "input_dist": {"seconds_per_id": 1e-8},   (optional)
//    "per_table": {"seconds": 3e-5},           (optional)
//    (a kernel may add "cached": {"max_shard_bytes": N, "forward": ..., "backward": ...})
//    "measured": {...}}   (how and where it was measured; information only)
// The world size and the number of hosts come from the plan request, so one
// file serves every world size of the same kind of machine.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "shardrec/core/status.h"

namespace shardrec {

// Seconds a kernel takes per looked-up row: a fixed cost plus one per byte
// of the row (so a narrow table is not modelled as free).
struct KernelSpeed {
  double seconds_per_lookup = 0;
  double seconds_per_byte = 0;
  double Seconds(double lookups, double row_bytes) const {
    return lookups * (seconds_per_lookup + row_bytes * seconds_per_byte);
  }
};

struct KernelCost {
  KernelSpeed forward;   // pooled lookup
  KernelSpeed backward;  // gradient + fused optimizer update
  // Optional: the speeds for a shard whose rows fit in the cache (at most
  // `cached_max_shard_bytes` of weights), where a lookup costs a fraction of
  // one that goes to memory: "cached": {"max_shard_bytes": N, "forward":
  // ..., "backward": ...}. 0 bytes: every shard at the speeds above.
  int64_t cached_max_shard_bytes = 0;
  KernelSpeed cached_forward, cached_backward;
  bool Cached(double shard_bytes) const {
    return cached_max_shard_bytes > 0 && shard_bytes <= static_cast<double>(cached_max_shard_bytes);
  }
  const KernelSpeed& Forward(double shard_bytes) const { return Cached(shard_bytes) ? cached_forward : forward; }
  const KernelSpeed& Backward(double shard_bytes) const { return Cached(shard_bytes) ? cached_backward : backward; }
};

// One kind of link: bandwidth of a rank's sends (or receives) in an
// all-to-all, and the latency of one collective.
struct LinkCost {
  double bytes_per_s = 0;
  double latency_s = 0;
};

struct PlannerTopology {
  int ranks_per_host = 0;              // 0: the request's
  // Cores a host's ranks share; 0: a core per rank. With more ranks than
  // cores the ranks cannot all run at once (cost_model.h).
  int cores_per_host = 0;
  int64_t memory_bytes_per_rank = 0;   // 0: unlimited
  std::map<std::string, KernelCost> kernels;
  LinkCost intra_host, inter_host;
  // The input dist's host work per id (bucketizing, packing and unpacking
  // the KJT all-to-all, its bytes on the link aside), one id sent and
  // received: "input_dist": {"seconds_per_id": ...}. 0: not counted.
  double input_dist_seconds_per_id = 0;
  // The host's work per table shard per step, whatever its ids (routing its
  // features, its kernel calls, its slice of the output dist, its optimizer
  // bookkeeping): "per_table": {"seconds": ...}. 0: not counted. It is why
  // 24 small tables cost more than one table with their ids.
  double seconds_per_table = 0;
  std::string measured;                // a JSON object as text ("" : written by hand / defaults)
  std::string source = "built-in defaults";
};

// Figures of the machine this was written on (2 cores, one rank per core,
// the cpu kernel, Gloo over loopback), for when no --topology is given. The
// plan then says so: a plan for other hardware wants a measured topology.
PlannerTopology DefaultTopology();

StatusOr<PlannerTopology> ParseTopologyJson(const std::string& json_text, const std::string& source);
StatusOr<PlannerTopology> LoadTopologyFile(const std::string& path);
std::string TopologyToJson(const PlannerTopology& topology);

}  // namespace shardrec
