// shardrec plugin SDK — the fused optimizers' hyper-parameters, parsed and
// validated once at create(), and the per-step constants every backward call
// derives from them. Shared by the CPU and CUDA kernels (and open to third
// parties) so that "adam with eps 1e-8" means the same numbers everywhere.
// Defaults follow the libraries users compare against: torch.optim.Adagrad
// (eps 1e-10), FBGEMM's row-wise Adagrad (eps 1e-8), Adam (beta1 0.9,
// beta2 0.999, eps 1e-8).
#ifndef SHARDREC_SDK_FUSED_OPTIMIZER_HPP_
#define SHARDREC_SDK_FUSED_OPTIMIZER_HPP_

#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "shardrec/abi/kernel.h"
#include "shardrec/sdk/optimizer.hpp"
#include "shardrec/sdk/options.hpp"
#include "shardrec/sdk/status.hpp"

namespace shardrec::sdk {

struct OptimizerConfig {
  int32_t optimizer = 0;  // SR_OPTIMIZER_*
  double learning_rate = 0.01;
  double eps = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;  // Adagrad and row-wise Adagrad
};

// One optimizer step's constants, in float32 like the update arithmetic:
//   g' = g + weight_decay * w
//   SGD:       w -= lr * g'
//   Adagrad:   s += g'^2;            w -= lr * g' / (sqrt(s) + eps)
//   row-wise:  s += mean_j(g'_j^2);  w -= lr / (sqrt(s) + eps) * g'
//   Adam:      m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2
//              w -= lr * (m / bc1) / (sqrt(v / bc2) + eps)
struct OptimizerStep {
  int32_t optimizer = 0;  // SR_OPTIMIZER_* (never NONE here)
  float learning_rate = 0;
  float eps = 0;
  float beta1 = 0;
  float beta2 = 0;
  // 1 - beta, computed in double: 1 - 0.999f in float would be off by 1e-5.
  float one_minus_beta1 = 1;
  float one_minus_beta2 = 1;
  float weight_decay = 0;
  float bias_correction1 = 1;  // Adam: 1 - beta1^t
  float bias_correction2 = 1;  // Adam: 1 - beta2^t
};

namespace detail {

inline constexpr const char* kAllOptimizerParams[] = {
    "learning_rate", "eps", "beta1", "beta2", "weight_decay", "initial_accumulator_value"};

// The names `optimizer` accepts, in the order of kAllOptimizerParams.
inline std::vector<std::string_view> AcceptedOptimizerParams(int32_t optimizer) {
  switch (optimizer) {
    case SR_OPTIMIZER_SGD: return {"learning_rate", "weight_decay"};
    case SR_OPTIMIZER_ADAGRAD:
    case SR_OPTIMIZER_ROWWISE_ADAGRAD:
      return {"learning_rate", "eps", "weight_decay", "initial_accumulator_value"};
    case SR_OPTIMIZER_ADAM: return {"learning_rate", "eps", "beta1", "beta2", "weight_decay"};
    default: return {};
  }
}

inline std::string JoinNames(const std::vector<std::string_view>& names) {
  std::string s;
  for (auto n : names) s.append(s.empty() ? "" : ", ").append(n);
  return s.empty() ? "none" : s;
}

inline double NonNegativeParam(Options& o, const char* key, double fallback,
                               const std::string& owner) {
  const double v = o.GetDouble(key, fallback);
  if (!std::isfinite(v) || v < 0) {
    throw InvalidArgument(owner + ": " + key + " must be a finite number >= 0, got " +
                          std::to_string(v));
  }
  return v;
}

inline double BetaParam(Options& o, const char* key, double fallback, const std::string& owner) {
  const double v = o.GetDouble(key, fallback);
  if (!(v >= 0 && v < 1)) {
    throw InvalidArgument(owner + ": " + key + " must be in [0, 1), got " + std::to_string(v));
  }
  return v;
}

}  // namespace detail

// Parses the hyper-parameters of `optimizer` for component `component`
// ("kernel cpu"). A name that belongs to another optimizer, an unknown name,
// or a value out of its domain is SR_INVALID_ARGUMENT. Throws sdk::Error.
inline OptimizerConfig ParseOptimizerConfig(int32_t optimizer, sr_named_value_list params,
                                            const std::string& component) {
  if (optimizer < SR_OPTIMIZER_NONE || optimizer > SR_OPTIMIZER_ADAM) {
    throw InvalidArgument(component + ": optimizer " + std::to_string(optimizer) +
                          " is not one of none (0), sgd (1), adagrad (2), rowwise_adagrad (3), "
                          "adam (4)");
  }
  const std::string owner = component + ": optimizer " + OptimizerName(optimizer);
  const std::vector<std::string_view> accepted = detail::AcceptedOptimizerParams(optimizer);
  // A hyper-parameter of another optimizer gets its own message: it is a
  // likelier mistake than a typo and "unknown" would mislead.
  for (size_t i = 0; i < params.count && params.values != nullptr; ++i) {
    const std::string_view name = params.values[i].name ? params.values[i].name : "";
    bool known = false, applies = false;
    for (const char* p : detail::kAllOptimizerParams) known |= name == p;
    for (auto p : accepted) applies |= name == p;
    if (known && !applies) {
      throw InvalidArgument(owner + ": parameter '" + std::string(name) +
                            "' does not apply to this optimizer (accepted: " +
                            detail::JoinNames(accepted) + ")");
    }
  }
  Options o(params, owner);
  OptimizerConfig c;
  c.optimizer = optimizer;
  if (optimizer != SR_OPTIMIZER_NONE) {
    c.learning_rate = detail::NonNegativeParam(o, "learning_rate", 0.01, owner);
    c.weight_decay = detail::NonNegativeParam(o, "weight_decay", 0.0, owner);
  }
  switch (optimizer) {
    case SR_OPTIMIZER_ADAGRAD:
      c.eps = detail::NonNegativeParam(o, "eps", 1e-10, owner);
      c.initial_accumulator_value =
          detail::NonNegativeParam(o, "initial_accumulator_value", 0.0, owner);
      break;
    case SR_OPTIMIZER_ROWWISE_ADAGRAD:
      c.eps = detail::NonNegativeParam(o, "eps", 1e-8, owner);
      c.initial_accumulator_value =
          detail::NonNegativeParam(o, "initial_accumulator_value", 0.0, owner);
      break;
    case SR_OPTIMIZER_ADAM:
      c.eps = detail::NonNegativeParam(o, "eps", 1e-8, owner);
      c.beta1 = detail::BetaParam(o, "beta1", 0.9, owner);
      c.beta2 = detail::BetaParam(o, "beta2", 0.999, owner);
      break;
    default: break;
  }
  o.Finish();
  return c;
}

// The value every optimizer-state element has after create() or
// reset_rows(): Adagrad's initial accumulator, else 0.
inline float InitialStateValue(const OptimizerConfig& c) {
  return c.optimizer == SR_OPTIMIZER_ADAGRAD || c.optimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD
             ? static_cast<float>(c.initial_accumulator_value)
             : 0.0f;
}

// The constants of one backward call. Refuses a kernel created without an
// optimizer (FAILED_PRECONDITION), a learning rate that is not NaN (= the
// configured one) or a finite number >= 0, and, for Adam, an iteration < 1.
// Throws sdk::Error.
inline OptimizerStep MakeOptimizerStep(const OptimizerConfig& c, double learning_rate,
                                       int64_t iteration) {
  if (c.optimizer == SR_OPTIMIZER_NONE) {
    throw Error(SR_FAILED_PRECONDITION,
                "backward: the kernel was created without an optimizer (optimizer none); "
                "create it with sgd, adagrad, rowwise_adagrad or adam to train");
  }
  double lr = learning_rate;
  if (std::isnan(lr)) {
    lr = c.learning_rate;
  } else if (!std::isfinite(lr) || lr < 0) {
    throw InvalidArgument("backward: learning_rate must be a finite number >= 0 (or NaN for the "
                          "configured " + std::to_string(c.learning_rate) + "), got " +
                          std::to_string(lr));
  }
  OptimizerStep step;
  step.optimizer = c.optimizer;
  step.learning_rate = static_cast<float>(lr);
  step.eps = static_cast<float>(c.eps);
  step.weight_decay = static_cast<float>(c.weight_decay);
  if (c.optimizer == SR_OPTIMIZER_ADAM) {
    if (iteration < 1) {
      throw InvalidArgument("backward: iteration must be >= 1 for adam's bias correction, got " +
                            std::to_string(iteration));
    }
    const double t = static_cast<double>(iteration);
    step.beta1 = static_cast<float>(c.beta1);
    step.beta2 = static_cast<float>(c.beta2);
    step.one_minus_beta1 = static_cast<float>(1.0 - c.beta1);
    step.one_minus_beta2 = static_cast<float>(1.0 - c.beta2);
    step.bias_correction1 = static_cast<float>(1.0 - std::pow(c.beta1, t));
    step.bias_correction2 = static_cast<float>(1.0 - std::pow(c.beta2, t));
  }
  return step;
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_FUSED_OPTIMIZER_HPP_
