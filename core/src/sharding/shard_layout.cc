// ShardLayout (shard_layout.h): slots, columns and id routing of a plan.
#include "shardrec/core/sharding/shard_layout.h"

#include <algorithm>
#include <map>
#include <numeric>

#include <fmt/format.h>

#include "shardrec/core/dl_view.h"

namespace shardrec {

namespace {
bool Empty(const sr_shard& s) { return s.num_rows == 0 || s.num_cols == 0; }
}  // namespace

StatusOr<ShardLayout> ShardLayout::Create(const PluginRegistry& registry, ShardingPlan plan) {
  ShardLayout layout;
  layout.plan_ = std::move(plan);
  const auto& tables = layout.plan_.tables;
  const int world = layout.plan_.world_size;
  for (size_t t = 0; t < tables.size(); ++t) {
    for (const auto& f : tables[t].config.feature_names) {
      layout.features_.push_back({f, static_cast<int32_t>(t), tables[t].config.embedding_dim, layout.output_width_});
      layout.output_width_ += tables[t].config.embedding_dim;
    }
  }
  layout.routing_.resize(tables.size());
  layout.shard_block_.resize(tables.size());
  layout.slots_.resize(static_cast<size_t>(world));
  layout.lookup_width_.assign(static_cast<size_t>(world), 0);
  layout.all_table_wise_ = layout.all_row_wise_ = true;
  for (size_t t = 0; t < tables.size(); ++t) {
    const auto& table = tables[t];
    if (table.placement.replicated) {
      layout.any_replicated_ = true;
      continue;
    }
    layout.any_sharded_ = true;
    SR_RETURN_IF_ERROR(layout.BuildRouting(registry, static_cast<int32_t>(t)));
    const auto& shards = table.placement.shards;
    const int64_t rows = table.config.num_embeddings, dim = table.config.embedding_dim;
    if (shards.size() != 1 || shards[0].num_rows != rows || shards[0].num_cols != dim) {
      layout.all_table_wise_ = false;
    }
    std::vector<int> full_blocks_on(static_cast<size_t>(world), 0);
    for (size_t s = 0; s < shards.size(); ++s) {
      if (!Empty(shards[s]) && shards[s].num_cols == dim) ++full_blocks_on[static_cast<size_t>(shards[s].rank)];
    }
    if (shards.size() != static_cast<size_t>(world) ||
        std::any_of(full_blocks_on.begin(), full_blocks_on.end(), [](int n) { return n != 1; })) {
      layout.all_row_wise_ = false;
    }
    for (size_t s = 0; s < shards.size(); ++s) {
      if (Empty(shards[s])) continue;
      const size_t r = static_cast<size_t>(shards[s].rank);
      for (size_t f = 0; f < layout.features_.size(); ++f) {
        if (layout.features_[f].table != static_cast<int32_t>(t)) continue;
        layout.slots_[r].push_back({static_cast<int32_t>(f), static_cast<int32_t>(t), static_cast<int32_t>(s),
                                    fmt::format("{}@{}", layout.features_[f].name, s), layout.lookup_width_[r]});
        layout.lookup_width_[r] += shards[s].num_cols;
      }
    }
  }
  if (!layout.any_sharded_) layout.all_table_wise_ = layout.all_row_wise_ = false;
  // Row-wise fast path: every rank's lookup columns must be the sharded
  // features' own, in output order.
  if (layout.all_row_wise_) {
    int64_t sharded_width = 0;
    for (const auto& f : layout.features_) sharded_width += layout.replicated(f.table) ? 0 : f.dim;
    for (int r = 0; r < world && layout.all_row_wise_; ++r) {
      const auto& slots = layout.slots_[static_cast<size_t>(r)];
      size_t i = 0;
      for (size_t f = 0; f < layout.features_.size() && layout.all_row_wise_; ++f) {
        if (layout.replicated(layout.features_[f].table)) continue;
        if (i >= slots.size() || slots[i].feature != static_cast<int32_t>(f)) layout.all_row_wise_ = false;
        ++i;
      }
      if (i != slots.size() || layout.lookup_width_[static_cast<size_t>(r)] != sharded_width) layout.all_row_wise_ = false;
    }
  }
  return layout;
}

Status ShardLayout::BuildRouting(const PluginRegistry& registry, int32_t t) {
  const ShardedTable& table = plan_.tables[static_cast<size_t>(t)];
  TableRouting& r = routing_[static_cast<size_t>(t)];
  std::map<std::pair<int64_t, int64_t>, int32_t> block_of;
  auto& shard_block = shard_block_[static_cast<size_t>(t)];
  for (size_t s = 0; s < table.placement.shards.size(); ++s) {
    const sr_shard& shard = table.placement.shards[s];
    auto [it, added] = block_of.try_emplace({shard.row_offset, shard.num_rows}, static_cast<int32_t>(r.block_rows.size()));
    if (added) {
      r.block_rows.push_back(shard.num_rows);
      r.block_row_offset.push_back(shard.row_offset);
      r.block_shards.emplace_back();
    }
    shard_block.push_back(Empty(shard) ? -1 : it->second);
    if (!Empty(shard)) r.block_shards[static_cast<size_t>(it->second)].push_back(static_cast<int32_t>(s));
  }
  const int32_t blocks = static_cast<int32_t>(r.block_rows.size());
  auto ref = registry.Find(SR_KIND_SHARDER, table.sharding.sharding_type);
  bool custom = false;
  if (ref.ok()) {
    SR_ASSIGN_OR_RETURN(Sharder sharder,
                        Sharder::Create(ref.value(), OptionsOf(plan_.sharder_options, table.sharding.sharding_type)));
    if (sharder.HasRouteIds()) {
      r.router = std::make_shared<const Sharder>(std::move(sharder));
      custom = true;
    }
  }
  if (!custom) {
    std::vector<int32_t> order(static_cast<size_t>(blocks));
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
      return r.block_row_offset[static_cast<size_t>(a)] < r.block_row_offset[static_cast<size_t>(b)];
    });
    for (int32_t b : order) {
      if (r.block_rows[static_cast<size_t>(b)] == 0) continue;  // holds nothing: never a destination
      r.sorted_starts.push_back(r.block_row_offset[static_cast<size_t>(b)]);
      r.sorted_block.push_back(b);
    }
    const size_t n = r.sorted_block.size();
    int64_t uniform = n > 0 ? r.block_rows[static_cast<size_t>(r.sorted_block[0])] : 0;
    for (size_t k = 0; k < n && uniform > 0; ++k) {
      const int64_t rows_k = r.block_rows[static_cast<size_t>(r.sorted_block[k])];
      if (r.sorted_starts[k] != static_cast<int64_t>(k) * uniform || (k + 1 < n && rows_k != uniform)) uniform = 0;
    }
    r.uniform_block = uniform;
    return Status::Ok();
  }
  // The sharder routes: learn which global row each local row is, once.
  r.block_global_rows.resize(static_cast<size_t>(blocks));
  for (int32_t b = 0; b < blocks; ++b) r.block_global_rows[static_cast<size_t>(b)].assign(r.block_rows[static_cast<size_t>(b)], -1);
  constexpr int64_t kChunk = 1 << 20;
  const int64_t rows = table.config.num_embeddings;
  std::vector<int64_t> ids, local;
  std::vector<int32_t> block;
  for (int64_t begin = 0; begin < rows; begin += kChunk) {
    const int64_t n = std::min(kChunk, rows - begin);
    ids.resize(static_cast<size_t>(n));
    std::iota(ids.begin(), ids.end(), begin);
    block.resize(ids.size());
    local.resize(ids.size());
    SR_RETURN_IF_ERROR(Route(t, ids, block.data(), local.data()));
    for (int64_t i = 0; i < n; ++i) {
      auto& slot = r.block_global_rows[static_cast<size_t>(block[static_cast<size_t>(i)])]
                                      [static_cast<size_t>(local[static_cast<size_t>(i)])];
      if (slot != -1) {
        return InternalError(fmt::format("table '{}': sharder '{}' routes rows {} and {} to the same local row", table.config.name,
                                         table.sharding.sharding_type, slot, ids[static_cast<size_t>(i)]));
      }
      slot = ids[static_cast<size_t>(i)];
    }
  }
  return Status::Ok();
}

