// Plan files, MakePlan and the plan's printed forms (sharding_plan.h).
#include "shardrec/core/sharding/sharding_plan.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "shardrec/core/tensor/tensor.h"
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
                                  "' (sharding_type, compute_kernel, ranks, sharder_options, shards)");
    }
  }
  if (p.sharding_type.empty()) return InvalidArgumentError(where + ": \"sharding_type\" is missing");
  return p;
}

int64_t RowBytes(const EmbeddingTableConfig& t) {
  return t.embedding_dim * static_cast<int64_t>(DTypeSize(ToDLDataType(t.data_type)));
}

// Bytes a shard adds to its rank: its rows x its share of the row's weight
// (elem_bytes per element) and optimizer-state bytes.
int64_t ShardBytes(const sr_shard& s, const EmbeddingTableConfig& t, int64_t elem_bytes, int64_t state_per_row) {
  const double share = static_cast<double>(s.num_cols) / static_cast<double>(t.embedding_dim);
  return s.num_rows * (s.num_cols * elem_bytes + static_cast<int64_t>(share * static_cast<double>(state_per_row)));
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
  for (const auto& t : req.tables) table_bytes.push_back(t.num_embeddings * RowBytes(t));
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
    if (p.compute_kernel.empty()) p.compute_kernel = req.default_kernel;
    if (kernels.insert(p.compute_kernel).second) {
      SR_RETURN_IF_ERROR(registry.Find(SR_KIND_KERNEL, p.compute_kernel).status().WithContext("plan: " + who));
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
    const int64_t elem = static_cast<int64_t>(DTypeSize(desc.weight_dtype));
    for (const sr_shard& s : placement.shards) {
      // Each table is bounded (kMaxTableElements); a rank's sum is checked.
      if (__builtin_add_overflow(plan.bytes_per_rank[s.rank], ShardBytes(s, t, elem, desc.state_bytes_per_row),
                                 &plan.bytes_per_rank[s.rank])) {
        return Status(SR_RESOURCE_EXHAUSTED, fmt::format("plan: {}: rank {} would hold more than 2^63 bytes", who,
                                                         s.rank));
      }
    }
    if (!req.memory_bytes_per_rank.empty()) {
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
  out += "  bytes per rank:";
  for (size_t r = 0; r < plan.bytes_per_rank.size(); ++r) out += fmt::format(" [{}] {}", r, plan.bytes_per_rank[r]);
  out += "\n";
  if (!plan.qcomm.empty()) out += "  comm codecs (forward:backward): " + plan.qcomm.ToString() + "\n";
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
  }
  if (!plan.qcomm.empty()) doc["qcomm_codecs"] = QCommToJson(plan.qcomm);
  return doc.dump(2);
}

}  // namespace shardrec
