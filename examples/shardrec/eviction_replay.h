// Replays a recorded id stream through one MchManagedCollisionModule, as
// training would feed it: consecutive steps of `batch` ids, each a training
// Forward (profile, an eviction round when one is due, remap). What
// `shardrec replay-evictions` runs once per policy.
//
// A round runs before the remap of its own step, so the ids it admits are
// hits at once: with a round every step, a policy that favours the newest
// ids (lru) hits nearly always, while each admission gives its id a fresh
// row. `resident` tells that apart: lookups whose id held its slot before
// the step began, i.e. whose row kept what it had learned.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "shardrec/core/managed_collision/mch_module.h"

namespace shardrec::cli {

struct ReplayCounts {
  ManagedCollisionStats stats;  // of the training forwards only
  int64_t resident = 0;         // lookups whose id held a slot before its step
  double resident_rate() const { return stats.lookups ? static_cast<double>(resident) / stats.lookups : 0.0; }
};

struct ReplayResult {
  ReplayCounts total;  // the whole stream
  // The last half of the steps (the first half warms the table up);
  // lookups == 0 when the stream is a single step.
  ReplayCounts warm;
  int64_t steps = 0;
  double seconds = 0;  // spent in the training Forwards, summed
};

// `on_step(done, ids_per_s)` after every step (may be empty). Untimed, per
// step: an inference Forward first, which changes nothing but tells which
// ids are resident; after it, the evicted rows are taken and dropped, as an
// embedding module would reset them, so the module's queue does not grow.
StatusOr<ReplayResult> ReplayStream(MchManagedCollisionModule& module, std::span<const int64_t> ids, int64_t batch,
                                    const std::function<void(int64_t done, double ids_per_s)>& on_step);

}  // namespace shardrec::cli
