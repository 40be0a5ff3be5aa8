#include "eviction_replay.h"

#include <algorithm>
#include <chrono>
#include <vector>

namespace shardrec::cli {

namespace {

// The counters that accumulate, from `before` to `after`; slot counts are
// `after`'s (they are a state, not a sum).
ManagedCollisionStats Since(const ManagedCollisionStats& before, const ManagedCollisionStats& after) {
  ManagedCollisionStats d = after;
  d.lookups -= before.lookups;
  d.hits -= before.hits;
  d.defaulted -= before.defaulted;
  d.residual -= before.residual;
  d.admissions -= before.admissions;
  d.refusals -= before.refusals;
  d.evictions -= before.evictions;
  d.rounds -= before.rounds;
  return d;
}

void Add(ReplayCounts& sum, const ManagedCollisionStats& step, int64_t resident) {
  const int64_t occupied = step.occupied, capacity = step.capacity;
  sum.stats += step;
  sum.stats.occupied = occupied;
  sum.stats.capacity = capacity;
  sum.resident += resident;
}

}  // namespace

StatusOr<ReplayResult> ReplayStream(MchManagedCollisionModule& module, std::span<const int64_t> ids, int64_t batch,
                                    const std::function<void(int64_t done, double ids_per_s)>& on_step) {
  ReplayResult r;
  const auto n = static_cast<int64_t>(ids.size());
  r.steps = (n + batch - 1) / batch;
  const int64_t warm_from = r.steps / 2 + r.steps % 2;  // steps before the warm half
  std::vector<int64_t> rows(static_cast<size_t>(std::min(batch, n)));
  int64_t done_ids = 0;
  for (int64_t step = 0; step < r.steps; ++step) {
    const int64_t begin = step * batch, count = std::min(batch, n - begin);
    const auto chunk = ids.subspan(static_cast<size_t>(begin), static_cast<size_t>(count));
    const std::span<int64_t> out(rows.data(), chunk.size());
    const ManagedCollisionStats s0 = module.stats();
    SR_RETURN_IF_ERROR(module.Forward(chunk, out, /*training=*/false));
    const ManagedCollisionStats s1 = module.stats();
    const auto start = std::chrono::steady_clock::now();
    SR_RETURN_IF_ERROR(module.Forward(chunk, out, /*training=*/true));
    r.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    (void)module.TakeEvictedRows();
    const ManagedCollisionStats d = Since(s1, module.stats());
    const int64_t resident = s1.hits - s0.hits;
    Add(r.total, d, resident);
    if (step >= warm_from) Add(r.warm, d, resident);
    done_ids += count;
    if (on_step) on_step(step + 1, r.seconds > 0 ? static_cast<double>(done_ids) / r.seconds : 0.0);
  }
  r.warm.stats.occupied = r.total.stats.occupied;
  r.warm.stats.capacity = r.total.stats.capacity;
  return r;
}

}  // namespace shardrec::cli
