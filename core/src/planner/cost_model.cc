// The planner's step model (cost_model.h).
#include "shardrec/core/planner/cost_model.h"

#include <algorithm>

namespace shardrec {

RankLoad& RankLoad::operator+=(const RankLoad& o) {
  compute_s += o.compute_s;
  send_intra += o.send_intra;
  recv_intra += o.recv_intra;
  send_inter += o.send_inter;
  recv_inter += o.recv_inter;
  bytes += o.bytes;
  return *this;
}

RankLoad& RankLoad::operator-=(const RankLoad& o) {
  compute_s -= o.compute_s;
  send_intra -= o.send_intra;
  recv_intra -= o.recv_intra;
  send_inter -= o.send_inter;
  recv_inter -= o.recv_inter;
  bytes -= o.bytes;
  return *this;
}

CostModel::CostModel(const PlannerTopology& topology, int world_size, int ranks_per_host, int64_t batch_per_rank)
    : topology_(topology), world_(std::max(world_size, 1)), per_host_(std::max(ranks_per_host, 1)),
      batch_(std::max<int64_t>(batch_per_rank, 1)) {}

TableEffect CostModel::Effect(const KernelCost& kernel, int64_t cols, int64_t elem_bytes, double pooling_factor,
                              const std::vector<sr_shard>& shards, const std::vector<double>& lookup_share,
                              const std::vector<int64_t>& shard_bytes, bool replicated) const {
  const double B = static_cast<double>(batch_), W = static_cast<double>(world_), P = pooling_factor;
  constexpr double kIdBytes = 8, kLengthBytes = 4, kFloatBytes = 4;
  // The input dist's host work per id, half where an id is sent, half where
  // it is received (the topology measures one id sent and received).
  const double half_id_s = topology_.input_dist_seconds_per_id / 2;
  TableEffect e;
  e.replicated = replicated;
  if (replicated) {
    // Forward on the rank's own samples; backward applies every rank's
    // gradients to every replica, after an all-gather of gradients and ids
    // (the rank's ids go to every rank, every rank's come back).
    const double row_bytes = static_cast<double>(cols * elem_bytes);
    const double held = shards.empty() ? 0 : static_cast<double>(shards[0].num_rows) * row_bytes;
    e.replica.compute_s = kernel.Forward(held).Seconds(B * P, row_bytes) +
                          kernel.Backward(held).Seconds(B * W * P, row_bytes) + 2 * half_id_s * B * W * P +
                          topology_.seconds_per_table;
    e.replica.bytes = shard_bytes.empty() ? 0 : shard_bytes[0];
    const double exchanged = B * static_cast<double>(cols) * kFloatBytes + B * P * kIdBytes + B * kLengthBytes;
    e.replica.to_peer = exchanged;
    e.replica.from_peer = exchanged;
    return e;
  }
  e.every_rank_s = half_id_s * B * P;  // each rank routes its samples' ids
  e.shards.reserve(shards.size());
  for (size_t i = 0; i < shards.size(); ++i) {
    const sr_shard& s = shards[i];
    if (s.num_rows == 0 || s.num_cols == 0) continue;
    const double share = lookup_share[i];
    const double lookups = B * W * P * share;
    const double row_bytes = static_cast<double>(s.num_cols * elem_bytes);
    // A shard that fits in the cache looks up at the cached speeds.
    const double held = static_cast<double>(s.num_rows) * row_bytes;
    ShardTerm t;
    t.rank = s.rank;
    t.compute_s = kernel.Forward(held).Seconds(lookups, row_bytes) + kernel.Backward(held).Seconds(lookups, row_bytes) +
                  half_id_s * lookups +  // and unpacks the ids of its rows
                  topology_.seconds_per_table;
    t.bytes = shard_bytes[i];
    // To each peer: that peer's samples' pooled columns (forward). From each
    // peer: its ids of this shard's rows with their lengths (input dist) and
    // the gradients of its samples' columns (backward).
    t.to_peer = B * static_cast<double>(s.num_cols) * kFloatBytes;
    t.from_peer = B * P * share * kIdBytes + B * kLengthBytes + B * static_cast<double>(s.num_cols) * kFloatBytes;
    e.shards.push_back(t);
  }
  return e;
}

void CostModel::Visit(const TableEffect& effect, const std::vector<RankLoad>& loads,
                      const std::function<void(int, const RankLoad&)>& visit) const {
  const double intra_peers = per_host_ - 1, inter_peers = world_ - per_host_;
  // What a shard's own rank adds: its compute, bytes, and the exchange with
  // each of its peers.
  auto own = [&](RankLoad& l, const ShardTerm& t) {
    l.compute_s += t.compute_s;
    l.bytes += t.bytes;
    l.send_intra += t.to_peer * intra_peers;
    l.send_inter += t.to_peer * inter_peers;
    l.recv_intra += t.from_peer * intra_peers;
    l.recv_inter += t.from_peer * inter_peers;
  };
  if (effect.replicated) {
    for (int q = 0; q < world_; ++q) {
      RankLoad l = loads[static_cast<size_t>(q)];
      own(l, effect.replica);
      visit(q, l);
    }
    return;
  }
  // Every rank receives to_peer from, and sends from_peer to, each shard on
  // another rank: sums per host and over all, less the rank's own shards.
  thread_local std::vector<double> host_to, host_from, own_to, own_from;
  thread_local std::vector<RankLoad> own_load;
  const int hosts = world_ / per_host_;
  host_to.assign(static_cast<size_t>(hosts), 0);
  host_from.assign(static_cast<size_t>(hosts), 0);
  own_to.assign(static_cast<size_t>(world_), 0);
  own_from.assign(static_cast<size_t>(world_), 0);
  own_load.assign(static_cast<size_t>(world_), RankLoad{});
  double all_to = 0, all_from = 0;
  for (const ShardTerm& t : effect.shards) {
    const size_t r = static_cast<size_t>(t.rank), h = static_cast<size_t>(HostOf(t.rank));
    all_to += t.to_peer;
    all_from += t.from_peer;
    host_to[h] += t.to_peer;
    host_from[h] += t.from_peer;
    own_to[r] += t.to_peer;
    own_from[r] += t.from_peer;
    own(own_load[r], t);
  }
  for (int q = 0; q < world_; ++q) {
    const size_t h = static_cast<size_t>(HostOf(q)), r = static_cast<size_t>(q);
    RankLoad l = loads[r];
    l += own_load[r];
    l.compute_s += effect.every_rank_s;
    l.recv_intra += host_to[h] - own_to[r];
    l.send_intra += host_from[h] - own_from[r];
    l.recv_inter += all_to - host_to[h];
    l.send_inter += all_from - host_from[h];
    visit(q, l);
  }
}

void CostModel::Preview(const TableEffect& effect, const std::vector<RankLoad>& loads,
                        std::vector<RankLoad>& out) const {
  out.resize(loads.size());
  Visit(effect, loads, [&](int q, const RankLoad& l) { out[static_cast<size_t>(q)] = l; });
}

void CostModel::Apply(const TableEffect& effect, std::vector<RankLoad>& loads, int sign) const {
  std::vector<RankLoad> after;
  Preview(effect, loads, after);
  if (sign > 0) {
    loads.swap(after);
    return;
  }
  // loads - (after - loads)
  for (size_t r = 0; r < loads.size(); ++r) {
    RankLoad delta = after[r];
    delta -= loads[r];
    loads[r] -= delta;
  }
}

double CostModel::RankSeconds(const RankLoad& l) const {
  return l.compute_s + std::max(l.send_intra, l.recv_intra) / topology_.intra_host.bytes_per_s +
         std::max(l.send_inter, l.recv_inter) / topology_.inter_host.bytes_per_s;
}

double CostModel::SpreadSeconds(const RankLoad& l) const {
  return l.compute_s + (l.send_intra + l.recv_intra) / 2 / topology_.intra_host.bytes_per_s +
         (l.send_inter + l.recv_inter) / 2 / topology_.inter_host.bytes_per_s;
}

bool CostModel::SharesCores() const {
  return topology_.cores_per_host > 0 && per_host_ > topology_.cores_per_host;
}

double CostModel::SharedHostSeconds(std::span<double> rank_seconds) const {
  std::sort(rank_seconds.begin(), rank_seconds.end());
  const auto cores = static_cast<double>(topology_.cores_per_host);
  double t = 0, done = 0;  // done: the work each rank still working has had
  for (size_t i = 0; i < rank_seconds.size(); ++i) {
    const double working = static_cast<double>(rank_seconds.size() - i);
    t += (rank_seconds[i] - done) / std::min(1.0, cores / working);
    done = rank_seconds[i];
  }
  return t;
}

double CostModel::StepSeconds(const std::vector<RankLoad>& loads, double latency) const {
  std::vector<double> rank_seconds(loads.size());
  std::transform(loads.begin(), loads.end(), rank_seconds.begin(), [&](const RankLoad& l) { return RankSeconds(l); });
  double worst = rank_seconds.empty() ? 0 : *std::max_element(rank_seconds.begin(), rank_seconds.end());
  if (SharesCores()) {  // each whole host's ranks, in turns on its cores
    const auto per_host = static_cast<size_t>(per_host_);
    for (size_t first = 0; first + per_host <= rank_seconds.size(); first += per_host) {
      worst = std::max(worst, SharedHostSeconds({rank_seconds.data() + first, per_host}));
    }
  }
  return worst + latency;
}

double CostModel::LatencySeconds(bool any_sharded, bool any_replicated) const {
  if (world_ == 1) return 0;
  const double per = hosts() > 1 ? topology_.inter_host.latency_s : topology_.intra_host.latency_s;
  // Sharded: the input dist's two all-to-alls (sizes, then ids), the output
  // dist and its backward. Replicated: the gradients' all-gather and the
  // ids' all-to-all (sizes, then ids).
  return per * ((any_sharded ? 4 : 0) + (any_replicated ? 3 : 0));
}

}  // namespace shardrec
