// Fuzz target: the planner's constraints file (JSON) parser.
#include <string>

#include "fuzz_input.h"
#include "shardrec/core/planner/planner_constraints.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto constraints = shardrec::ParseConstraintsJson(text, "fuzz.json");
  if (!constraints.ok()) return 0;
  for (const auto& [table, c] : *constraints) {
    for (int r : c.ranks) {
      if (r < 0) __builtin_trap();  // ranks are refused below 0
    }
    for (const auto& n : c.sharding_types) {
      if (n.empty()) __builtin_trap();
    }
  }
  return 0;
}
