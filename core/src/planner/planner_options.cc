// Sharder placements as planner options (planner_options.h).
#include "planner_options.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace shardrec::planner_internal {

const Sharder* SharderSet::Find(const std::string& name) const {
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return &sharders[i];
  }
  return nullptr;
}

StatusOr<SharderSet> CreateSharders(const PluginRegistry& registry, const std::vector<std::string>& only,
                                    const std::map<std::string, OptionList>& options) {
  SharderSet set;
  std::vector<ComponentRef> refs;
  if (only.empty()) {
    refs = registry.Components(SR_KIND_SHARDER);
  } else {
    for (const std::string& name : only) {
      SR_ASSIGN_OR_RETURN(ComponentRef ref, registry.Find(SR_KIND_SHARDER, name));
      refs.push_back(ref);
    }
  }
  if (refs.empty()) return Status(SR_NOT_FOUND, "planner: no sharder plugin was found (see `shardrec plugins list`)");
  for (const ComponentRef& ref : refs) {
    SR_ASSIGN_OR_RETURN(Sharder s, Sharder::Create(ref, OptionsOf(options, ref.name())));
    const auto calls = ref.StringListAttribute("call_options").value_or(std::vector<std::string>{});
    auto has = [&](const char* o) { return std::find(calls.begin(), calls.end(), o) != calls.end(); };
    set.names.push_back(ref.name());
    set.relocate.push_back(has("rank") ? Relocate::kShift : has("host") ? Relocate::kHost : Relocate::kFixed);
    set.sharders.push_back(std::move(s));
  }
  return set;
}

Status FillShares(const Sharder* sharder, const sr_table_desc& desc, const sr_topology& topo,
                  const TableWorkload& workload, int64_t batch_per_rank, Shape& shape) {
  const size_t n = shape.shards.size();
  shape.share.assign(n, 0);
  if (shape.replicated) {
    std::fill(shape.share.begin(), shape.share.end(), 1.0);
    return Status::Ok();
  }
  const bool own_routing = sharder != nullptr && sharder->HasRouteIds();
  for (size_t i = 0; i < n; ++i) {
    const sr_shard& s = shape.shards[i];
    shape.share[i] = own_routing ? static_cast<double>(s.num_rows) / static_cast<double>(std::max<int64_t>(desc.num_rows, 1))
                                 : workload.ShareOfRows(s.row_offset, s.num_rows, desc.num_rows);
  }
  if (sharder == nullptr || !sharder->HasEstimateCost()) return Status::Ok();
  sr_estimate_cost_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_estimate_cost_args, lookup_share);
  a.table = &desc;
  a.topology = &topo;
  a.shards = shape.shards.data();
  a.num_shards = n;
  a.batch_per_rank = batch_per_rank;
  a.pooling_factor = workload.pooling_factor;
  a.row_histogram = workload.row_histogram.empty() ? nullptr : workload.row_histogram.data();
  a.row_histogram_buckets = workload.row_histogram.size();
  std::vector<double> shares = shape.share;
  a.lookup_share = shares.data();
  SR_RETURN_IF_ERROR(sharder->EstimateCost(a));
  // Shares are per row block: column blocks of one row block repeat it. Sum
  // one per distinct (row_offset, num_rows) pair.
  std::map<std::pair<int64_t, int64_t>, double> per_block;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(shares[i]) || shares[i] < 0 || shares[i] > 1) {
      return InvalidArgumentError(fmt::format("sharder '{}', table '{}': estimate_cost gave shard {} a lookup share of {}; "
                                              "shares are in [0, 1]", sharder->Describe(), desc.name, i, shares[i]));
    }
    per_block[{shape.shards[i].row_offset, shape.shards[i].num_rows}] = shares[i];
  }
  double total = 0;
  for (const auto& [block, share] : per_block) total += share;
  if (std::abs(total - 1) > 1e-3) {
    return InvalidArgumentError(fmt::format("sharder '{}', table '{}': estimate_cost's lookup shares of the row blocks "
                                            "sum to {}, not 1", sharder->Describe(), desc.name, total));
  }
  shape.share = std::move(shares);
  return Status::Ok();
}

Status FillBytes(const Sharder* sharder, const sr_table_desc& desc, const sr_topology& topo, Shape& shape) {
  const int64_t elem = (desc.weight_dtype.bits * desc.weight_dtype.lanes + 7) / 8;
  const size_t n = shape.shards.size();
  shape.bytes.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const sr_shard& s = shape.shards[i];
    const double col_share = static_cast<double>(s.num_cols) / static_cast<double>(std::max<int64_t>(desc.num_cols, 1));
    shape.bytes[i] = s.num_rows * (s.num_cols * elem + static_cast<int64_t>(col_share * static_cast<double>(desc.state_bytes_per_row)));
  }
  if (sharder == nullptr || !sharder->HasEstimateStorage()) return Status::Ok();
  const int world = topo.world_size;
  std::vector<int64_t> per_rank(static_cast<size_t>(world), 0);
  sr_estimate_storage_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_estimate_storage_args, bytes_per_rank);
  a.table = &desc;
  a.topology = &topo;
  a.shards = shape.shards.data();
  a.num_shards = n;
  a.bytes_per_rank = per_rank.data();
  SR_RETURN_IF_ERROR(sharder->EstimateStorage(a));
  // A rank's estimate is split over its shards by their cells, so the bytes
  // move with the shards when the planner moves them.
  std::vector<double> cells(static_cast<size_t>(world), 0);
  for (const sr_shard& s : shape.shards) cells[static_cast<size_t>(s.rank)] += static_cast<double>(s.num_rows * s.num_cols);
  for (int r = 0; r < world; ++r) {
    if (per_rank[static_cast<size_t>(r)] < 0) {
      return InvalidArgumentError(fmt::format("sharder '{}', table '{}': estimate_storage gave rank {} {} bytes",
                                              sharder->Describe(), desc.name, r, per_rank[static_cast<size_t>(r)]));
    }
  }
  for (size_t i = 0; i < n; ++i) {
    const sr_shard& s = shape.shards[i];
    const double c = cells[static_cast<size_t>(s.rank)];
    shape.bytes[i] = c > 0 ? static_cast<int64_t>(static_cast<double>(per_rank[static_cast<size_t>(s.rank)]) *
                                                  static_cast<double>(s.num_rows * s.num_cols) / c)
                           : 0;
  }
  return Status::Ok();
}

std::string FormatRanks(const std::vector<int>& v) {
  if (v.empty()) return "none";
  if (v.size() > 2 && v.back() - v.front() + 1 == static_cast<int>(v.size())) return fmt::format("{}-{}", v.front(), v.back());
  return fmt::format("{}", fmt::join(v, ","));
}

std::vector<sr_shard> Moved(const Shape& shape, int offset, int world, int per_host) {
  std::vector<sr_shard> out = shape.shards;
  if (shape.relocate == Relocate::kFixed || out.empty()) return out;
  const int base = out[0].rank;
  for (sr_shard& s : out) {
    if (shape.relocate == Relocate::kShift) {
      s.rank = static_cast<int32_t>(((s.rank - base + offset) % world + world) % world);
    } else {
      const int shift = (offset - base / per_host) * per_host;
      s.rank = static_cast<int32_t>(((s.rank + shift) % world + world) % world);
    }
  }
  return out;
}

}  // namespace shardrec::planner_internal
