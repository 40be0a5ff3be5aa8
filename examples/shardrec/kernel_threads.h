// How many threads a rank's compute kernel runs. The ranks of one host share
// its cores: a kernel whose thread pool the user did not size gets the
// process's cores over the host's ranks (at least one), the share
// `bench topology` measured the kernel's speed with and the planner's step
// model assumes. Pools that each span every core would fight over them, and
// a step would follow the ranks' summed work whatever the plan
// (docs/planner.md, "What the model leaves out"). The dense part's OpenBLAS
// threads are sized the same way (train_model.cc).
#pragma once

#include <optional>
#include <string>

#include "shardrec/core/plugin_library.h"
#include "shardrec/core/plugin_options.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec::cli {

// True when the component lists `option` in its "options" attribute.
bool DeclaresOption(const ComponentRef& ref, const std::string& option);

// The cores this process may run on (its affinity mask, as taskset, a
// container's cpuset or a launcher's binding leave it; at least 1).
int HostCores();

// The threads of one rank's kernel when `ranks_on_host` ranks share the host:
// max(1, HostCores() / ranks_on_host).
int ThreadsPerRank(int ranks_on_host);

// The user's `threads` in `options`, if set (as written).
std::optional<std::string> UserThreads(const OptionList& options);

// Sets `threads` in `options` to ThreadsPerRank(ranks_on_host) when the
// kernel declares that option and `options` does not set it already.
// Returns the threads the kernel was given or the user's value as written
// ("" when the kernel sizes its pool itself).
std::string ShareCoresAmongRanks(const ComponentRef& kernel, int ranks_on_host, OptionList& options);
// The same for the kernel named `kernel` ("" when no such kernel is found:
// creating it reports that).
std::string ShareCoresAmongRanks(const PluginRegistry& registry, const std::string& kernel, int ranks_on_host,
                                 OptionList& options);

// A `threads` value as a number (0: all cores), or nothing when the text is
// not a whole number.
std::optional<int> ThreadsCount(const std::string& threads);

// "1 thread", "4 threads", "all cores" (0), or the user's text as written.
std::string DescribeThreads(const std::string& threads);

}  // namespace shardrec::cli
