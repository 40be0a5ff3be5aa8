// Topology files (planner_topology.h).
#include "shardrec/core/planner/planner_topology.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../io/json_number.h"

namespace shardrec {

namespace {

using json = nlohmann::json;

constexpr const char* kFormat = "shardrec-topology";

// A finite number >= 0 (a speed of 0 is a plan that cannot run: refused
// where it matters, by the caller).
StatusOr<double> NonNegative(const json& obj, const char* key, const std::string& where) {
  if (!obj.contains(key)) return InvalidArgumentError(where + ": \"" + key + "\" is missing");
  const json& v = obj[key];
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < 0) {
    return InvalidArgumentError(where + ": \"" + key + "\" must be a number >= 0, got " + v.dump());
  }
  return v.get<double>();
}

Status OnlyKeys(const json& obj, std::initializer_list<const char*> keys, const std::string& where) {
  if (!obj.is_object()) return InvalidArgumentError(where + ": expected an object, got " + obj.dump().substr(0, 40));
  for (const auto& [key, value] : obj.items()) {
    bool known = false;
    std::string list;
    for (const char* k : keys) {
      known |= key == k;
      list += (list.empty() ? "" : ", ") + std::string(k);
    }
    if (!known) return InvalidArgumentError(where + ": unknown key '" + key + "' (" + list + ")");
  }
  return Status::Ok();
}

StatusOr<KernelSpeed> ParseSpeed(const json& j, const std::string& where) {
  SR_RETURN_IF_ERROR(OnlyKeys(j, {"seconds_per_lookup", "seconds_per_byte"}, where));
  KernelSpeed s;
  SR_ASSIGN_OR_RETURN(s.seconds_per_lookup, NonNegative(j, "seconds_per_lookup", where));
  SR_ASSIGN_OR_RETURN(s.seconds_per_byte, NonNegative(j, "seconds_per_byte", where));
  if (s.seconds_per_lookup + s.seconds_per_byte <= 0) {
    return InvalidArgumentError(where + ": a kernel that takes no time per lookup and per byte cannot be planned for");
  }
  return s;
}

StatusOr<LinkCost> ParseLink(const json& j, const std::string& where) {
  SR_RETURN_IF_ERROR(OnlyKeys(j, {"bytes_per_s", "latency_s"}, where));
  LinkCost l;
  SR_ASSIGN_OR_RETURN(l.bytes_per_s, NonNegative(j, "bytes_per_s", where));
  SR_ASSIGN_OR_RETURN(l.latency_s, NonNegative(j, "latency_s", where));
  if (l.bytes_per_s <= 0) return InvalidArgumentError(where + ": \"bytes_per_s\" must be > 0");
  return l;
}

json SpeedJson(const KernelSpeed& s) {
  return {{"seconds_per_lookup", s.seconds_per_lookup}, {"seconds_per_byte", s.seconds_per_byte}};
}

}  // namespace

PlannerTopology DefaultTopology() {
  PlannerTopology t;
  // The cpu kernel with one thread per rank, 1M x 128 fp32 tables, uniform
  // ids (docs/benchmarks.md, "kernel"): about 30 M lookups/s forward and 6 M
  // with Adagrad's backward; on a shard that stays in the cache (what `bench
  // topology` measured here on 4096-row tables, 2026-11-25) a lookup costs
  // 1.6 ns forward and 22 ns backward, nearly whatever its width.
  KernelCost cpu{{5e-9, 5.5e-11}, {2e-8, 2.8e-10}};
  cpu.cached_max_shard_bytes = int64_t{32} << 20;
  cpu.cached_forward = {1.6e-9, 1.5e-11};
  cpu.cached_backward = {2.2e-8, 3.2e-11};
  t.kernels["cpu"] = cpu;
  // Gloo's ranks on one host exchange through shared memory: an all-to-all
  // sends about 1.9 GB/s per rank with 9 us a collective (`bench topology
  // --comm gloo --world-size 2`, 2026-11-25).
  t.intra_host = {1.9e9, 1e-5};
  t.inter_host = {1.25e9, 2e-4};  // a 10 Gb/s network
  // `bench topology`'s input-dist figure here (2026-11-25): 9 ns an id; and
  // its host work per table per step: 35-50 us.
  t.input_dist_seconds_per_id = 9e-9;
  t.seconds_per_table = 4e-5;
  return t;
}

