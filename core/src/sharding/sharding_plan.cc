// Plan files, MakePlan and the plan's printed forms (sharding_plan.h).
#include "shardrec/core/sharding/sharding_plan.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "shardrec/core/tensor/tensor.h"
#include "shardrec/core/text/byte_size.h"
#include "shardrec/core/text/counted.h"
#include "../io/json_number.h"

namespace shardrec {

namespace {

using json = nlohmann::json;

StatusOr<sr_shard> ParseShard(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgumentError(where + ": a shard is {\"rows\": [offset, count], \"cols\": [offset, count], \"rank\": r}");
  for (const auto& [key, value] : j.items()) {
    if (key != "rows" && key != "cols" && key != "rank") return InvalidArgumentError(where + ": unknown key '" + key + "'");
  }
  auto pair = [&](const char* name) -> StatusOr<std::pair<int64_t, int64_t>> {
    if (!j.contains(name) || !j[name].is_array() || j[name].size() != 2) {
      return InvalidArgumentError(where + ": \"" + name + "\" must be [offset, count]");
    }
    SR_ASSIGN_OR_RETURN(int64_t offset, JsonInteger(j[name][0], where + ": \"" + name + "\" offset", 0));
    SR_ASSIGN_OR_RETURN(int64_t count, JsonInteger(j[name][1], where + ": \"" + name + "\" count", 0));
    return std::pair<int64_t, int64_t>{offset, count};
  };
  SR_ASSIGN_OR_RETURN(auto rows, pair("rows"));
  SR_ASSIGN_OR_RETURN(auto cols, pair("cols"));
  if (!j.contains("rank")) return InvalidArgumentError(where + ": \"rank\" must be an integer");
  SR_ASSIGN_OR_RETURN(const int64_t rank, JsonInteger(j["rank"], where + ": \"rank\"", 0,
                                                      std::numeric_limits<int32_t>::max()));
  sr_shard s{};
  s.struct_size = SR_STRUCT_SIZE(sr_shard, rank);
  s.row_offset = rows.first;
  s.num_rows = rows.second;
  s.col_offset = cols.first;
  s.num_cols = cols.second;
  s.rank = static_cast<int32_t>(rank);
  return s;
}

StatusOr<ParameterSharding> ParseSharding(const json& j, const std::string& where) {
  if (!j.is_object()) return InvalidArgumentError(where + ": expected an object");
  ParameterSharding p;
  for (const auto& [key, value] : j.items()) {
    if (key == "sharding_type" && value.is_string()) {
      p.sharding_type = value.get<std::string>();
    } else if (key == "compute_kernel" && value.is_string()) {
      p.compute_kernel = value.get<std::string>();
    } else if (key == "ranks" && value.is_array()) {
      for (const auto& r : value) {
        SR_ASSIGN_OR_RETURN(const int64_t rank, JsonInteger(r, where + ": \"ranks\" entry", 0,
                                                            std::numeric_limits<int32_t>::max()));
        p.ranks.push_back(static_cast<int>(rank));
      }
    } else if (key == "sharder_options" && value.is_object()) {
      for (const auto& [k, v] : value.items()) {
        p.sharder_options.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
      }
    } else if (key == "cache_params" && value.is_object()) {
      CacheParams c;
      for (const auto& [k, v] : value.items()) {
        if (!v.is_string() && !v.is_number() && !v.is_boolean()) {
          return InvalidArgumentError(where + ": \"cache_params\": \"" + k + "\" must be a string, number or boolean");
        }
        SR_RETURN_IF_ERROR(SetCacheParam(c, k, v.is_string() ? v.get<std::string>() : v.dump(), where + ": \"cache_params\""));
      }
      p.cache_params = std::move(c);
    } else if (key == "shards" && value.is_array()) {
      std::vector<sr_shard> shards;
      size_t i = 0;
      for (const auto& s : value) {
        SR_ASSIGN_OR_RETURN(sr_shard shard, ParseShard(s, fmt::format("{}: shards[{}]", where, i++)));
        shards.push_back(shard);
      }
      p.shards = std::move(shards);
    } else {
      return InvalidArgumentError(where + ": unknown or mistyped key '" + key +
                                  "' (sharding_type, compute_kernel, cache_params, ranks, sharder_options, shards)");
    }
  }
  if (p.sharding_type.empty()) return InvalidArgumentError(where + ": \"sharding_type\" is missing");
  return p;
}

// Bytes a shard adds to its rank: its rows x its share of the row's weight
// (elem_bytes per element; a whole quantized row's bytes) and
// optimizer-state bytes.
int64_t ShardBytes(const sr_shard& s, const EmbeddingTableConfig& t, int64_t elem_bytes, int64_t state_per_row) {
  const double share = static_cast<double>(s.num_cols) / static_cast<double>(t.embedding_dim);
  const int64_t weights = s.num_cols == t.embedding_dim ? t.RowBytes() : s.num_cols * elem_bytes;
  return s.num_rows * (weights + static_cast<int64_t>(share * static_cast<double>(state_per_row)));
}

// Rows a cached shard keeps in RAM at load factor `lf`: its share, whole
// sets of the directory, the overflow slots (cache_directory.h), and a
// prefetch's staging.
int64_t CachedSlots(int64_t rows, const CacheParams& c, double lf) {
  const auto share = static_cast<int64_t>(std::ceil(lf * static_cast<double>(rows)));
  const int64_t overflow = c.overflow > 0 ? c.overflow : 2 * c.ways;
  // A prefetching cache stages up to another step's rows.
  return std::min(rows, share) + c.ways + overflow * (c.prefetch_pipeline ? 2 : 1);
}

// A shard's bytes in RAM: all of it, or a cached table's cache of it.
int64_t ShardRamBytes(const sr_shard& s, const EmbeddingTableConfig& t, const ParameterSharding& p, int64_t elem,
                      int64_t state_per_row) {
  const int64_t full = ShardBytes(s, t, elem, state_per_row);
  if (!IsCachedKernel(p.compute_kernel) || !p.cache_params || !(p.cache_params->load_factor > 0) || s.num_rows == 0) {
    return full;
  }
  return CacheBytes(CachedSlots(s.num_rows, *p.cache_params, p.cache_params->load_factor), full / s.num_rows) +
         RowFileBytes(s.num_rows, *p.cache_params);
}

// Per rank, the RAM bytes of every table as the plan has it now.
std::vector<int64_t> RankRamBytes(const ShardingPlan& plan, const PlanRequest& req) {
  std::vector<int64_t> bytes(static_cast<size_t>(plan.world_size), 0);
  for (const ShardedTable& t : plan.tables) {
    const int64_t elem = static_cast<int64_t>(DTypeSize(ToDLDataType(t.config.data_type)));
    const int64_t state = req.state_bytes_per_row ? req.state_bytes_per_row(t.config) : 0;
    for (const sr_shard& s : t.placement.shards) bytes[static_cast<size_t>(s.rank)] += ShardRamBytes(s, t.config, t.sharding, elem, state);
  }
  return bytes;
}

// `c.overflow` from PlanRequest::cache_overflow when it is left 0: the
// step's ids, at most the table's rows (a step cannot bring more distinct
// ids), at least the directory's default of two sets' ways.
void FillCacheOverflow(const PlanRequest& req, const EmbeddingTableConfig& table, CacheParams& c) {
  if (c.overflow != 0) return;
  if (const auto it = req.cache_overflow.find(table.name); it != req.cache_overflow.end()) {
    c.overflow = std::clamp<int64_t>(std::min(it->second, table.num_embeddings), 2 * c.ways, int64_t{1} << 30);
    c.overflow_from_step = true;
  }
}

// The cached tables' overflow slots, for an error: "overflow slots t0
// 65536, t3 4096".
std::string OverflowText(const ShardingPlan& plan) {
  std::string out;
  for (const ShardedTable& t : plan.tables) {
    if (!IsCachedKernel(t.sharding.compute_kernel) || !t.sharding.cache_params) continue;
    const CacheParams& c = *t.sharding.cache_params;
    out += fmt::format("{}{} {}", out.empty() ? "overflow slots " : ", ", t.config.name,
                       c.overflow > 0 ? c.overflow : 2 * c.ways);
  }
  return out.empty() ? "their overflow slots" : out;
}

// A table's cache settings when its plan entry has none: cache_defaults,
// with its own step's overflow (PlanRequest::cache_overflow).
CacheParams CacheDefaultsFor(const PlanRequest& req, const EmbeddingTableConfig& table) {
  CacheParams c = req.cache_defaults;
  FillCacheOverflow(req, table, c);
  return c;
}

// The budget's rule (PlanRequest::memory_budget_per_rank): cache the
// tables holding the most bytes on the rank that sets the load factor
// until the load factor that fits every rank is at least
// kWantedLoadFactor (or no table is left to try; a table whose cache would
// take more than its rows stays whole), then give every table cached this
// way that load factor.
Status FitToBudget(const PluginRegistry& registry, ShardingPlan& plan, const PlanRequest& req) {
  constexpr double kWantedLoadFactor = 0.05;
  const int64_t budget = req.memory_budget_per_rank;
  const auto world = static_cast<size_t>(plan.world_size);
  const size_t n = plan.tables.size();
  // Per table and rank: bytes held whole, rows, and the slots a cache of
  // it holds whatever its load factor (whole sets, overflow, rounding).
  std::vector<std::vector<int64_t>> full(n, std::vector<int64_t>(world, 0)), rows(n, std::vector<int64_t>(world, 0)),
      fixed_slots_bytes(n, std::vector<int64_t>(world, 0));
  auto measure = [&](size_t t) {
    const ShardedTable& table = plan.tables[t];
    const int64_t elem = static_cast<int64_t>(DTypeSize(ToDLDataType(table.config.data_type)));
    const int64_t state = req.state_bytes_per_row ? req.state_bytes_per_row(table.config) : 0;
    const CacheParams c = table.sharding.cache_params ? *table.sharding.cache_params
                                                      : CacheDefaultsFor(req, table.config);
    std::fill(full[t].begin(), full[t].end(), 0);
    std::fill(rows[t].begin(), rows[t].end(), 0);
    std::fill(fixed_slots_bytes[t].begin(), fixed_slots_bytes[t].end(), 0);
    for (const sr_shard& s : table.placement.shards) {
      const auto r = static_cast<size_t>(s.rank);
      const int64_t bytes = ShardBytes(s, table.config, elem, state);
      full[t][r] += bytes;
      rows[t][r] += s.num_rows;
      if (s.num_rows > 0) {
        fixed_slots_bytes[t][r] += CacheBytes(CachedSlots(s.num_rows, c, 0) + 1, bytes / s.num_rows) + RowFileBytes(s.num_rows, c);
      }
    }
  };
  for (size_t t = 0; t < n; ++t) measure(t);
  // Tables whose load factor is the budget's to choose: cached without
  // one, and those this rule caches.
  std::vector<bool> derived(n, false);
  for (size_t t = 0; t < n; ++t) {
    const auto& p = plan.tables[t].sharding;
    derived[t] = IsCachedKernel(p.compute_kernel) && !(p.cache_params->load_factor > 0);
  }
  const int64_t reserved = req.cache_defaults.reserved_memory;
  // The largest load factor every rank fits (negative: a rank does not
  // fit even with none of its derived tables' rows cached), and the rank
  // that sets it.
  size_t binding = 0;
  auto fitting_load_factor = [&]() {
    double lf = 1.0;
    binding = 0;
    std::vector<int64_t> fixed = RankRamBytes(plan, req);
    for (size_t r = 0; r < world; ++r) {
      int64_t scaled = 0;
      for (size_t t = 0; t < n; ++t) {
        if (!derived[t]) continue;
        fixed[r] += fixed_slots_bytes[t][r] - full[t][r];  // counted whole so far
        // Rows plus the directory's bookkeeping, per cached row.
        scaled += full[t][r] + rows[t][r] * kCacheDirectoryBytesPerSlot;
      }
      const double room = static_cast<double>(budget - reserved - fixed[r]);
      const double rank_lf = room < 0 ? -1.0 - static_cast<double>(-room) / static_cast<double>(budget)
                                      : scaled > 0 ? room / static_cast<double>(scaled) : 1.0;
      if (rank_lf < lf) {
        lf = rank_lf;
        binding = r;
      }
    }
    return lf;
  };
  double lf = fitting_load_factor();
  std::vector<bool> tried(n, false);  // cached for a try, and kept whole: it did not help
  while (lf < kWantedLoadFactor) {
    // The table not cached yet that holds the most bytes on the rank that
    // sets the load factor.
    size_t pick = n;
    for (size_t t = 0; t < n; ++t) {
      const ShardedTable& table = plan.tables[t];
      // Quantized tables serve from memory (EmbeddingTables refuses to cache them).
      if (derived[t] || tried[t] || IsCachedKernel(table.sharding.compute_kernel) || table.placement.replicated ||
          IsRowQuantized(table.config.data_type)) {
        continue;
      }
      if (full[t][binding] > 0 && (pick == n || full[t][binding] > full[pick][binding])) pick = t;
    }
    if (pick == n) break;
    ParameterSharding& p = plan.tables[pick].sharding;
    const ParameterSharding before = p;
    p.compute_kernel = kSsdCachingKernel;
    p.cache_params = CacheDefaultsFor(req, plan.tables[pick].config);
    p.cache_params->load_factor = 0;
    SR_RETURN_IF_ERROR(ValidateCacheParams(*p.cache_params, plan.tables[pick].config).WithContext("plan"));
    SR_RETURN_IF_ERROR(registry.Find(SR_KIND_EVICTION, p.cache_params->algorithm).status().WithContext("plan: cache"));
    derived[pick] = true;
    measure(pick);
    const double cached_lf = fitting_load_factor();
    if (cached_lf <= lf) {  // a small table's fixed slots outweigh its rows: keep it whole, try the next
      p = before;
      derived[pick] = false;
      tried[pick] = true;
      measure(pick);
      lf = fitting_load_factor();
      continue;
    }
    lf = cached_lf;
  }
  if (!(lf > 0)) {
    return Status(SR_RESOURCE_EXHAUSTED,
                  fmt::format("plan: the tables do not fit a memory budget of {} per rank{}, even with every sharded "
                              "table cached: what stays in memory takes it all (data-parallel tables, caches with a "
                              "load factor of their own, and each cache's fixed slots: {} ways a set and {} for one "
                              "step's ids; cache_params ways and overflow set them)",
                              FormatByteSize(budget), reserved > 0 ? " less " + FormatByteSize(reserved) + " reserved" : "",
                              req.cache_defaults.ways, OverflowText(plan)));
  }
  // Four significant digits, rounded down: plans written out stay readable.
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(lf)));
  lf = std::floor(lf * scale) / scale;
  for (size_t t = 0; t < n; ++t) {
    if (derived[t]) plan.tables[t].sharding.cache_params->load_factor = lf;
  }
  return Status::Ok();
}

