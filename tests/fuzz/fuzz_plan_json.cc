// Fuzz target: the sharding-plan file (JSON) parser.
#include <string>

#include "fuzz_input.h"
#include "shardrec/core/sharding/sharding_plan.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = shardrec::ParsePlanJson(text, "fuzz.json");
  if (spec.ok()) {
    for (const auto& [table, sharding] : *spec) {
      if (sharding.sharding_type.empty()) __builtin_trap();  // the parser requires it
    }
  }
  return 0;
}
