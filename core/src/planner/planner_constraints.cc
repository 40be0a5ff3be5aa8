// Constraints files (planner_constraints.h).
#include "shardrec/core/planner/planner_constraints.h"

#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../io/json_number.h"

namespace shardrec {

namespace {

using json = nlohmann::json;

StatusOr<std::vector<std::string>> Names(const json& v, const std::string& where) {
  if (!v.is_array()) return InvalidArgumentError(where + " must be a list of names");
  std::vector<std::string> out;
  for (const auto& n : v) {
    if (!n.is_string() || n.get<std::string>().empty()) {
      return InvalidArgumentError(where + ": every entry must be a non-empty name, got " + n.dump());
    }
    out.push_back(n.get<std::string>());
  }
  if (out.empty()) return InvalidArgumentError(where + " is empty: leave it out to allow any");
  return out;
}

}  // namespace

StatusOr<PlannerConstraints> ParseConstraintsJson(const std::string& text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgumentError(source + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object() || doc.size() != 1 || !doc.contains("constraints") || !doc["constraints"].is_object()) {
    return InvalidArgumentError(source + ": expected {\"constraints\": {\"TABLE\": {\"sharding_types\": [...], "
                                "\"compute_kernels\": [...], \"ranks\": [...], \"sharder_options\": {...}}}}");
  }
  PlannerConstraints out;
  for (const auto& [table, entry] : doc["constraints"].items()) {
    const std::string where = source + ": table '" + table + "'";
    if (!entry.is_object()) return InvalidArgumentError(where + ": expected an object");
    TableConstraint c;
    for (const auto& [key, value] : entry.items()) {
      if (key == "sharding_types") {
        SR_ASSIGN_OR_RETURN(c.sharding_types, Names(value, where + ": \"sharding_types\""));
      } else if (key == "compute_kernels") {
        SR_ASSIGN_OR_RETURN(c.compute_kernels, Names(value, where + ": \"compute_kernels\""));
      } else if (key == "ranks") {
        if (!value.is_array() || value.empty()) {
          return InvalidArgumentError(where + ": \"ranks\" must be a non-empty list of ranks");
        }
        std::set<int> seen;
        for (const auto& r : value) {
          SR_ASSIGN_OR_RETURN(const int64_t rank, JsonInteger(r, where + ": \"ranks\" entry", 0,
                                                              std::numeric_limits<int32_t>::max()));
          if (!seen.insert(static_cast<int>(rank)).second) {
            return InvalidArgumentError(where + ": \"ranks\" lists rank " + std::to_string(rank) + " twice");
          }
          c.ranks.push_back(static_cast<int>(rank));
        }
      } else if (key == "sharder_options" && value.is_object()) {
        for (const auto& [k, v] : value.items()) c.sharder_options.emplace_back(k, v.is_string() ? v.get<std::string>() : v.dump());
      } else {
        return InvalidArgumentError(where + ": unknown or mistyped key '" + key +
                                    "' (sharding_types, compute_kernels, ranks, sharder_options)");
      }
    }
    out.emplace(table, std::move(c));
  }
  return out;
}

StatusOr<PlannerConstraints> LoadConstraintsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status(SR_NOT_FOUND, path + ": cannot open the constraints file");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().size() > (size_t{16} << 20)) return InvalidArgumentError(path + ": a constraints file over 16 MiB");
  return ParseConstraintsJson(ss.str(), path);
}

}  // namespace shardrec