// The fields that differ from the defaults, as ParseSharding reads them.
json CacheParamsJson(const CacheParams& c) {
  const CacheParams d;
  json j = {{"algorithm", c.algorithm}};
  for (const auto& [k, v] : c.algorithm_options.items()) j["algorithm." + k] = v;
  if (c.load_factor > 0) j["load_factor"] = c.load_factor;
  if (c.reserved_memory != d.reserved_memory) j["reserved_memory"] = c.reserved_memory;
  if (!c.precision.empty()) j["precision"] = c.precision;
  if (c.prefetch_pipeline) j["prefetch_pipeline"] = true;
  if (c.ways != d.ways) j["ways"] = c.ways;
  if (c.overflow != d.overflow && !c.overflow_from_step) j["overflow"] = c.overflow;
  if (c.io_threads != d.io_threads) j["io_threads"] = c.io_threads;
  if (c.io != d.io) j["io"] = c.io;
  if (c.layout != d.layout) j["layout"] = c.layout;
  return j;
}

// The per-call options that give the sharder the plan's ranks.
StatusOr<OptionList> CallOptions(const ParameterSharding& p, const EmbeddingTableConfig& t, int world,
                                 int ranks_per_host) {
  const std::string who = "table '" + t.name + "'";
  for (int r : p.ranks) {
    if (r < 0 || r >= world) {
      return InvalidArgumentError(fmt::format("{}: rank {} is outside the world of {} ranks", who, r, world));
    }
  }
  OptionList o(p.sharder_options);
  const std::string& type = p.sharding_type;
  if (type == "table_wise" && !p.ranks.empty()) {
    if (p.ranks.size() != 1) return InvalidArgumentError(who + ": table_wise takes one rank");
    o.Set("rank", std::to_string(p.ranks[0]));
  } else if (type == "column_wise" && !p.ranks.empty()) {
    // fmt::join, not `a + std::to_string(r)`: GCC 12 at -O3 reports a false
    // -Wrestrict on that concatenation (a Release build stopped here).
    o.Set("ranks", fmt::format("{}", fmt::join(p.ranks, ",")));
  } else if (type == "table_row_wise" && !p.ranks.empty()) {
    if (p.ranks[0] % ranks_per_host != 0) {
      return InvalidArgumentError(fmt::format("{}: table_row_wise's rank {} is not the first rank of a host ({} per host)",
                                              who, p.ranks[0], ranks_per_host));
    }
    o.Set("host", std::to_string(p.ranks[0] / ranks_per_host));
  }
  return o;
}

}  // namespace

