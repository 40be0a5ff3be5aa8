// How many threads a rank's compute kernel runs (kernel_threads.h).
#include "kernel_threads.h"

#include <algorithm>
#include <thread>

namespace shardrec::cli {

bool DeclaresOption(const ComponentRef& ref, const std::string& option) {
  const auto options = ref.StringListAttribute("options");
  return options && std::find(options->begin(), options->end(), option) != options->end();
}

int HostCores() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

int ThreadsPerRank(int ranks_on_host) { return std::max(1, HostCores() / std::max(1, ranks_on_host)); }

std::string ShareCoresAmongRanks(const ComponentRef& kernel, int ranks_on_host, OptionList& options) {
  for (const auto& [key, value] : options.items()) {
    if (key == "threads") return value;
  }
  if (!DeclaresOption(kernel, "threads")) return "";
  const std::string threads = std::to_string(ThreadsPerRank(ranks_on_host));
  options.Set("threads", threads);
  return threads;
}

}  // namespace shardrec::cli
