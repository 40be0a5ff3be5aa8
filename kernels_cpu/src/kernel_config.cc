// Parsing and validation of the CPU kernel's options (kernel_config.h).
#include "kernel_config.h"

#include "shardrec/sdk/options.hpp"
#include "shardrec/sdk/status.hpp"

namespace shardrec::kernel_cpu {

using sdk::InvalidArgument;

KernelOptions ParseKernelOptions(sr_named_value_list options) {
  sdk::Options o(options, "kernel cpu");
  KernelOptions k;
  const int64_t threads = o.GetInt("threads", 0);
  if (threads < 0 || threads > 4096) {
    throw InvalidArgument("kernel cpu: option 'threads' must be in [0, 4096] (0: all hardware "
                          "threads), got " + std::to_string(threads));
  }
  k.threads = static_cast<int>(threads);
  k.prefetch_distance = o.GetInt("prefetch_distance", kDefaultPrefetchDistance);
  if (k.prefetch_distance < 0 || k.prefetch_distance > kMaxPrefetchDistance) {
    throw InvalidArgument("kernel cpu: option 'prefetch_distance' must be in [0, " +
                          std::to_string(kMaxPrefetchDistance) + "] (0: off), got " +
                          std::to_string(k.prefetch_distance));
  }
  k.huge_pages = o.GetBool("huge_pages", true);
  o.Finish();
  return k;
}

}  // namespace shardrec::kernel_cpu
