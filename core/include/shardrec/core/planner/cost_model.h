// The planner's model of one training step (docs/planner.md, "Cost model").
// Per rank it adds up
//   compute   the kernel's forward and backward + optimizer over the rows
//             looked up on that rank (KernelSpeed: per lookup + per byte);
//   input     the input dist's host work per id (topology input_dist: route
//             and pack on the sending rank, unpack on the receiving one,
//             half each): every rank routes its own ids of a sharded table;
//             a shard's rank unpacks the ids of its rows from every rank; a
//             replica sends its rank's ids to every rank and unpacks every
//             rank's, so a hot replicated table costs each rank all its ids;
//   comm      the bytes the rank sends and receives in the input dist (ids),
//             the output dist (pooled embeddings) and its backward
//             (gradients), and for replicas the all-gather of gradients and
//             ids, divided by the intra- or inter-host bandwidth (full
//             duplex: the larger of sent and received counts);
// and the step pays every collective's latency once. The estimate of a
// plan is its slowest rank, or, when a host has more ranks than cores
// (topology cores_per_host), its ranks' summed time over its cores if that
// is longer: ranks that take turns on a core cannot all finish sooner. All of it is additive per table, which is what
// lets the partitioner try thousands of placements a second.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "shardrec/abi/sharder.h"
#include "shardrec/core/planner/planner_topology.h"

namespace shardrec {

// One rank's step, summed over the tables placed so far.
struct RankLoad {
  double compute_s = 0;
  double send_intra = 0, recv_intra = 0, send_inter = 0, recv_inter = 0;  // bytes
  int64_t bytes = 0;  // weights + optimizer state held
  RankLoad& operator+=(const RankLoad& o);
  RankLoad& operator-=(const RankLoad& o);
};

// One shard's part of the step: what its rank computes and holds, and the
// bytes it exchanges with each other rank (to_peer: the rank sends each peer
// that many, from_peer: each peer sends it that many).
struct ShardTerm {
  int rank = 0;
  double compute_s = 0;
  int64_t bytes = 0;
  double to_peer = 0, from_peer = 0;
};

// A table's effect on every rank: its shards, or a replica term every rank
// pays (data parallel).
struct TableEffect {
  std::vector<ShardTerm> shards;
  double every_rank_s = 0;  // when sharded: what every rank adds (routing its ids)
  bool replicated = false;
  ShardTerm replica;  // when replicated: each rank's (rank unused)
};

class CostModel {
 public:
  CostModel(const PlannerTopology& topology, int world_size, int ranks_per_host, int64_t batch_per_rank);

  int world_size() const { return world_; }
  int ranks_per_host() const { return per_host_; }
  int hosts() const { return world_ / per_host_; }
  int HostOf(int rank) const { return rank / per_host_; }

  // The effect of a table of `cols` columns of `elem_bytes`, with
  // `pooling_factor` ids per sample, placed as `shards` (each serving
  // `lookup_share[i]` of the lookups and holding `shard_bytes[i]`), or
  // replicated (`shards` then one per rank, all the whole table).
  TableEffect Effect(const KernelCost& kernel, int64_t cols, int64_t elem_bytes, double pooling_factor,
                     const std::vector<sr_shard>& shards, const std::vector<double>& lookup_share,
                     const std::vector<int64_t>& shard_bytes, bool replicated) const;

  // Adds (sign +1) or removes (-1) an effect from the per-rank loads.
  void Apply(const TableEffect& effect, std::vector<RankLoad>& loads, int sign = 1) const;

  // The seconds a rank with `load` spends per step, latency excluded.
  double RankSeconds(const RankLoad& load) const;
  // A lower bound of RankSeconds that adds up over tables: the comm terms
  // take the mean of sent and received bytes, not the larger. Summed over
  // the ranks it bounds what any placement of the same options can spread.
  double SpreadSeconds(const RankLoad& load) const;
  // Whether a host's ranks share fewer cores than there are ranks.
  bool SharesCores() const;
  // When they do, the time a host's last rank finishes, its ranks having
  // `rank_seconds` of work each (latency excluded; reordered in place). The
  // operating system shares the cores evenly among the ranks still working,
  // at most one core to a rank, so a rank with more work than the rest runs
  // its last part alone on one core while the others idle. Equal work gives
  // the work's sum over the cores; any other split takes longer. (The sum
  // alone hid such a split: four ranks on 2 cores, two hot tables on one of
  // them, estimated within 1-2% of an even plan, measured 1.17-1.22x its
  // step in one run, 0.95x in another; docs/benchmarks.md.)
  double SharedHostSeconds(std::span<double> rank_seconds) const;
  // The step of per-rank `loads` (world entries) with `latency`: the slowest
  // rank, or when ranks share cores the host whose ranks finish last
  // (SharedHostSeconds).
  double StepSeconds(const std::vector<RankLoad>& loads, double latency) const;
  // The step's collective latency: the input dist, output dist and its
  // backward when any table is sharded, and the replicas' two exchanges
  // when any is replicated.
  double LatencySeconds(bool any_sharded, bool any_replicated) const;

  // Calls visit(rank, load) with each rank's load after adding `effect` to
  // `loads`, without changing them, in O(world + shards): how the
  // partitioner scores a placement without copying every rank's load.
  void Visit(const TableEffect& effect, const std::vector<RankLoad>& loads,
             const std::function<void(int, const RankLoad&)>& visit) const;
  // The same, written into `out`.
  void Preview(const TableEffect& effect, const std::vector<RankLoad>& loads, std::vector<RankLoad>& out) const;

 private:
  PlannerTopology topology_;
  int world_, per_host_;
  int64_t batch_;
};

}  // namespace shardrec
