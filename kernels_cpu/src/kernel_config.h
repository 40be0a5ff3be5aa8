// The CPU kernel's configuration: its component options (threads,
// prefetch_distance, huge_pages) and the optimizer with its
// hyper-parameters, parsed and validated once at create().
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/abi/kernel.h"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec::kernel_cpu {

struct KernelOptions {
  int threads = 0;               // 0: every hardware thread
  int64_t prefetch_distance = 0;  // ids ahead; 0: no software prefetch
  bool huge_pages = true;        // madvise(MADV_HUGEPAGE) tables >= 2 MiB
};

// Prefetching this many ids ahead hid most of the DRAM latency of random
// 512-byte rows on the reference machine (docs/kernels.md, "Speed").
inline constexpr int64_t kDefaultPrefetchDistance = 8;
inline constexpr int64_t kMaxPrefetchDistance = 1024;

// Parses `options` (unknown keys are refused). Throws sdk::Error.
KernelOptions ParseKernelOptions(sr_named_value_list options);

struct OptimizerConfig {
  int32_t optimizer = 0;  // SR_OPTIMIZER_*
  double learning_rate = 0.01;
  double eps = 0.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;  // Adagrad and row-wise Adagrad
};

using sdk::OptimizerName;  // "rowwise_adagrad" for SR_OPTIMIZER_ROWWISE_ADAGRAD

// Parses the hyper-parameters of `optimizer`. A name that belongs to another
// optimizer, an unknown name, or a value out of its domain is
// SR_INVALID_ARGUMENT. Throws sdk::Error.
OptimizerConfig ParseOptimizer(int32_t optimizer, sr_named_value_list params);

using sdk::StateDim;  // optimizer state values per row: 0, 0, dim, 1, 2*dim

}  // namespace shardrec::kernel_cpu
