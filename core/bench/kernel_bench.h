// `shardrec bench kernel`: a compute-kernel plugin's forward and fused
// backward + optimizer on one table, timed against a probe of the machine's
// limit run in the same process: for a CPU kernel a random-row gather of a
// table of the same shape with the same ids and threads, for a GPU kernel a
// device-to-device copy. Reported: lookups/s, GB/s of row bytes, and the
// ratio to the probe (forward) or to the probe's lookups/s (backward).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "id_batches.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_options.h"

namespace shardrec::bench {

struct KernelBenchConfig {
  int64_t rows = 1 << 20;
  int64_t dim = 128;
  int64_t batch = 4096;
  int64_t pooling = 20;
  IdDistribution ids;
  DLDataType dtype{kDLFloat, 32, 1};
  int32_t optimizer = 3;  // SR_OPTIMIZER_ROWWISE_ADAGRAD
  OptionList optimizer_params;
  OptionList kernel_options;  // threads already included when wanted
  int threads = 0;            // probe threads (0: all)
  bool weighted = false;
  double min_time = 0.5;      // seconds per measurement
  int reps = 5;
  int batches = 16;           // distinct id batches cycled
  // SR_ROW_QUANT_*: the forward again over the same table quantized (row
  // by row from the same initial weights), same ids, after the main one.
  std::vector<int32_t> quantized;
};

struct Rate {
  double best = 0, median = 0;  // lookups per second
};

struct KernelBenchResult {
  // The machine's limit: a random-row gather (CPU kernels) or a
  // device-to-device copy (GPU kernels), as lookups/s of this row size.
  std::string probe_name = "probe: random-row gather";
  Rate probe, forward, backward;
  double row_bytes = 0;
  double init_seconds = 0;
  bool has_backward = false;
  struct Quantized {
    std::string name;  // "int8_rowwise", ...
    Rate forward;
    double row_bytes = 0;
  };
  std::vector<Quantized> quantized;  // one per config.quantized, in order
};

// `progress` gets one line per phase (may be empty).
StatusOr<KernelBenchResult> RunKernelBench(const ComponentRef& kernel, const KernelBenchConfig& config,
                                           const std::function<void(const std::string&)>& progress);

}  // namespace shardrec::bench
