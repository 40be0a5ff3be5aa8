#include "shardrec/core/managed_collision/managed_collision_collection.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "fused_dist.h"

namespace shardrec {
namespace {

// Where one table's features sit in a KJT's values: [begin, end) per feature present.
std::vector<std::pair<int64_t, int64_t>> FeatureRanges(const KeyedJaggedTensor& kjt,
                                                       const std::vector<std::string>& features) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const auto& offsets = kjt.offsets();
  for (const std::string& f : features) {
    const int k = kjt.KeyIndex(f);
    if (k < 0) continue;
    out.emplace_back(offsets[static_cast<size_t>(kjt.BagOffset(k))], offsets[static_cast<size_t>(kjt.BagOffset(k + 1))]);
  }
  return out;
}

std::vector<int64_t> Gather(const std::vector<int64_t>& values, const std::vector<std::pair<int64_t, int64_t>>& ranges) {
  std::vector<int64_t> ids;
  for (auto [b, e] : ranges) ids.insert(ids.end(), values.begin() + b, values.begin() + e);
  return ids;
}

void Scatter(const std::vector<int64_t>& rows, const std::vector<std::pair<int64_t, int64_t>>& ranges,
             std::vector<int64_t>& values) {
  size_t k = 0;
  for (auto [b, e] : ranges) {
    std::copy_n(rows.begin() + static_cast<std::ptrdiff_t>(k), e - b, values.begin() + b);
    k += static_cast<size_t>(e - b);
  }
}

StatusOr<KeyedJaggedTensor> WithValues(const KeyedJaggedTensor& input, std::vector<int64_t> values) {
  return KeyedJaggedTensor::FromLengths(input.keys(), std::move(values), input.lengths(), input.weights(),
                                        input.variable_stride_per_key() ? input.stride_per_key()
                                                                        : std::vector<int64_t>{});
}

struct TableFeatures {
  std::vector<std::string> features;
  int64_t rows = 0;
};

StatusOr<std::map<std::string, TableFeatures>> ManagedFeatures(const std::vector<EmbeddingTableConfig>& tables,
                                                                const ManagedCollisionConfigs& managed) {
  SR_RETURN_IF_ERROR(ValidateManagedTables(tables, managed));
  std::map<std::string, TableFeatures> out;
  for (const auto& t : tables) {
    if (managed.count(t.name)) out[t.name] = {t.feature_names, t.num_embeddings};
  }
  return out;
}

}  // namespace

Status ValidateManagedTables(const std::vector<EmbeddingTableConfig>& tables, const ManagedCollisionConfigs& managed) {
  for (const auto& [name, config] : managed) {
    const std::string& wanted = name;  // clang 14 cannot capture a structured binding
    auto it = std::find_if(tables.begin(), tables.end(), [&](const auto& t) { return t.name == wanted; });
    if (it == tables.end()) {
      std::string names;
      for (const auto& t : tables) names += (names.empty() ? "" : ", ") + t.name;
      return NotFoundError("managed collision names table '" + name + "', which does not exist (tables: " + names + ")");
    }
    SR_RETURN_IF_ERROR(ValidateManagedCollision(name, config));
    if (config.num_rows() != it->num_embeddings) {
      return InvalidArgumentError(fmt::format(
          "table {}: managed collision maps ids onto zch_size + mch_size = {} rows, but the table has {} "
          "(num_embeddings must equal zch_size + mch_size)",
          name, config.num_rows(), it->num_embeddings));
    }
  }
  return Status::Ok();
}

StatusOr<ManagedCollisionConfigs> ManagedCollisionFromTables(const std::vector<EmbeddingTableConfig>& tables) {
  ManagedCollisionConfigs out;
  for (const auto& t : tables) {
    if (t.managed_collision.empty()) continue;
    SR_ASSIGN_OR_RETURN(out[t.name], ParseManagedCollision(t.name, t.managed_collision, t.num_embeddings));
  }
  return out;
}

// ---- unsharded ---------------------------------------------------------