StatusOr<PlanSpec> ParsePlanJson(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgumentError(source + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object() || !doc.contains("plan") || !doc["plan"].is_object()) {
    return InvalidArgumentError(source + ": expected {\"plan\": {\"TABLE\": {\"sharding_type\": ...}, ...}}");
  }
  for (const auto& [key, value] : doc.items()) {
    if (key == "plan") continue;
    if (key != "qcomm_codecs") {
      return InvalidArgumentError(source + ": unknown key '" + key + "' (a plan file holds \"plan\" and, optionally, "
                                  "\"qcomm_codecs\")");
    }
    SR_RETURN_IF_ERROR(QCommFromJson(value, source).status());
  }
  PlanSpec spec;
  for (const auto& [table, entry] : doc["plan"].items()) {
    SR_ASSIGN_OR_RETURN(ParameterSharding p, ParseSharding(entry, source + ": table '" + table + "'"));
    spec.emplace(table, std::move(p));
  }
  return spec;
}

StatusOr<PlanSpec> LoadPlanFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Status(SR_NOT_FOUND, path.string() + ": cannot open the plan file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePlanJson(ss.str(), path.string());
}

StatusOr<QCommConfig> ParsePlanQComm(const std::string& text, const std::string& source) {
  SR_RETURN_IF_ERROR(ParsePlanJson(text, source).status());
  const json doc = json::parse(text);
  if (!doc.contains("qcomm_codecs")) return QCommConfig{};
  return QCommFromJson(doc["qcomm_codecs"], source);
}

