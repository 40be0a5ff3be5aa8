// Integers from JSON values in users' files (tables, plans). nlohmann's
// get<int64_t>() converts a float such as 4e47 (undefined behaviour, found by
// the tables_json fuzz target) and wraps an unsigned past 2^63; this accepts
// only an integer within [lo, hi] and otherwise names the value.
// Internal to core/src.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "shardrec/core/status.h"

namespace shardrec {

inline StatusOr<int64_t> JsonInteger(const nlohmann::json& v, const std::string& what,
                                     int64_t lo = std::numeric_limits<int64_t>::min(),
                                     int64_t hi = std::numeric_limits<int64_t>::max()) {
  const bool integer = v.is_number_integer() &&
                       !(v.is_number_unsigned() &&
                         v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
  if (!integer || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    std::string shown = v.dump();
    if (shown.size() > 40) shown = shown.substr(0, 40) + "...";
    return InvalidArgumentError(fmt::format("{} must be an integer in [{}, {}], got {}", what, lo, hi, shown));
  }
  return v.get<int64_t>();
}

}  // namespace shardrec