StatusOr<ManagedCollisionCollection> ManagedCollisionCollection::Create(const PluginRegistry& registry,
                                                                        const std::vector<EmbeddingTableConfig>& tables,
                                                                        const ManagedCollisionConfigs& managed) {
  SR_ASSIGN_OR_RETURN(auto features, ManagedFeatures(tables, managed));
  std::vector<MchManagedCollisionModule> modules;
  std::vector<Managed> entries;
  for (const auto& t : tables) {
    auto it = managed.find(t.name);
    if (it == managed.end()) continue;
    SR_ASSIGN_OR_RETURN(auto module, MchManagedCollisionModule::Create(registry, t.name, it->second));
    entries.push_back({modules.size(), features[t.name].features});
    modules.push_back(std::move(module));
  }
  return ManagedCollisionCollection(std::move(modules), std::move(entries));
}

StatusOr<KeyedJaggedTensor> ManagedCollisionCollection::Forward(const KeyedJaggedTensor& input, bool training) {
  std::vector<int64_t> values = input.values().ToVector();
  std::vector<std::vector<int64_t>> ids(managed_.size());
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(managed_.size());
  for (size_t m = 0; m < managed_.size(); ++m) {
    ranges[m] = FeatureRanges(input, managed_[m].features);
    ids[m] = Gather(values, ranges[m]);
    MchManagedCollisionModule& module = modules_[managed_[m].module];
    module.Preprocess(ids[m]);
    if (Status st = module.Stage(ids[m], training); !st.ok()) {
      for (size_t k = 0; k < m; ++k) modules_[managed_[k].module].Discard();
      return st;
    }
  }
  std::vector<int64_t> rows;
  for (size_t m = 0; m < managed_.size(); ++m) {
    rows.resize(ids[m].size());
    modules_[managed_[m].module].Apply(ids[m], rows);
    Scatter(rows, ranges[m], values);
  }
  return WithValues(input, std::move(values));
}

std::map<std::string, std::vector<int64_t>> ManagedCollisionCollection::Evict() {
  std::map<std::string, std::vector<int64_t>> out;
  for (auto& module : modules_) {
    std::vector<int64_t> rows = module.TakeEvictedRows();
    if (!rows.empty()) out[module.table()] = std::move(rows);
  }
  return out;
}

std::map<std::string, ManagedCollisionStats> ManagedCollisionCollection::Stats() const {
  std::map<std::string, ManagedCollisionStats> out;
  for (const auto& module : modules_) out[module.table()] = module.stats();
  return out;
}

// ---- sharded -----------------------------------------------------------