StatusOr<PlannerTopology> ParseTopologyJson(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgumentError(source + ": not valid JSON: " + e.what());
  }
  SR_RETURN_IF_ERROR(OnlyKeys(doc,
                              {"format", "version", "ranks_per_host", "cores_per_host", "memory_bytes_per_rank", "kernels",
                               "intra_host", "inter_host", "input_dist", "per_table", "measured"},
                              source));
  if (doc.contains("format") && doc["format"] != kFormat) {
    return InvalidArgumentError(source + ": \"format\" must be \"" + std::string(kFormat) + "\", got " +
                                doc["format"].dump());
  }
  if (doc.contains("version")) {
    SR_ASSIGN_OR_RETURN(const int64_t v, JsonInteger(doc["version"], source + ": \"version\"", 1));
    if (v != 1) {
      return InvalidArgumentError(fmt::format("{}: topology version {} is newer than this shardrec reads (1)", source, v));
    }
  }
  PlannerTopology t;
  t.source = source;
  if (doc.contains("ranks_per_host")) {
    SR_ASSIGN_OR_RETURN(const int64_t r, JsonInteger(doc["ranks_per_host"], source + ": \"ranks_per_host\"", 1, 1 << 20));
    t.ranks_per_host = static_cast<int>(r);
  }
  if (doc.contains("cores_per_host")) {
    SR_ASSIGN_OR_RETURN(const int64_t c, JsonInteger(doc["cores_per_host"], source + ": \"cores_per_host\"", 1, 1 << 20));
    t.cores_per_host = static_cast<int>(c);
  }
  if (doc.contains("memory_bytes_per_rank")) {
    SR_ASSIGN_OR_RETURN(t.memory_bytes_per_rank,
                        JsonInteger(doc["memory_bytes_per_rank"], source + ": \"memory_bytes_per_rank\"", 0));
  }
  if (!doc.contains("kernels") || !doc["kernels"].is_object() || doc["kernels"].empty()) {
    return InvalidArgumentError(source + ": \"kernels\" must name at least one kernel: {\"cpu\": {\"forward\": ..., "
                                "\"backward\": ...}}");
  }
  for (const auto& [name, k] : doc["kernels"].items()) {
    const std::string where = source + ": kernel '" + name + "'";
    SR_RETURN_IF_ERROR(OnlyKeys(k, {"forward", "backward", "cached"}, where));
    if (!k.contains("forward") || !k.contains("backward")) {
      return InvalidArgumentError(where + ": needs \"forward\" and \"backward\"");
    }
    KernelCost c;
    SR_ASSIGN_OR_RETURN(c.forward, ParseSpeed(k["forward"], where + " forward"));
    SR_ASSIGN_OR_RETURN(c.backward, ParseSpeed(k["backward"], where + " backward"));
    if (k.contains("cached")) {
      const json& cached = k["cached"];
      const std::string cw = where + " cached";
      SR_RETURN_IF_ERROR(OnlyKeys(cached, {"max_shard_bytes", "forward", "backward"}, cw));
      if (!cached.contains("max_shard_bytes") || !cached.contains("forward") || !cached.contains("backward")) {
        return InvalidArgumentError(cw + ": needs \"max_shard_bytes\", \"forward\" and \"backward\"");
      }
      SR_ASSIGN_OR_RETURN(c.cached_max_shard_bytes,
                          JsonInteger(cached["max_shard_bytes"], cw + ": \"max_shard_bytes\"", 0));
      SR_ASSIGN_OR_RETURN(c.cached_forward, ParseSpeed(cached["forward"], cw + " forward"));
      SR_ASSIGN_OR_RETURN(c.cached_backward, ParseSpeed(cached["backward"], cw + " backward"));
    }
    t.kernels[name] = c;
  }
  for (const char* key : {"intra_host", "inter_host"}) {
    if (!doc.contains(key)) return InvalidArgumentError(source + ": \"" + key + "\" is missing");
  }
  SR_ASSIGN_OR_RETURN(t.intra_host, ParseLink(doc["intra_host"], source + ": intra_host"));
  SR_ASSIGN_OR_RETURN(t.inter_host, ParseLink(doc["inter_host"], source + ": inter_host"));
  if (doc.contains("input_dist")) {
    const std::string where = source + ": input_dist";
    SR_RETURN_IF_ERROR(OnlyKeys(doc["input_dist"], {"seconds_per_id"}, where));
    SR_ASSIGN_OR_RETURN(t.input_dist_seconds_per_id, NonNegative(doc["input_dist"], "seconds_per_id", where));
  }
  if (doc.contains("per_table")) {
    const std::string where = source + ": per_table";
    SR_RETURN_IF_ERROR(OnlyKeys(doc["per_table"], {"seconds"}, where));
    SR_ASSIGN_OR_RETURN(t.seconds_per_table, NonNegative(doc["per_table"], "seconds", where));
  }
  if (doc.contains("measured")) t.measured = doc["measured"].dump();
  return t;
}

StatusOr<PlannerTopology> LoadTopologyFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(SR_NOT_FOUND, path + ": cannot open the topology file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (size_t{16} << 20)) return InvalidArgumentError(path + ": a topology file over 16 MiB");
  return ParseTopologyJson(ss.str(), path);
}

std::string TopologyToJson(const PlannerTopology& t) {
  json doc = {{"format", kFormat}, {"version", 1}};
  if (t.ranks_per_host > 0) doc["ranks_per_host"] = t.ranks_per_host;
  if (t.cores_per_host > 0) doc["cores_per_host"] = t.cores_per_host;
  if (t.memory_bytes_per_rank > 0) doc["memory_bytes_per_rank"] = t.memory_bytes_per_rank;
  doc["kernels"] = json::object();
  for (const auto& [name, k] : t.kernels) {
    doc["kernels"][name] = {{"forward", SpeedJson(k.forward)}, {"backward", SpeedJson(k.backward)}};
    if (k.cached_max_shard_bytes > 0) {
      doc["kernels"][name]["cached"] = {{"max_shard_bytes", k.cached_max_shard_bytes},
                                        {"forward", SpeedJson(k.cached_forward)},
                                        {"backward", SpeedJson(k.cached_backward)}};
    }
  }
  doc["intra_host"] = {{"bytes_per_s", t.intra_host.bytes_per_s}, {"latency_s", t.intra_host.latency_s}};
  doc["inter_host"] = {{"bytes_per_s", t.inter_host.bytes_per_s}, {"latency_s", t.inter_host.latency_s}};
  if (t.input_dist_seconds_per_id > 0) doc["input_dist"] = {{"seconds_per_id", t.input_dist_seconds_per_id}};
  if (t.seconds_per_table > 0) doc["per_table"] = {{"seconds", t.seconds_per_table}};
  if (!t.measured.empty()) doc["measured"] = json::parse(t.measured);
  return doc.dump(2);
}

}  // namespace shardrec
