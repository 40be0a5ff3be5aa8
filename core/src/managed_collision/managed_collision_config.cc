#include "shardrec/core/managed_collision/managed_collision_config.h"

#include <charconv>
#include <filesystem>
#include <sstream>

#include "shardrec/core/managed_collision/mch_module.h"

namespace shardrec {

const char* IdHashName(IdHash h) { return h == IdHash::kFmix64 ? "fmix64" : "none"; }

const char* ThresholdFilterName(ThresholdFilter f) {
  switch (f) {
    case ThresholdFilter::kAverage: return "average";
    case ThresholdFilter::kDynamic: return "dynamic";
    default: return "none";
  }
}

const char* EvictionModeName(EvictionMode m) { return m == EvictionMode::kExact ? "exact" : "fast"; }

Status ValidateManagedCollision(const std::string& table, const ManagedCollisionConfig& c) {
  auto bad = [&](const std::string& what) {
    return Status(SR_INVALID_ARGUMENT, "table " + table + ": managed collision: " + what);
  };
  if (c.zch_size <= 0) return bad("zch_size must be > 0 (got " + std::to_string(c.zch_size) + ")");
  if (c.eviction_interval <= 0) {
    return bad("eviction_interval must be > 0 training steps (got " + std::to_string(c.eviction_interval) + ")");
  }
  if (c.mch_size < 0) return bad("mch_size must be >= 0 (got " + std::to_string(c.mch_size) + ")");
  if (c.buckets <= 0) return bad("buckets must be > 0 (got " + std::to_string(c.buckets) + ")");
  if (c.zch_size < 2 * c.buckets) {
    return bad("zch_size " + std::to_string(c.zch_size) + " leaves fewer than 2 slots per bucket for " +
               std::to_string(c.buckets) + " buckets (each bucket keeps one default row)");
  }
  if (c.mch_size > 0 && c.mch_size < c.buckets) {
    return bad("mch_size " + std::to_string(c.mch_size) + " is smaller than the " + std::to_string(c.buckets) +
               " buckets it is split over");
  }
  if (c.input_hash_size <= 0) return bad("input_hash_size must be > 0");
  if (c.policy.empty()) return bad("policy must name an eviction policy");
  if (!(c.threshold_skew_multiplier > 0)) return bad("threshold_skew_multiplier must be > 0");
  return Status::Ok();
}

namespace {

StatusOr<int64_t> ParseInt(const std::string& table, const std::string& key, const std::string& v) {
  int64_t out = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || p != v.data() + v.size()) {
    return Status(SR_INVALID_ARGUMENT,
                  "table " + table + ": managed collision: " + key + "=" + v + " is not an integer");
  }
  return out;
}

}  // namespace

StatusOr<ManagedCollisionConfig> ParseManagedCollision(const std::string& table, const std::string& spec,
                                                       int64_t table_rows) {
  ManagedCollisionConfig c;
  bool has_zch = false;
  std::stringstream ss(spec);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return Status(SR_INVALID_ARGUMENT, "table " + table + ": managed collision: '" + item +
                                             "' is not KEY=VALUE (e.g. zch_size=100000,policy=lru,"
                                             "eviction_interval=10)");
    }
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    auto as_int = [&](int64_t& field) -> Status {
      auto v = ParseInt(table, key, value);
      if (!v.ok()) return v.status();
      field = v.value();
      return Status::Ok();
    };
    Status st = Status::Ok();
    if (key == "zch_size") {
      st = as_int(c.zch_size);
      has_zch = true;
    } else if (key == "eviction_interval") {
      st = as_int(c.eviction_interval);
    } else if (key == "input_hash_size") {
      st = as_int(c.input_hash_size);
    } else if (key == "mch_size") {
      st = as_int(c.mch_size);
    } else if (key == "buckets") {
      st = as_int(c.buckets);
    } else if (key == "policy") {
      c.policy = value;
    } else if (key == "input_hash") {
      if (value == "none") c.input_hash = IdHash::kNone;
      else if (value == "fmix64") c.input_hash = IdHash::kFmix64;
      else st = Status(SR_INVALID_ARGUMENT, "table " + table + ": input_hash=" + value + ": expected none or fmix64");
    } else if (key == "threshold") {
      if (value == "none") c.threshold = ThresholdFilter::kNone;
      else if (value == "average") c.threshold = ThresholdFilter::kAverage;
      else if (value == "dynamic") c.threshold = ThresholdFilter::kDynamic;
      else st = Status(SR_INVALID_ARGUMENT, "table " + table + ": threshold=" + value +
                                                ": expected none, average or dynamic");
    } else if (key == "eviction_mode") {
      if (value == "fast") c.eviction_mode = EvictionMode::kFast;
      else if (value == "exact") c.eviction_mode = EvictionMode::kExact;
      else st = Status(SR_INVALID_ARGUMENT, "table " + table + ": eviction_mode=" + value + ": expected fast or exact");
    } else if (key == "threshold_skew_multiplier") {
      try {
        size_t used = 0;
        c.threshold_skew_multiplier = std::stod(value, &used);
        if (used != value.size()) throw std::invalid_argument(value);
      } catch (const std::exception&) {
        st = Status(SR_INVALID_ARGUMENT, "table " + table + ": threshold_skew_multiplier=" + value + " is not a number");
      }
    } else {
      c.policy_options.Set(key, value);  // the policy validates its own options
    }
    if (!st.ok()) return st;
  }
  if (!has_zch && table_rows > 0) {
    c.zch_size = table_rows - c.mch_size;
    has_zch = true;
  }
  if (!has_zch) {
    return Status(SR_INVALID_ARGUMENT, "table " + table + ": managed collision needs zch_size=N (got '" + spec + "')");
  }
  if (Status st = ValidateManagedCollision(table, c); !st.ok()) return st;
  return c;
}