StatusOr<ShardedManagedCollisionCollection> ShardedManagedCollisionCollection::Create(
    const PluginRegistry& registry, const ProcessGroup& group, const std::vector<EmbeddingTableConfig>& tables,
    const ManagedCollisionConfigs& managed, const ShardLayout* layout) {
  SR_ASSIGN_OR_RETURN(auto features, ManagedFeatures(tables, managed));
  const int64_t world = group.world_size(), rank = group.rank();
  if (layout != nullptr && layout->world_size() != world) {
    return InvalidArgumentError(fmt::format("managed collision: the plan is for {} ranks, the group has {}",
                                            layout->world_size(), world));
  }
  std::vector<MchManagedCollisionModule> modules;
  std::vector<Managed> entries;
  std::vector<Fused> fused;
  IdRoutes routes;
  std::map<std::string, std::string> dist;
  for (const auto& t : tables) {
    auto it = managed.find(t.name);
    if (it == managed.end()) continue;
    const ManagedCollisionConfig& config = it->second;
    const int64_t buckets = config.buckets;
    // Fused where the layout puts every bucket's rows on one rank.
    int32_t pt = -1;
    mc::BucketPlacement placed{{}, "as asked (no embedding plan given)"};
    if (layout != nullptr) {
      const auto& planned = layout->plan().tables;
      for (size_t k = 0; k < planned.size(); ++k) {
        if (planned[k].config.name == t.name) pt = static_cast<int32_t>(k);
      }
      placed = pt < 0 ? mc::BucketPlacement{{}, "the embedding's plan has no such table"}
                      : mc::PlaceBuckets(*layout, pt, config);
    }
    if (!placed.bucket_block.empty()) {
      const TableRouting& routing = layout->routing(pt);
      const auto& shards = layout->plan().tables[static_cast<size_t>(pt)].placement.shards;
      Fused entry{modules.size(), {}, 0, 0};
      BucketRange mine{0, 0};
      for (int64_t b = 0; b < buckets; ++b) {
        const int32_t blk = placed.bucket_block[static_cast<size_t>(b)];
        const auto& owner = shards[static_cast<size_t>(routing.block_shards[static_cast<size_t>(blk)][0])];
        if (owner.rank != rank) continue;
        if (mine.last == mine.first) mine.first = b;  // a rank's buckets are consecutive: it holds one block
        mine.last = b + 1;
        entry.first_row = routing.block_row_offset[static_cast<size_t>(blk)];
        entry.num_rows = routing.block_rows[static_cast<size_t>(blk)];
      }
      const auto& slots = layout->slots(static_cast<int>(rank));
      for (size_t k = 0; k < slots.size(); ++k) {
        if (slots[k].table == pt) entry.keys.push_back(k);
      }
      SR_ASSIGN_OR_RETURN(auto module, MchManagedCollisionModule::Create(registry, t.name, config, mine));
      routes.resize(layout->plan().tables.size());
      routes[static_cast<size_t>(pt)] = [config, blocks = std::move(placed.bucket_block)](std::span<int64_t> ids,
                                                                                          int32_t* block) {
        PreprocessIds(config, ids);
        for (size_t i = 0; i < ids.size(); ++i) block[i] = blocks[static_cast<size_t>(BucketOfId(config, ids[i]))];
      };
      dist[t.name] = "fused";
      fused.push_back(std::move(entry));
      modules.push_back(std::move(module));
      continue;
    }
    dist[t.name] = "separate: " + placed.why;
    Managed entry{modules.size(), features[t.name].features, std::vector<int>(static_cast<size_t>(buckets))};
    for (int64_t r = 0; r < world; ++r) {
      for (int64_t b = r * buckets / world; b < (r + 1) * buckets / world; ++b) {
        entry.bucket_rank[static_cast<size_t>(b)] = static_cast<int>(r);
      }
    }
    const BucketRange mine{rank * buckets / world, (rank + 1) * buckets / world};
    SR_ASSIGN_OR_RETURN(auto module, MchManagedCollisionModule::Create(registry, t.name, config, mine));
    entries.push_back(std::move(entry));
    modules.push_back(std::move(module));
  }
  ShardedManagedCollisionCollection out(group, std::move(modules), std::move(entries));
  out.fused_ = std::move(fused);
  out.routes_ = std::move(routes);
  out.dist_ = std::move(dist);
  return out;
}

StatusOr<const ProcessGroup*> ShardedManagedCollisionCollection::GroupFor(const ProcessGroup* via) const {
  if (via == nullptr) return group_;
  if (via->world_size() != group_->world_size() || via->rank() != group_->rank()) {
    return InvalidArgumentError(fmt::format("managed collision: the group to send on (rank {} of {}) is not the "
                                            "collection's (rank {} of {})",
                                            via->rank(), via->world_size(), group_->rank(), group_->world_size()));
  }
  return via;
}

