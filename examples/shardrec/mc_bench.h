// `shardrec bench mc`: remap throughput of one MchManagedCollisionModule on
// one thread, against a probe run in the same process on the same ids.
//
// The probe (slot_probe.h) is the memory-latency limit of one slot lookup
// per id, over an array of exactly the module's slot-index size. A remap
// does that lookup plus its bookkeeping, so remap / probe is how much of
// the limit it reaches; both move together on a noisy machine.
//
// Phases, all on a table filled with `slots` ids first:
//   hits, inference   Forward(training=false) of `ids` resident ids
//   hits, training    Forward(training=true), no round due: profile + remap
//   half new, training  half resident, half never-seen ids, no round due:
//                     profile (the new ids become candidates) + remap
//   step with round   the same kind of batch at a step where a round is due
//   round alone       a round over a window of such a batch, run by an
//                     empty step, so nothing but the round is timed
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "shardrec/core/managed_collision/mch_module.h"

namespace shardrec::cli {

struct McBenchConfig {
  int64_t slots = 1000000;  // slots that hold an id (zch_size = slots + 1)
  int64_t ids = 4194304;    // ids per timed Forward
  int reps = 5;             // timed calls per phase (best and median reported)
  std::string policy = "lru";
  OptionList policy_options;
  EvictionMode eviction_mode = EvictionMode::kFast;
};

struct Figure {
  double best = 0, median = 0;  // ids/s, or seconds for the round alone
};

struct McBenchResult {
  int64_t eviction_interval = 0;
  double fill_seconds = 0;
  int64_t module_bytes = 0, probe_bytes = 0;
  Figure probe, hits_inference, hits_training, half_new_training, step_with_round;
  Figure round_seconds;  // best = shortest
  // Per round alone, averaged: candidates competing, admitted, evicted.
  double round_candidates = 0, round_admissions = 0, round_evictions = 0;
};

// `progress` gets one line per phase (may be empty).
StatusOr<McBenchResult> RunMcBench(const PluginRegistry& registry, const McBenchConfig& config,
                                   const std::function<void(const std::string&)>& progress);

}  // namespace shardrec::cli
