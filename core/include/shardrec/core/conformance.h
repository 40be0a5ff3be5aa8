// The conformance kit: exercises each component of a loaded library against
// its kind's contract on small inputs and reports one result per check. Any
// third-party plugin can be run through it (`shardrec plugins check PATH`).
// Checks grow as later issues define more behaviour of a kind.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "shardrec/core/plugin_library.h"
#include "shardrec/core/plugin_options.h"

namespace shardrec {

enum class CheckResult { kPass, kFail, kSkip };
const char* CheckResultName(CheckResult r);  // "PASS", "FAIL", "SKIP"

struct ConformanceCheck {
  std::string component;  // "eviction lru", or the library for library checks
  std::string check;      // what was checked
  CheckResult result = CheckResult::kPass;
  std::string detail;     // why it failed or was skipped
};

// Runs every check for every component of `library`. `options` supplies the
// user's --plugin-opt values for components that need some to be created.
std::vector<ConformanceCheck> RunConformance(const std::shared_ptr<PluginLibrary>& library,
                                             const PluginOptions& options);

}  // namespace shardrec