StatusOr<QCommConfig> LoadPlanQComm(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) return Status(SR_NOT_FOUND, path.string() + ": cannot open the plan file");
  std::stringstream ss;
  ss << in.rdbuf();
  return ParsePlanQComm(ss.str(), path.string());
}

Status CheckQuantizedRowsWhole(const EmbeddingTableConfig& table, std::span<const sr_shard> shards,
                               const std::string& sharder) {
  if (!IsRowQuantized(table.data_type)) return Status::Ok();
  for (const sr_shard& s : shards) {
    if (s.num_rows == 0 || (s.col_offset == 0 && s.num_cols == table.embedding_dim)) continue;
    return InvalidArgumentError(fmt::format(
        "table '{}' is {} (row-wise quantized): its rows carry one scale and bias each and cannot be split by "
        "column, but {} gives a shard columns [{}, {}); use table_wise, row_wise, table_row_wise or data_parallel",
        table.name, DataTypeName(table.data_type), sharder, s.col_offset, s.col_offset + s.num_cols));
  }
  return Status::Ok();
}

StatusOr<ShardingPlan> MakePlan(const PluginRegistry& registry, const PlanRequest& req) {
  const int world = req.world_size, per_host = req.ranks_per_host;
  if (world < 1 || per_host < 1 || world % per_host != 0) {
    return InvalidArgumentError(fmt::format("plan: {} ranks, {} per host: hosts must hold equal numbers", world, per_host));
  }
  if (!req.memory_bytes_per_rank.empty() && static_cast<int>(req.memory_bytes_per_rank.size()) != world) {
    return InvalidArgumentError("plan: memory budgets for " + std::to_string(req.memory_bytes_per_rank.size()) +
                                " ranks in a world of " + std::to_string(world));
  }
  SR_RETURN_IF_ERROR(ValidateTables(req.tables));
  if (req.spec) {
    std::set<std::string> names;
    for (const auto& t : req.tables) names.insert(t.name);
    for (const auto& [name, p] : *req.spec) {
      if (!names.count(name)) return InvalidArgumentError("plan: table '" + name + "' is not one of the tables");
    }
  }
  ShardingPlan plan;
  plan.world_size = world;
  plan.sharder_options = req.sharder_options;
  plan.qcomm = req.qcomm;
  plan.ranks_per_host = per_host;
  plan.bytes_per_rank.assign(world, 0);
  const sr_topology topo =
      MakeTopology(world, per_host, req.memory_bytes_per_rank.empty() ? nullptr : req.memory_bytes_per_rank.data());
  // One sharder object per type (created with its component options) and
  // one registry lookup per kernel, however many tables use them.
  std::map<std::string, Sharder> sharders;
  std::set<std::string> kernels;

  // Largest tables first, so the balanced defaults place the big ones first.
  std::vector<size_t> order(req.tables.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<int64_t> table_bytes;
  for (const auto& t : req.tables) table_bytes.push_back(t.num_embeddings * t.RowBytes());
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return table_bytes[a] > table_bytes[b]; });
  plan.tables.resize(req.tables.size());
  for (size_t i : order) {
    const EmbeddingTableConfig& t = req.tables[i];
    const std::string who = "table '" + t.name + "'";
    ParameterSharding p;
    if (req.spec) {
      auto it = req.spec->find(t.name);
      if (it == req.spec->end()) return InvalidArgumentError("plan: " + who + " has no entry in the plan");
      p = it->second;
    } else {
      p.sharding_type = req.sharder.empty() ? "table_wise" : req.sharder;
    }
    if (p.compute_kernel.empty() || p.compute_kernel == kFusedKernel) p.compute_kernel = req.default_kernel;
    const bool cached = IsCachedKernel(p.compute_kernel);
    if (cached) {
      if (!p.cache_params) p.cache_params = req.cache_defaults;
      FillCacheOverflow(req, t, *p.cache_params);
      SR_RETURN_IF_ERROR(ValidateCacheParams(*p.cache_params, t).WithContext("plan"));
      if (p.sharding_type == "data_parallel") {
        return InvalidArgumentError("plan: " + who + ": data_parallel keeps the whole table on every rank; a cached "
                                    "table (fused_ssd_caching) must be sharded");
      }
      SR_RETURN_IF_ERROR(registry.Find(SR_KIND_EVICTION, p.cache_params->algorithm)
                             .status()
                             .WithContext("plan: " + who + ": cache_params algorithm"));
      if (!(p.cache_params->load_factor > 0) && req.memory_budget_per_rank <= 0) {
        return InvalidArgumentError("plan: " + who + ": fused_ssd_caching without a load_factor needs a memory budget "
                                    "to derive it from (--memory-budget)");
      }
    } else if (p.cache_params) {
      return InvalidArgumentError("plan: " + who + ": cache_params are for compute_kernel \"" + kSsdCachingKernel +
                                  "\", not \"" + p.compute_kernel + "\"");
    }
    const std::string& kernel = cached ? req.default_kernel : p.compute_kernel;
    if (kernels.insert(kernel).second) {
      SR_RETURN_IF_ERROR(registry.Find(SR_KIND_KERNEL, kernel).status().WithContext("plan: " + who));
    }
    // Unplaced ranks: the least-loaded rank (or host) takes the table.
    const auto least = std::min_element(plan.bytes_per_rank.begin(), plan.bytes_per_rank.end());
    const int lightest = static_cast<int>(least - plan.bytes_per_rank.begin());
    if (p.ranks.empty() && !p.shards) {
      if (p.sharding_type == "table_wise") p.ranks = {lightest};
      if (p.sharding_type == "table_row_wise") p.ranks = {lightest / per_host * per_host};
    }
    const sr_table_desc desc = MakeTableDesc(t.name.c_str(), t.num_embeddings, t.embedding_dim,
                                             ToDLDataType(t.data_type),
                                             req.state_bytes_per_row ? req.state_bytes_per_row(t) : 0);
    TablePlacement placement;
    if (p.shards) {
      placement.shards = *p.shards;
      placement.replicated = p.sharding_type == "data_parallel";
      if (std::string why = ValidatePlacement(placement, desc, topo); !why.empty()) {
        return InvalidArgumentError("plan: " + who + ": " + why);
      }
    } else {
      auto it = sharders.find(p.sharding_type);
      if (it == sharders.end()) {
        auto ref = registry.Find(SR_KIND_SHARDER, p.sharding_type);
        if (!ref.ok()) return ref.status().WithContext("plan: " + who);
        SR_ASSIGN_OR_RETURN(Sharder created,
                            Sharder::Create(ref.value(), OptionsOf(req.sharder_options, p.sharding_type)));
        it = sharders.emplace(p.sharding_type, std::move(created)).first;
      }
      SR_ASSIGN_OR_RETURN(OptionList call, CallOptions(p, t, world, per_host));
      SR_ASSIGN_OR_RETURN(placement, PlaceTable(it->second, desc, topo, call));
    }
    SR_RETURN_IF_ERROR(CheckQuantizedRowsWhole(t, placement.shards, p.sharding_type).WithContext("plan"));
    const int64_t elem = static_cast<int64_t>(DTypeSize(desc.weight_dtype));
    for (const sr_shard& s : placement.shards) {
      // Each table is bounded (kMaxTableElements); a rank's sum is checked.
      if (__builtin_add_overflow(plan.bytes_per_rank[s.rank], ShardRamBytes(s, t, p, elem, desc.state_bytes_per_row),
                                 &plan.bytes_per_rank[s.rank])) {
        return Status(SR_RESOURCE_EXHAUSTED, fmt::format("plan: {}: rank {} would hold more than 2^63 bytes", who,
                                                         s.rank));
      }
    }
    if (!req.memory_bytes_per_rank.empty() && req.memory_budget_per_rank <= 0) {
      for (int r = 0; r < world; ++r) {  // in rank order, so the first rank over budget is named
        if (plan.bytes_per_rank[r] > req.memory_bytes_per_rank[r]) {
          return Status(SR_RESOURCE_EXHAUSTED,
                        fmt::format("plan: {} does not fit: rank {} would hold {} bytes, its budget is {}", who, r,
                                    plan.bytes_per_rank[r], req.memory_bytes_per_rank[r]));
        }
      }
    }
    if (p.ranks.empty()) {
      for (const sr_shard& s : placement.shards) p.ranks.push_back(s.rank);
    }
    plan.tables[i] = ShardedTable{t, std::move(p), std::move(placement)};
  }
  if (req.memory_budget_per_rank > 0) {
    SR_RETURN_IF_ERROR(FitToBudget(registry, plan, req));
    plan.bytes_per_rank = RankRamBytes(plan, req);
    for (int r = 0; r < world; ++r) {
      if (plan.bytes_per_rank[static_cast<size_t>(r)] > req.memory_budget_per_rank) {
        return Status(SR_RESOURCE_EXHAUSTED,
                      fmt::format("plan: rank {} would hold {} in memory, over its budget of {}, with every sharded "
                                  "table it holds cached", r, FormatByteSize(plan.bytes_per_rank[static_cast<size_t>(r)]),
                                  FormatByteSize(req.memory_budget_per_rank)));
      }
    }
  }
  return plan;
}