StatusOr<KeyedJaggedTensor> ShardedManagedCollisionCollection::Forward(const KeyedJaggedTensor& input, bool training,
                                                                      const ProcessGroup* via) {
  if (managed_.empty()) return input;  // nothing managed: no collectives
  SR_ASSIGN_OR_RETURN(const ProcessGroup* group, GroupFor(via));
  const size_t world = static_cast<size_t>(group->world_size()), tables = managed_.size();
  std::vector<int64_t> values = input.values().ToVector();
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges(tables);
  std::vector<std::vector<int64_t>> ids(tables), dest(tables);
  // Counts per (destination, table), destination-major: the send layout.
  std::vector<int64_t> send_counts(world * tables, 0);
  for (size_t m = 0; m < tables; ++m) {
    ranges[m] = FeatureRanges(input, managed_[m].features);
    ids[m] = Gather(values, ranges[m]);
    const MchManagedCollisionModule& module = modules_[managed_[m].module];
    module.Preprocess(ids[m]);
    dest[m].resize(ids[m].size());
    for (size_t i = 0; i < ids[m].size(); ++i) {
      const int d = managed_[m].bucket_rank[static_cast<size_t>(module.BucketOf(ids[m][i]))];
      dest[m][i] = d;
      ++send_counts[static_cast<size_t>(d) * tables + m];
    }
  }
  std::vector<int64_t> cursor(world * tables + 1, 0);
  for (size_t k = 0; k < world * tables; ++k) cursor[k + 1] = cursor[k] + send_counts[k];
  const int64_t total_send = cursor.back();
  std::vector<int64_t> send(static_cast<size_t>(total_send));
  std::vector<std::vector<int64_t>> send_pos(tables);
  for (size_t m = 0; m < tables; ++m) {
    send_pos[m].resize(ids[m].size());
    for (size_t i = 0; i < ids[m].size(); ++i) {
      const size_t k = static_cast<size_t>(dest[m][i]) * tables + m;
      send_pos[m][i] = cursor[k];
      send[static_cast<size_t>(cursor[k]++)] = ids[m][i];
    }
  }

  // How many ids of each table every rank sends here.
  std::vector<int64_t> per_rank(world, static_cast<int64_t>(tables));
  Tensor recv_counts_t = Tensor::Empty(dtype::kInt64, {static_cast<int64_t>(world * tables)});
  SR_RETURN_IF_ERROR(
      group->AllToAllV(Tensor::FromVector(send_counts), per_rank, &recv_counts_t, per_rank));
  const int64_t* recv_counts = recv_counts_t.data<int64_t>();
  std::vector<int64_t> send_per_rank(world, 0), recv_per_rank(world, 0);
  for (size_t r = 0; r < world; ++r) {
    for (size_t m = 0; m < tables; ++m) {
      send_per_rank[r] += send_counts[r * tables + m];
      recv_per_rank[r] += recv_counts[r * tables + m];
    }
  }
  int64_t total_recv = 0;
  for (int64_t c : recv_per_rank) total_recv += c;
  Tensor recv_t = Tensor::Empty(dtype::kInt64, {total_recv});
  SR_RETURN_IF_ERROR(group->AllToAllV(Tensor::FromVector(send), send_per_rank, &recv_t, recv_per_rank));
  const int64_t* recv = recv_t.data<int64_t>();

  // Each table's received ids, source-major, and where each came from.
  std::vector<std::vector<int64_t>> local(tables), local_pos(tables);
  int64_t at = 0;
  for (size_t r = 0; r < world; ++r) {
    for (size_t m = 0; m < tables; ++m) {
      const int64_t c = recv_counts[r * tables + m];
      for (int64_t i = 0; i < c; ++i, ++at) {
        local[m].push_back(recv[at]);
        local_pos[m].push_back(at);
      }
    }
  }
  // Stage every table; a due round is agreed on by every rank before any applies.
  std::vector<MchManagedCollisionModule*> modules;
  for (const Managed& m : managed_) modules.push_back(&modules_[m.module]);
  bool due = false;
  SR_RETURN_IF_ERROR(mc::StageTogether(modules, local, training, *group, &due));
  round_pending_ = round_pending_ || due;

  std::vector<int64_t> back(static_cast<size_t>(total_recv)), rows;
  for (size_t m = 0; m < tables; ++m) {
    rows.resize(local[m].size());
    modules_[managed_[m].module].Apply(local[m], rows);
    for (size_t i = 0; i < rows.size(); ++i) back[static_cast<size_t>(local_pos[m][i])] = rows[i];
  }
  Tensor returned = Tensor::Empty(dtype::kInt64, {total_send});
  SR_RETURN_IF_ERROR(group->AllToAllV(Tensor::FromVector(back), recv_per_rank, &returned, send_per_rank));
  const int64_t* got = returned.data<int64_t>();
  for (size_t m = 0; m < tables; ++m) {
    rows.resize(ids[m].size());
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = got[send_pos[m][i]];
    Scatter(rows, ranges[m], values);
  }
  return WithValues(input, std::move(values));
}

