// The fused optimizer of a table group, as the user writes it:
//   "sgd,lr=0.1"   "adagrad,lr=0.05,eps=1e-10"   "rowwise_adagrad"   "adam,lr=1e-3,beta1=0.9"
// `lr` is short for `learning_rate`. The name maps to SR_OPTIMIZER_*; the
// hyper-parameters go to the kernel unchanged, which validates them (so a
// kernel's own extra parameters pass through).
#pragma once

#include <string>

#include "shardrec/core/plugin_options.h"
#include "shardrec/core/status.h"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec {

struct OptimizerSpec {
  int32_t optimizer = 0;  // SR_OPTIMIZER_NONE
  OptionList params;

  static StatusOr<OptimizerSpec> Parse(const std::string& text);
  std::string ToString() const;
};

// "sgd" for SR_OPTIMIZER_SGD (the SDK's names).
using sdk::OptimizerName;

}  // namespace shardrec