std::vector<int64_t> ShardLayout::slot_counts() const {
  std::vector<int64_t> counts;
  for (const auto& s : slots_) counts.push_back(static_cast<int64_t>(s.size()));
  return counts;
}

Status ShardLayout::Route(int32_t t, std::span<const int64_t> ids, int32_t* block, int64_t* local_row) const {
  const TableRouting& r = routing_[static_cast<size_t>(t)];
  if (r.router != nullptr) {
    const ShardedTable& table = plan_.tables[static_cast<size_t>(t)];
    const sr_table_desc desc = MakeTableDesc(table.config.name.c_str(), table.config.num_embeddings,
                                             table.config.embedding_dim, ToDLDataType(table.config.data_type));
    const int64_t n = static_cast<int64_t>(ids.size());
    DLView ids_view(ids.data(), {n}), block_view(block, {n}), local_view(local_row, {n});
    sr_route_ids_args args{};
    args.struct_size = sizeof(args);
    args.table = &desc;
    args.shards = table.placement.shards.data();
    args.num_shards = table.placement.shards.size();
    args.ids = ids_view.get();
    args.row_block = block_view.get();
    args.local_row = local_view.get();
    SR_RETURN_IF_ERROR(r.router->RouteIds(args).WithContext("table '" + table.config.name + "'"));
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t b = block[i];
      if (b < 0 || b >= static_cast<int32_t>(r.block_rows.size()) || local_row[i] < 0 ||
          local_row[i] >= r.block_rows[static_cast<size_t>(b)]) {
        return InternalError(fmt::format("table '{}': sharder '{}' routed id {} to row {} of block {}, which does not exist",
                                         table.config.name, table.sharding.sharding_type, ids[i], local_row[i], b));
      }
    }
    return Status::Ok();
  }
  if (r.uniform_block > 0) {
    const int64_t u = r.uniform_block;
    const int32_t last = static_cast<int32_t>(r.sorted_block.size()) - 1;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int32_t k = std::min(static_cast<int32_t>(ids[i] / u), last);
      block[i] = r.sorted_block[static_cast<size_t>(k)];
      local_row[i] = ids[i] - r.sorted_starts[static_cast<size_t>(k)];
    }
    return Status::Ok();
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto it = std::upper_bound(r.sorted_starts.begin(), r.sorted_starts.end(), ids[i]);
    const size_t k = static_cast<size_t>(it - r.sorted_starts.begin()) - 1;
    block[i] = r.sorted_block[k];
    local_row[i] = ids[i] - r.sorted_starts[k];
  }
  return Status::Ok();
}

int64_t ShardLayout::GlobalRow(int32_t t, int32_t block, int64_t local_row) const {
  const TableRouting& r = routing_[static_cast<size_t>(t)];
  if (r.router != nullptr) return r.block_global_rows[static_cast<size_t>(block)][static_cast<size_t>(local_row)];
  return r.block_row_offset[static_cast<size_t>(block)] + local_row;
}

}  // namespace shardrec
