// The CPU kernel's configuration: its component options (threads,
// prefetch_distance, huge_pages), parsed and validated once at create().
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/abi/kernel.h"
#include "shardrec/sdk/fused_optimizer.hpp"

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

// The fused optimizer's hyper-parameters and per-step constants are the
// SDK's (shardrec/sdk/fused_optimizer.hpp), shared with the CUDA kernel.
using sdk::OptimizerConfig;
using sdk::OptimizerName;  // "rowwise_adagrad" for SR_OPTIMIZER_ROWWISE_ADAGRAD
using sdk::OptimizerStep;

using sdk::StateDim;  // optimizer state values per row: 0, 0, dim, 1, 2*dim

}  // namespace shardrec::kernel_cpu