std::string FormatPlan(const ShardingPlan& plan) {
  std::string out = fmt::format("sharding plan: {}, {} per host\n", Counted(plan.world_size, "rank"),
                                plan.ranks_per_host);
  // Columns as wide as their longest entry: plugins name their own sharders
  // and kernels, and table names come from the user.
  size_t name_w = 5, type_w = 4, kernel_w = 6;
  for (const ShardedTable& t : plan.tables) {
    name_w = std::max(name_w, t.config.name.size());
    type_w = std::max(type_w, t.sharding.sharding_type.size());
    kernel_w = std::max(kernel_w, t.sharding.compute_kernel.size());
  }
  out += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}\n", "table", name_w, "type", type_w, "kernel", kernel_w,
                     "shards (rows x cols @ rank)");
  for (const ShardedTable& t : plan.tables) {
    std::string shards;
    for (const sr_shard& s : t.placement.shards) {
      shards += fmt::format("{}{}x{} @{}", shards.empty() ? "" : ", ", s.num_rows, s.num_cols, s.rank);
    }
    out += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {}\n", t.config.name, name_w, t.sharding.sharding_type, type_w,
                       t.sharding.compute_kernel, kernel_w, shards);
  }
  out += FormatPlanCaches(plan);
  out += "  bytes per rank:";
  for (size_t r = 0; r < plan.bytes_per_rank.size(); ++r) out += fmt::format(" [{}] {}", r, plan.bytes_per_rank[r]);
  out += "\n";
  if (!plan.qcomm.empty()) out += "  comm codecs (forward:backward): " + plan.qcomm.ToString() + "\n";
  return out;
}