StatusOr<std::map<std::string, std::vector<int64_t>>> ShardedManagedCollisionCollection::Evict(const ProcessGroup* via) {
  std::map<std::string, std::vector<int64_t>> out;
  for (const Fused& f : fused_) {  // rows of this rank's own shard: reset here, gathered nowhere
    std::vector<int64_t> rows = modules_[f.module].TakeEvictedRows();
    if (!rows.empty()) out[modules_[f.module].table()] = std::move(rows);
  }
  if (!round_pending_) return out;  // every rank knows: rounds run at the same steps everywhere
  SR_ASSIGN_OR_RETURN(const ProcessGroup* group, GroupFor(via));
  round_pending_ = false;
  const size_t world = static_cast<size_t>(group->world_size()), tables = managed_.size();
  std::vector<int64_t> counts(tables), rows;
  for (size_t m = 0; m < tables; ++m) {
    std::vector<int64_t> mine = modules_[managed_[m].module].TakeEvictedRows();
    counts[m] = static_cast<int64_t>(mine.size());
    rows.insert(rows.end(), mine.begin(), mine.end());
  }
  Tensor all_counts = Tensor::Empty(dtype::kInt64, {static_cast<int64_t>(world * tables)});
  SR_RETURN_IF_ERROR(group->AllGatherV(Tensor::FromVector(counts), &all_counts,
                                        std::vector<int64_t>(world, static_cast<int64_t>(tables))));
  const int64_t* c = all_counts.data<int64_t>();
  std::vector<int64_t> per_rank(world, 0);
  int64_t total = 0;
  for (size_t r = 0; r < world; ++r) {
    for (size_t m = 0; m < tables; ++m) per_rank[r] += c[r * tables + m];
    total += per_rank[r];
  }
  Tensor all_rows = Tensor::Empty(dtype::kInt64, {total});
  SR_RETURN_IF_ERROR(group->AllGatherV(Tensor::FromVector(rows), &all_rows, per_rank));
  const int64_t* g = all_rows.data<int64_t>();
  int64_t at = 0;
  std::vector<std::vector<int64_t>> per_table(tables);
  for (size_t r = 0; r < world; ++r) {
    for (size_t m = 0; m < tables; ++m) {
      per_table[m].insert(per_table[m].end(), g + at, g + at + c[r * tables + m]);
      at += c[r * tables + m];
    }
  }
  for (size_t m = 0; m < tables; ++m) {
    if (per_table[m].empty()) continue;
    std::sort(per_table[m].begin(), per_table[m].end());
    out[modules_[managed_[m].module].table()] = std::move(per_table[m]);
  }
  return out;
}

StatusOr<std::map<std::string, ManagedCollisionStats>> ShardedManagedCollisionCollection::Stats() const {
  constexpr size_t kFields = 10;
  std::vector<int64_t> mine;
  for (const auto& module : modules_) {
    const ManagedCollisionStats s = module.stats();
    mine.insert(mine.end(), {s.lookups, s.hits, s.defaulted, s.residual, s.admissions, s.refusals, s.evictions,
                             s.rounds, s.occupied, s.capacity});
  }
  Tensor sum = Tensor::Empty(dtype::kInt64, {static_cast<int64_t>(mine.size())});
  SR_RETURN_IF_ERROR(group_->AllReduce(Tensor::FromVector(mine), &sum, SR_REDUCE_SUM));
  const int64_t* v = sum.data<int64_t>();
  std::map<std::string, ManagedCollisionStats> out;
  for (size_t m = 0; m < modules_.size(); ++m) {
    const int64_t* f = v + m * kFields;
    // Rounds run per bucket on every rank; the sum counts each bucket once.
    out[modules_[m].table()] = {f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9]};
  }
  return out;
}

}  // namespace shardrec
