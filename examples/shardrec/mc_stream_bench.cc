#include "mc_stream_bench.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <random>

#include <unistd.h>

#include "shardrec/core/resources/memory.h"
#include "shardrec/sdk/init.hpp"
#include "slot_probe.h"

namespace shardrec::cli {

StatusOr<std::vector<McStreamTenth>> RunMcStream(const PluginRegistry& registry, const McStreamConfig& c,
                                                 const std::function<void(const McStreamTenth&)>& on_tenth) {
  if (!(c.alpha > 1.0)) return InvalidArgumentError("--alpha must be > 1");
  ManagedCollisionConfig mc;
  mc.zch_size = c.slots + 1;
  mc.eviction_interval = c.eviction_interval;
  mc.policy = c.policy;
  mc.policy_options = c.policy_options;
  mc.eviction_mode = c.eviction_mode;
  SR_ASSIGN_OR_RETURN(auto module, MchManagedCollisionModule::Create(registry, "stream", mc));
  // The probe runs each step's ids right after the step, so a tenth's
  // figure and its probe's see the same spell of the machine.
  const SlotProbe probe(c.slots);
  std::vector<int64_t> probed(static_cast<size_t>(c.batch));

  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Continuous power law on [1, inf) by inversion, folded into [0, distinct):
  // rank k has probability ~ k^-alpha; the raw id is a bijective scramble of k.
  const double inv = -1.0 / (c.alpha - 1.0);
  auto draw = [&] {
    const double k = std::floor(std::pow(1.0 - unit(rng), inv)) - 1.0;
    const auto rank = static_cast<uint64_t>(std::fmod(k, static_cast<double>(c.distinct)));
    return static_cast<int64_t>(sdk::Mix64(rank ^ 0x5717ea3ull));
  };

  std::vector<int64_t> ids(static_cast<size_t>(c.batch)), rows(static_cast<size_t>(c.batch));
  std::vector<McStreamTenth> out;
  const int64_t tenth = std::max<int64_t>(c.ids / 10, 1);
  int64_t done = 0, next_report = tenth;
  double seconds = 0, probe_seconds = 0;
  ManagedCollisionStats at_last = module.stats();
  while (done < c.ids) {
    const int64_t n = std::min(c.batch, c.ids - done);
    ids.resize(static_cast<size_t>(n));
    rows.resize(static_cast<size_t>(n));
    for (auto& id : ids) id = draw();
    const auto start = std::chrono::steady_clock::now();
    SR_RETURN_IF_ERROR(module.Forward(ids, rows, /*training=*/true));
    (void)module.TakeEvictedRows();  // no embedding table here: nothing to reset
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    probe_seconds += probe.Run(ids, probed);
    done += n;
    if (done >= next_report || done == c.ids) {
      const ManagedCollisionStats now = module.stats();
      McStreamTenth t;
      t.ids_done = done;
      const auto looked_up = static_cast<double>(now.lookups - at_last.lookups);
      t.ids_per_s = looked_up / seconds;
      t.probe_ids_per_s = probe_seconds > 0 ? looked_up / probe_seconds : 0.0;
      t.hit_rate = static_cast<double>(now.hits - at_last.hits) / looked_up;
      t.admitted_per_id = static_cast<double>(now.admissions - at_last.admissions) / looked_up;
      t.evicted_per_id = static_cast<double>(now.evictions - at_last.evictions) / looked_up;
      t.module_bytes = module.Bytes();
      t.rss_bytes = CurrentRssBytes();
      t.peak_rss_bytes = PeakRssBytes();
      out.push_back(t);
      if (on_tenth) on_tenth(t);
      at_last = now;
      seconds = probe_seconds = 0;
      next_report += tenth;
    }
  }
  return out;
}

}  // namespace shardrec::cli