std::string FormatPlanCaches(const ShardingPlan& plan) {
  std::string out;
  for (const ShardedTable& t : plan.tables) {
    if (!IsCachedKernel(t.sharding.compute_kernel) || !t.sharding.cache_params) continue;
    out += fmt::format("  cached {}: {} (rows on file, {:.3g}% of them in RAM)\n", t.config.name,
                       CacheParamsToString(*t.sharding.cache_params), 100 * t.sharding.cache_params->load_factor);
  }
  return out;
}

std::string PlanToJson(const ShardingPlan& plan) {
  json doc = {{"plan", json::object()}};
  for (const ShardedTable& t : plan.tables) {
    json shards = json::array();
    for (const sr_shard& s : t.placement.shards) {
      shards.push_back({{"rows", {s.row_offset, s.num_rows}}, {"cols", {s.col_offset, s.num_cols}}, {"rank", s.rank}});
    }
    doc["plan"][t.config.name] = {{"sharding_type", t.sharding.sharding_type},
                                  {"compute_kernel", t.sharding.compute_kernel},
                                  {"ranks", t.sharding.ranks},
                                  {"shards", shards}};
    if (t.sharding.cache_params) doc["plan"][t.config.name]["cache_params"] = CacheParamsJson(*t.sharding.cache_params);
  }
  if (!plan.qcomm.empty()) doc["qcomm_codecs"] = QCommToJson(plan.qcomm);
  return doc.dump(2);
}

}  // namespace shardrec
