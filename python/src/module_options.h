// The options every embedding module of the package takes, parsed as the
// command line parses them (OptimizerSpec, bounds-check names), so Python
// and `shardrec train` refuse the same things with the same messages.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/core/modules/embedding_tables.h"
#include "status_error.h"

namespace shardrec::python {

inline EmbeddingModuleOptions ModuleOptions(const std::string& kernel,
                                            const std::vector<std::pair<std::string, std::string>>& kernel_options,
                                            const std::string& optimizer, uint64_t init_seed,
                                            const std::string& bounds_check) {
  EmbeddingModuleOptions options;
  options.kernel = kernel;
  options.kernel_options = OptionList(kernel_options);
  options.optimizer = Unwrap(OptimizerSpec::Parse(optimizer));
  options.init_seed = init_seed;
  options.bounds_check = Unwrap(ParseBoundsCheckMode(bounds_check));
  return options;
}

}  // namespace shardrec::python
