// Parsing of "NAME,key=value,..." optimizer specs.
#include "shardrec/core/modules/optimizer_spec.h"

#include <sstream>

#include "shardrec/abi/kernel.h"

namespace shardrec {

namespace {
constexpr std::pair<const char*, int32_t> kOptimizers[] = {
    {"none", SR_OPTIMIZER_NONE},       {"sgd", SR_OPTIMIZER_SGD}, {"adagrad", SR_OPTIMIZER_ADAGRAD},
    {"rowwise_adagrad", SR_OPTIMIZER_ROWWISE_ADAGRAD}, {"adam", SR_OPTIMIZER_ADAM}};
}

StatusOr<OptimizerSpec> OptimizerSpec::Parse(const std::string& text) {
  std::stringstream ss(text);
  std::string item;
  OptimizerSpec spec;
  bool first = true, found = false;
  while (std::getline(ss, item, ',')) {
    if (first) {
      first = false;
      for (const auto& [name, code] : kOptimizers) {
        if (item == name) {
          spec.optimizer = code;
          found = true;
        }
      }
      if (!found) {
        return InvalidArgumentError("unknown optimizer '" + item +
                                    "' (expected none, sgd, adagrad, rowwise_adagrad or adam)");
      }
      continue;
    }
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      return InvalidArgumentError("optimizer '" + text + "': expected key=value, got '" + item + "'");
    }
    std::string key = item.substr(0, eq);
    if (key == "lr") key = "learning_rate";
    spec.params.Set(key, item.substr(eq + 1));
  }
  if (first) return InvalidArgumentError("empty optimizer spec");
  return spec;
}

std::string OptimizerSpec::ToString() const {
  std::string s = OptimizerName(optimizer);
  for (const auto& [k, v] : params.items()) s += "," + k + "=" + v;
  return s;
}

}  // namespace shardrec