std::string ManagedCollisionSpec(const ManagedCollisionConfig& c) {
  std::string s = "zch_size=" + std::to_string(c.zch_size) + ",eviction_interval=" +
                  std::to_string(c.eviction_interval) + ",policy=" + c.policy;
  if (c.mch_size) s += ",mch_size=" + std::to_string(c.mch_size);
  if (c.buckets != 1) s += ",buckets=" + std::to_string(c.buckets);
  if (c.input_hash != IdHash::kNone) {
    s += std::string(",input_hash=") + IdHashName(c.input_hash) + ",input_hash_size=" + std::to_string(c.input_hash_size);
  }
  if (c.threshold != ThresholdFilter::kNone) {
    s += std::string(",threshold=") + ThresholdFilterName(c.threshold);
    if (c.threshold == ThresholdFilter::kDynamic) {
      std::ostringstream m;
      m << c.threshold_skew_multiplier;
      s += ",threshold_skew_multiplier=" + m.str();
    }
  }
  if (c.eviction_mode != EvictionMode::kFast) s += std::string(",eviction_mode=") + EvictionModeName(c.eviction_mode);
  for (const auto& [k, v] : c.policy_options.items()) s += "," + k + "=" + v;
  return s;
}

StatusOr<std::string> ResolveEvictionPolicy(PluginRegistry& registry, const std::string& policy) {
  const bool is_path = policy.find('/') != std::string::npos || policy.ends_with(".so") ||
                       policy.find(".so:") != std::string::npos;
  if (!is_path) {
    auto ref = registry.Find(SR_KIND_EVICTION, policy);
    if (!ref.ok()) return ref.status();
    return policy;
  }
  std::string file = policy, name;
  if (const size_t colon = policy.rfind(".so:"); colon != std::string::npos) {
    file = policy.substr(0, colon + 3);
    name = policy.substr(colon + 4);
  }
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::absolute(file, ec);
  if (!std::filesystem::exists(path, ec)) {
    return Status(SR_NOT_FOUND, "eviction policy library " + file + " does not exist");
  }
  if (Status st = registry.LoadLibrary(path); !st.ok()) {
    return Status(st.code(), "eviction policy library " + file + ": " + st.message());
  }
  std::vector<std::string> found;
  for (const ComponentRef& ref : registry.Components(SR_KIND_EVICTION)) {
    if (std::filesystem::equivalent(ref.library->path(), path, ec)) found.push_back(ref.name());
  }
  if (!name.empty()) {
    for (const std::string& f : found) {
      if (f == name) return name;
    }
    return Status(SR_NOT_FOUND, "eviction policy library " + file + " has no component '" + name + "'");
  }
  if (found.size() != 1) {
    std::string list;
    for (const std::string& f : found) list += (list.empty() ? "" : ", ") + f;
    return Status(SR_INVALID_ARGUMENT, "eviction policy library " + file + " has " + std::to_string(found.size()) +
                                           " eviction components (" + list + "): name one as " + file + ":NAME");
  }
  return found.front();
}

}  // namespace shardrec
