// Managed-collision remap benchmark against the slot-lookup probe (see mc_bench.h).
#include "mc_bench.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <random>
#include <vector>

#include <fmt/format.h>

#include "slot_probe.h"

namespace shardrec::cli {

namespace {

using Clock = std::chrono::steady_clock;

double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Id number i, spread over [0, 2^63): multiplying by an odd constant is a
// bijection modulo 2^63, so distinct i give distinct ids.
int64_t IdOf(int64_t i) {
  return static_cast<int64_t>((static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL) & 0x7fffffffffffffffULL);
}

// Best and median of per-call ids/s.
Figure Rates(std::vector<double> seconds, int64_t ids) {
  std::sort(seconds.begin(), seconds.end());
  const double n = static_cast<double>(ids);
  return {n / seconds.front(), n / seconds[seconds.size() / 2]};
}

Figure Times(std::vector<double> seconds) {
  std::sort(seconds.begin(), seconds.end());
  return {seconds.front(), seconds[seconds.size() / 2]};
}

class Bench {
 public:
  Bench(MchManagedCollisionModule module, const McBenchConfig& c)
      : m_(std::move(module)), c_(c), rows_(static_cast<size_t>(c.ids)), rng_(42) {}

  // Training steps with no ids until the module's iteration is `iteration`.
  Status AdvanceTo(int64_t iteration) {
    while (m_.iteration() < iteration) SR_RETURN_IF_ERROR(m_.Forward({}, {}, /*training=*/true));
    (void)m_.TakeEvictedRows();
    return Status::Ok();
  }

  // One timed Forward; evicted rows are dropped untimed, as a caller would reset them.
  StatusOr<double> Timed(const std::vector<int64_t>& ids, bool training) {
    const auto start = Clock::now();
    SR_RETURN_IF_ERROR(m_.Forward(ids, std::span<int64_t>(rows_.data(), ids.size()), training));
    const double s = Since(start);
    (void)m_.TakeEvictedRows();
    return s;
  }

  // `count` ids drawn uniformly from those holding a slot now.
  std::vector<int64_t> Residents(int64_t count) {
    std::vector<int64_t> held;
    for (const auto& slot : m_.Slots()) {
      if (slot.occupied) held.push_back(slot.id);
    }
    std::uniform_int_distribution<size_t> pick(0, held.size() - 1);
    std::vector<int64_t> out(static_cast<size_t>(count));
    for (int64_t& id : out) id = held[pick(rng_)];
    return out;
  }

  // Half resident ids, half ids never seen before, in random order.
  std::vector<int64_t> HalfNew() {
    const int64_t fresh = c_.ids / 2;
    std::vector<int64_t> ids = Residents(c_.ids - fresh);
    for (int64_t k = 0; k < fresh; ++k) ids.push_back(IdOf(next_new_++));
    std::shuffle(ids.begin(), ids.end(), rng_);
    return ids;
  }

  MchManagedCollisionModule& module() { return m_; }
  std::vector<int64_t>& rows() { return rows_; }
  void set_next_new(int64_t n) { next_new_ = n; }

