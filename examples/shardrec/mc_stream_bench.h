// `shardrec bench mc --stream N`: a long id stream through one managed-
// collision table, to show memory stays flat and throughput steady. Ids
// are drawn from `distinct` values with a power-law popularity (a few hot
// ids, a long tail, so the table keeps admitting and evicting), in training
// steps of `batch` ids with a round every `eviction_interval` steps. Every
// tenth of the stream it reports the Forward throughput over that tenth
// (id generation excluded) beside the slot probe's over the same ids
// (slot_probe.h, run after each step), the hit rate, the module's bytes and
// the process's current and peak resident memory (the probe's array, the
// index's size, is in it from the start).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shardrec/core/managed_collision/mch_module.h"

namespace shardrec::cli {

struct McStreamConfig {
  int64_t ids = 100000000;         // stream length
  int64_t distinct = 1000000000;   // distinct raw ids the stream draws from
  int64_t slots = 1000000;         // slots that hold an id
  int64_t batch = 65536;           // ids per training step
  int64_t eviction_interval = 10;  // steps between rounds
  double alpha = 1.1;              // power-law exponent of id popularity (> 1)
  std::string policy = "lru";
  OptionList policy_options;
  EvictionMode eviction_mode = EvictionMode::kFast;
};

struct McStreamTenth {
  int64_t ids_done = 0;
  double ids_per_s = 0;  // Forward only
  // The probe's rate on this tenth's ids, measured step by step beside the
  // stream: ids_per_s / probe_ids_per_s survives the machine's drift.
  double probe_ids_per_s = 0;
  // ids_per_s / probe_ids_per_s; 0 for a tenth without probe time.
  double over_probe() const { return probe_ids_per_s > 0 ? ids_per_s / probe_ids_per_s : 0.0; }
  double hit_rate = 0;   // within this tenth
  // Ids admitted and evicted within this tenth, per id of the stream: the
  // churn each round pays for (a hit rate near 100% with a round every step
  // still admits every id the step saw for the first time).
  double admitted_per_id = 0, evicted_per_id = 0;
  int64_t module_bytes = 0, rss_bytes = 0, peak_rss_bytes = 0;
};

StatusOr<std::vector<McStreamTenth>> RunMcStream(const PluginRegistry& registry, const McStreamConfig& config,
                                                 const std::function<void(const McStreamTenth&)>& on_tenth);

}  // namespace shardrec::cli
