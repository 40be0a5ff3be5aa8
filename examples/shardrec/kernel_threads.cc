// How many threads a rank's compute kernel runs (kernel_threads.h).
#include "kernel_threads.h"

#include <sched.h>

#include <algorithm>
#include <thread>

namespace shardrec::cli {

bool DeclaresOption(const ComponentRef& ref, const std::string& option) {
  const auto options = ref.StringListAttribute("options");
  return options && std::find(options->begin(), options->end(), option) != options->end();
}

int HostCores() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) return std::max(1, CPU_COUNT(&mask));
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

int ThreadsPerRank(int ranks_on_host) { return std::max(1, HostCores() / std::max(1, ranks_on_host)); }

std::optional<std::string> UserThreads(const OptionList& options) {
  for (const auto& [key, value] : options.items()) {
    if (key == "threads") return value;
  }
  return std::nullopt;
}

std::string ShareCoresAmongRanks(const ComponentRef& kernel, int ranks_on_host, OptionList& options) {
  if (auto user = UserThreads(options)) return *user;
  if (!DeclaresOption(kernel, "threads")) return "";
  const std::string threads = std::to_string(ThreadsPerRank(ranks_on_host));
  options.Set("threads", threads);
  return threads;
}

std::string ShareCoresAmongRanks(const PluginRegistry& registry, const std::string& kernel, int ranks_on_host,
                                 OptionList& options) {
  auto ref = registry.Find(SR_KIND_KERNEL, kernel);
  return ref.ok() ? ShareCoresAmongRanks(ref.value(), ranks_on_host, options) : "";
}

std::optional<int> ThreadsCount(const std::string& threads) {
  try {
    size_t used = 0;
    const int n = std::stoi(threads, &used);
    if (used == threads.size()) return n;
  } catch (...) {
  }
  return std::nullopt;
}

std::string DescribeThreads(const std::string& threads) {
  if (threads == "0") return "all cores";
  if (threads == "1") return "1 thread";
  return threads + " threads";
}

}  // namespace shardrec::cli
