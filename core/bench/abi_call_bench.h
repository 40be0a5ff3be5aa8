// What one call through the plugin ABI costs, next to a direct C++ virtual
// call, measured with Google Benchmark (run by `shardrec bench abi`).
#pragma once

#include "shardrec/core/plugin_library.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/status.h"

namespace shardrec::bench {

struct AbiCallFigures {
  double virtual_ns = 0;        // direct C++ virtual call (other translation unit)
  double abi_raw_ns = 0;        // C function pointer of a loaded plugin's table
  double abi_guarded_ns = 0;    // the same through PluginLibrary::Call (Status, catch)
  double score_empty_ns = 0;    // EvictionPolicy::Score on zero ids: a real entry
                                // with its argument validation, through the wrapper
};

// `library` supplies the no-op entry (its status_code(NULL)); `policy` the
// real one. `min_time_s` per case; `print` shows Google Benchmark's table.
// A case that fails (the real entry returned an error) is an error naming
// it, never a figure of 0.
StatusOr<AbiCallFigures> RunAbiCallBench(const PluginLibrary& library, const EvictionPolicy& policy,
                               double min_time_s, bool print);

}  // namespace shardrec::bench
