// CacheParams (cache_params.h): text in and out, and its checks.
#include "shardrec/core/cache/cache_params.h"

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "shardrec/core/text/byte_size.h"

namespace shardrec {
namespace {

StatusOr<int64_t> Integer(const std::string& value, const std::string& what, int64_t lo, int64_t hi) {
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || end != value.data() + value.size() || v < lo || v > hi) {
    return InvalidArgumentError(fmt::format("{} '{}': expected an integer in [{}, {}]", what, value, lo, hi));
  }
  return v;
}

}  // namespace

Status SetCacheParam(CacheParams& p, const std::string& key, const std::string& value, const std::string& where) {
  const std::string what = where + ": " + key;
  if (key == "algorithm") {
    if (value.empty()) return InvalidArgumentError(what + ": names an eviction policy (lru, lfu, or a plugin's)");
    p.algorithm = value;
  } else if (key == "load_factor") {
    char* end = nullptr;
    const double lf = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(lf > 0 && lf <= 1)) {
      return InvalidArgumentError(fmt::format("{} '{}': expected a number in (0, 1]", what, value));
    }
    p.load_factor = lf;
  } else if (key == "reserved_memory") {
    auto bytes = ParseByteSize(value);
    if (!bytes.ok()) return bytes.status().WithContext(what);
    p.reserved_memory = bytes.value();
  } else if (key == "precision") {
    SR_RETURN_IF_ERROR(ParseDataType(value).status().WithContext(what));
    p.precision = value;
  } else if (key == "prefetch_pipeline") {
    if (value != "true" && value != "false" && value != "1" && value != "0") {
      return InvalidArgumentError(fmt::format("{} '{}': expected true or false", what, value));
    }
    p.prefetch_pipeline = value == "true" || value == "1";
  } else if (key == "ways") {
    SR_ASSIGN_OR_RETURN(p.ways, Integer(value, what, 1, 1024));
  } else if (key == "overflow") {
    SR_ASSIGN_OR_RETURN(p.overflow, Integer(value, what, 0, int64_t{1} << 30));
  } else if (key == "io_threads") {
    SR_ASSIGN_OR_RETURN(const int64_t n, Integer(value, what, 1, 256));
    p.io_threads = static_cast<int>(n);
  } else if (key == "io") {
    if (value != "auto" && value != "io_uring" && value != "threads" && value != "mmap") {
      return InvalidArgumentError(fmt::format("{} '{}': expected auto, threads, io_uring or mmap", what, value));
    }
    p.io = value;
  } else if (key == "layout") {
    if (value != "in_place" && value != "log") {
      return InvalidArgumentError(fmt::format("{} '{}': expected in_place or log", what, value));
    }
    p.layout = value;
  } else if (key.starts_with("algorithm.")) {
    p.algorithm_options.Set(key.substr(10), value);
  } else {
    return InvalidArgumentError(where + ": unknown cache parameter '" + key +
                                "' (algorithm, load_factor, reserved_memory, precision, prefetch_pipeline, ways, "
                                "overflow, io_threads, io, layout, algorithm.OPTION)");
  }
  return Status::Ok();
}

StatusOr<CacheParams> ParseCacheParams(const std::string& text, const std::string& where) {
  CacheParams p;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(at, end - at);
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0) {
      return InvalidArgumentError(where + ": '" + item + "': expected KEY=VALUE (e.g. algorithm=lfu,load_factor=0.1)");
    }
    SR_RETURN_IF_ERROR(SetCacheParam(p, item.substr(0, eq), item.substr(eq + 1), where));
    at = end + 1;
  }
  return p;
}

std::string CacheParamsToString(const CacheParams& p) {
  const CacheParams d;
  std::string out = "algorithm=" + p.algorithm;
  for (const auto& [k, v] : p.algorithm_options.items()) out += ",algorithm." + k + "=" + v;
  if (p.load_factor > 0) out += fmt::format(",load_factor={}", p.load_factor);
  if (p.reserved_memory != d.reserved_memory) out += fmt::format(",reserved_memory={}", p.reserved_memory);
  if (!p.precision.empty()) out += ",precision=" + p.precision;
  if (p.prefetch_pipeline) out += ",prefetch_pipeline=true";
  if (p.ways != d.ways) out += fmt::format(",ways={}", p.ways);
  if (p.overflow != d.overflow) out += fmt::format(",overflow={}", p.overflow);
  if (p.io_threads != d.io_threads) out += fmt::format(",io_threads={}", p.io_threads);
  if (p.io != d.io) out += ",io=" + p.io;
  if (p.layout != d.layout) out += ",layout=" + p.layout;
  return out;
}

Status ValidateCacheParams(const CacheParams& p, const EmbeddingTableConfig& table) {
  const std::string who = "table '" + table.name + "': cache_params";
  if (!(p.load_factor >= 0 && p.load_factor <= 1)) {
    return InvalidArgumentError(fmt::format("{}: load factor {} is outside (0, 1]", who, p.load_factor));
  }
  if (!p.precision.empty() && p.precision != DataTypeName(table.data_type)) {
    return InvalidArgumentError(fmt::format("{}: precision {} differs from the table's {}; the cache keeps rows as the "
                                            "table does (give the table that data type instead)",
                                            who, p.precision, DataTypeName(table.data_type)));
  }
  return Status::Ok();
}

}  // namespace shardrec
