// The CPU compute kernel object behind sr_kernel (see docs/kernels.md): it
// owns its tables' weights and optimizer state, validates every argument
// before writing, and runs forward and backward inside its own oneTBB task
// arena of `threads` threads.
//
// Thread-safety: every entry may be called from any thread; calls on one
// object are serialised by an internal mutex (they share scratch buffers,
// which is how a call avoids allocating). Different objects run
// concurrently.
#pragma once

#include <oneapi/tbb/task_arena.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "backward.h"
#include "forward.h"
#include "kernel_config.h"
#include "lookup_validation.h"
#include "shardrec/plugin_api.h"
#include "table.h"

namespace shardrec::kernel_cpu {

class CpuKernel {
 public:
  // Validates the arguments, allocates and initialises every table.
  // Throws sdk::Error.
  explicit CpuKernel(const sr_kernel_create_args& args);

  void TableInfo(int32_t table, sr_kernel_table_info* out);
  void Forward(const sr_kernel_forward_args& args);
  void Backward(const sr_kernel_backward_args& args);
  void ReadRows(const sr_kernel_rows_args& args);
  void WriteRows(const sr_kernel_rows_args& args);
  void ResetRows(const sr_kernel_rows_args& args);

 private:
  // Draws rows [begin, end) of `t` from the SDK initializer and sets their
  // state to its initial value.
  static void InitializeRows(const Table& t, const int64_t* rows, int64_t begin, int64_t end);
  const Table& TableAt(int32_t table, const char* call) const;

  std::vector<Table> tables_;
  KernelOptions options_;
  OptimizerConfig optimizer_;
  std::unique_ptr<oneapi::tbb::task_arena> arena_;

  std::mutex mutex_;  // guards the scratch below and serialises calls
  Lookup lookup_;
  std::vector<ForwardJob> forward_jobs_;
  BackwardScratch backward_;
};

}  // namespace shardrec::kernel_cpu
