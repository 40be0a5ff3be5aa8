// Parsing and validation of the CPU kernel's options and optimizer
// hyper-parameters (kernel_config.h). Defaults follow the libraries users
// compare against: torch.optim.Adagrad (eps 1e-10), FBGEMM's row-wise
// Adagrad (eps 1e-8), Adam (beta1 0.9, beta2 0.999, eps 1e-8).
#include "kernel_config.h"

#include <cmath>
#include <string_view>
#include <vector>

#include "shardrec/sdk/options.hpp"
#include "shardrec/sdk/status.hpp"

namespace shardrec::kernel_cpu {
namespace {

using sdk::InvalidArgument;

constexpr const char* kAllParams[] = {"learning_rate", "eps", "beta1", "beta2", "weight_decay",
                                      "initial_accumulator_value"};

// The names `optimizer` accepts, in the order of kAllParams.
std::vector<std::string_view> Accepted(int32_t optimizer) {
  switch (optimizer) {
    case SR_OPTIMIZER_SGD: return {"learning_rate", "weight_decay"};
    case SR_OPTIMIZER_ADAGRAD:
    case SR_OPTIMIZER_ROWWISE_ADAGRAD:
      return {"learning_rate", "eps", "weight_decay", "initial_accumulator_value"};
    case SR_OPTIMIZER_ADAM: return {"learning_rate", "eps", "beta1", "beta2", "weight_decay"};
    default: return {};
  }
}

std::string Join(const std::vector<std::string_view>& names) {
  std::string s;
  for (auto n : names) s.append(s.empty() ? "" : ", ").append(n);
  return s.empty() ? "none" : s;
}

double NonNegative(sdk::Options& o, const char* key, double fallback, const std::string& owner) {
  const double v = o.GetDouble(key, fallback);
  if (!std::isfinite(v) || v < 0) {
    throw InvalidArgument(owner + ": " + key + " must be a finite number >= 0, got " +
                          std::to_string(v));
  }
  return v;
}

double Beta(sdk::Options& o, const char* key, double fallback, const std::string& owner) {
  const double v = o.GetDouble(key, fallback);
  if (!(v >= 0 && v < 1)) {
    throw InvalidArgument(owner + ": " + key + " must be in [0, 1), got " + std::to_string(v));
  }
  return v;
}

}  // namespace

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

OptimizerConfig ParseOptimizer(int32_t optimizer, sr_named_value_list params) {
  if (optimizer < SR_OPTIMIZER_NONE || optimizer > SR_OPTIMIZER_ADAM) {
    throw InvalidArgument("kernel cpu: optimizer " + std::to_string(optimizer) +
                          " is not one of none (0), sgd (1), adagrad (2), rowwise_adagrad (3), "
                          "adam (4)");
  }
  const std::string owner = std::string("kernel cpu: optimizer ") + OptimizerName(optimizer);
  const std::vector<std::string_view> accepted = Accepted(optimizer);
  // A hyper-parameter of another optimizer gets its own message: it is a
  // likelier mistake than a typo and "unknown" would mislead.
  for (size_t i = 0; i < params.count && params.values != nullptr; ++i) {
    const std::string_view name = params.values[i].name ? params.values[i].name : "";
    bool known = false, applies = false;
    for (const char* p : kAllParams) known |= name == p;
    for (auto p : accepted) applies |= name == p;
    if (known && !applies) {
      throw InvalidArgument(owner + ": parameter '" + std::string(name) +
                            "' does not apply to this optimizer (accepted: " + Join(accepted) +
                            ")");
    }
  }
  sdk::Options o(params, owner);
  OptimizerConfig c;
  c.optimizer = optimizer;
  if (optimizer != SR_OPTIMIZER_NONE) {
    c.learning_rate = NonNegative(o, "learning_rate", 0.01, owner);
    c.weight_decay = NonNegative(o, "weight_decay", 0.0, owner);
  }
  switch (optimizer) {
    case SR_OPTIMIZER_ADAGRAD:
      c.eps = NonNegative(o, "eps", 1e-10, owner);
      c.initial_accumulator_value = NonNegative(o, "initial_accumulator_value", 0.0, owner);
      break;
    case SR_OPTIMIZER_ROWWISE_ADAGRAD:
      c.eps = NonNegative(o, "eps", 1e-8, owner);
      c.initial_accumulator_value = NonNegative(o, "initial_accumulator_value", 0.0, owner);
      break;
    case SR_OPTIMIZER_ADAM:
      c.eps = NonNegative(o, "eps", 1e-8, owner);
      c.beta1 = Beta(o, "beta1", 0.9, owner);
      c.beta2 = Beta(o, "beta2", 0.999, owner);
      break;
    default: break;
  }
  o.Finish();
  return c;
}

}  // namespace shardrec::kernel_cpu
