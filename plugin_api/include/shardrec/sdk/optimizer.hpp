// shardrec plugin SDK — the fused optimizers of the kernel ABI by name and
// the optimizer state they keep per row, so the host, the reference kernel
// and every kernel plugin agree. Free of the SDK's status machinery (like
// dtype.hpp), so the host uses it too.
#ifndef SHARDREC_SDK_OPTIMIZER_HPP_
#define SHARDREC_SDK_OPTIMIZER_HPP_

#include <cstdint>

#include "shardrec/abi/kernel.h"

namespace shardrec::sdk {

// "none", "sgd", "adagrad", "rowwise_adagrad", "adam"; "unknown" otherwise.
inline const char* OptimizerName(int32_t optimizer) {
  switch (optimizer) {
    case SR_OPTIMIZER_NONE: return "none";
    case SR_OPTIMIZER_SGD: return "sgd";
    case SR_OPTIMIZER_ADAGRAD: return "adagrad";
    case SR_OPTIMIZER_ROWWISE_ADAGRAD: return "rowwise_adagrad";
    case SR_OPTIMIZER_ADAM: return "adam";
    default: return "unknown";
  }
}

// Optimizer state values per row of a `dim`-column table: Adagrad one per
// column, row-wise Adagrad one per row, Adam two per column (m and v).
inline int64_t StateDim(int32_t optimizer, int64_t dim) {
  switch (optimizer) {
    case SR_OPTIMIZER_ADAGRAD: return dim;
    case SR_OPTIMIZER_ROWWISE_ADAGRAD: return 1;
    case SR_OPTIMIZER_ADAM: return 2 * dim;
    default: return 0;
  }
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_OPTIMIZER_HPP_
