// Words for people: a count with its noun in the right number ("1 rank",
// "3 ranks"), shared by core's printed plans and the host's reports.
#pragma once

#include <cstdint>
#include <string>

namespace shardrec {

// "1 rank", "2 ranks"; `plural` for nouns that do not take an "s".
inline std::string Counted(int64_t n, const std::string& noun, const std::string& plural = "") {
  return std::to_string(n) + " " + (n == 1 ? noun : (plural.empty() ? noun + "s" : plural));
}

}  // namespace shardrec