 private:
  MchManagedCollisionModule m_;
  const McBenchConfig& c_;
  std::vector<int64_t> rows_;
  std::mt19937_64 rng_;
  int64_t next_new_ = 0;
};

}  // namespace

StatusOr<McBenchResult> RunMcBench(const PluginRegistry& registry, const McBenchConfig& c,
                                   const std::function<void(const std::string&)>& progress) {
  auto say = [&](const std::string& s) {
    if (progress) progress(s);
  };
  McBenchResult r;
  // Rounds every E steps, E chosen so that the warm-up and the timed
  // training-hit steps all fall between two rounds.
  const int64_t E = c.reps + 2;
  r.eviction_interval = E;
  ManagedCollisionConfig config;
  config.zch_size = c.slots + 1;
  config.eviction_interval = E;
  config.policy = c.policy;
  config.policy_options = c.policy_options;
  config.eviction_mode = c.eviction_mode;
  SR_ASSIGN_OR_RETURN(auto module, MchManagedCollisionModule::Create(registry, "bench", config));
  Bench b(std::move(module), c);
  MchManagedCollisionModule& m = b.module();

  say(fmt::format("filling {} slots (one training step whose round admits them all)", c.slots));
  std::vector<int64_t> fill(static_cast<size_t>(c.slots));
  for (int64_t i = 0; i < c.slots; ++i) fill[static_cast<size_t>(i)] = IdOf(i);
  b.set_next_new(c.slots);
  SR_RETURN_IF_ERROR(b.AdvanceTo(E - 1));
  {
    std::vector<int64_t> rows(fill.size());
    const auto start = Clock::now();
    SR_RETURN_IF_ERROR(m.Forward(fill, rows, /*training=*/true));
    r.fill_seconds = Since(start);
    (void)m.TakeEvictedRows();
  }
  if (m.stats().occupied != c.slots) {
    return FailedPreconditionError(fmt::format("policy {} admitted {} of {} ids into an empty table; the benchmark needs a full "
                                     "table",
                                     c.policy, m.stats().occupied, c.slots));
  }
  fill = {};
  r.module_bytes = m.Bytes();

  const std::vector<int64_t> hits = b.Residents(c.ids);
  auto timed_hits = [&](bool training) -> StatusOr<Figure> {
    std::vector<double> secs;
    for (int rep = 0; rep <= c.reps; ++rep) {  // rep 0 warms up
      const int64_t before = m.stats().hits;
      SR_ASSIGN_OR_RETURN(double s, b.Timed(hits, training));
      if (m.stats().hits - before != c.ids) {
        return InternalError(fmt::format("{} of {} resident ids were hits", m.stats().hits - before, c.ids));
      }
      if (rep > 0) secs.push_back(s);
    }
    return Rates(secs, c.ids);
  };

  say("probe: slot lookup (hashed random gather over the index's size), same ids");
  {
    SlotProbe probe(c.slots);
    r.probe_bytes = probe.bytes();
    std::vector<double> secs;
    for (int rep = 0; rep <= c.reps; ++rep) {
      const double s = probe.Run(hits, b.rows());
      if (rep > 0) secs.push_back(s);
    }
    r.probe = Rates(secs, c.ids);
  }
  say("remap, hits, inference");
  SR_ASSIGN_OR_RETURN(r.hits_inference, timed_hits(false));
  say("remap, hits, training (profile + remap)");
  SR_ASSIGN_OR_RETURN(r.hits_training, timed_hits(true));  // steps E+1 .. 2E-1: no round

  // A round with only the hit steps' window, untimed, so that each timed
  // round sees one batch's window.
  SR_RETURN_IF_ERROR(b.AdvanceTo(2 * E));
  say(fmt::format("eviction rounds: {} x (a step with a round, a half-new step, then its round alone)", c.reps));
  std::vector<double> with_round, half_new, round_alone;
  ManagedCollisionStats rounds_total;
  for (int rep = 0; rep < c.reps; ++rep) {
    const int64_t next_round = m.iteration() + E;
    const std::vector<int64_t> a = b.HalfNew();
    SR_RETURN_IF_ERROR(b.AdvanceTo(next_round - 1));
    SR_ASSIGN_OR_RETURN(double s, b.Timed(a, true));  // step next_round: a round is due
    with_round.push_back(s);

    const std::vector<int64_t> h = b.HalfNew();
    SR_RETURN_IF_ERROR(b.AdvanceTo(next_round + E - 2));
    SR_ASSIGN_OR_RETURN(s, b.Timed(h, true));  // no round due
    half_new.push_back(s);
    const ManagedCollisionStats before = m.stats();
    SR_ASSIGN_OR_RETURN(s, b.Timed({}, true));  // the round over h's window alone
    round_alone.push_back(s);
    const ManagedCollisionStats after = m.stats();
    if (after.rounds != before.rounds + 1) return InternalError("the empty step ran no eviction round");
    rounds_total.admissions += after.admissions - before.admissions;
    rounds_total.refusals += after.refusals - before.refusals;
    rounds_total.evictions += after.evictions - before.evictions;
  }
  r.step_with_round = Rates(with_round, c.ids);
  r.half_new_training = Rates(half_new, c.ids);
  r.round_seconds = Times(round_alone);
  r.round_candidates = static_cast<double>(rounds_total.admissions + rounds_total.refusals) / c.reps;
  r.round_admissions = static_cast<double>(rounds_total.admissions) / c.reps;
  r.round_evictions = static_cast<double>(rounds_total.evictions) / c.reps;
  return r;
}

}  // namespace shardrec::cli
