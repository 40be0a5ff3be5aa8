// `shardrec replay-evictions`: how well each eviction policy would have
// served a recorded id stream at a given table capacity. Every policy gets
// its own MchManagedCollisionModule and the whole stream (eviction_replay.h),
// one after the other, so each one's ids/s is measured alone; the table
// compares hit rates, churn and speed side by side.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <new>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "eviction_replay.h"
#include "id_stream.h"
#include "mc_policies.h"
#include "progress.h"

namespace shardrec::cli {

namespace {

struct PolicyRun {
  ResolvedPolicy policy;
  EvictionMode mode = EvictionMode::kFast;
  bool incremental = false;  // the round the module ran (fast falls back to exact for some policies)
  ManagedCollisionConfig config;
  ReplayResult result;
  int64_t bytes = 0;
  std::string Label() const { return policy.name + (mode == EvictionMode::kExact ? " exact" : ""); }
};

int64_t DistinctIds(std::vector<int64_t> ids) {
  std::sort(ids.begin(), ids.end());
  return std::unique(ids.begin(), ids.end()) - ids.begin();
}

std::string Percent(double x) { return fmt::format("{:.2f}%", 100.0 * x); }

// A stream too short for the clock reads 0 s: report 0, not infinity.
double IdsPerSecond(const ReplayResult& r) {
  return r.seconds > 0 ? static_cast<double>(r.total.stats.lookups) / r.seconds : 0.0;
}

nlohmann::json CountsJson(const ReplayCounts& c) {
  const ManagedCollisionStats& s = c.stats;
  return {{"lookups", s.lookups},       {"hits", s.hits},           {"defaulted", s.defaulted},
          {"resident", c.resident},     {"admissions", s.admissions}, {"evictions", s.evictions},
          {"refusals", s.refusals},     {"rounds", s.rounds},       {"hit_rate", s.hit_rate()},
          {"default_rate", s.default_rate()}, {"resident_rate", c.resident_rate()}};
}

void PrintTable(const std::vector<PolicyRun>& runs) {
  size_t width = 6;
  for (const auto& r : runs) width = std::max(width, r.Label().size());
  std::printf("%-*s %-11s %9s %9s %9s %9s %9s %11s %11s %11s %17s %9s\n", static_cast<int>(width), "policy", "round",
              "hit rate", "warm hit", "resident", "warm res", "default", "admissions", "evictions", "refusals",
              "occupancy", "ids/s");
  for (const auto& r : runs) {
    const ManagedCollisionStats& t = r.result.total.stats;
    const ReplayCounts& w = r.result.warm;
    const bool warm = w.stats.lookups > 0;
    const std::string occupancy = fmt::format("{}/{} {:.0f}%", t.occupied, t.capacity, 100.0 * t.occupancy());
    std::printf("%-*s %-11s %9s %9s %9s %9s %9s %11lld %11lld %11lld %17s %9s\n", static_cast<int>(width),
                r.Label().c_str(), r.incremental ? "incremental" : "exact", Percent(t.hit_rate()).c_str(), warm ? Percent(w.stats.hit_rate()).c_str() : "-",
                Percent(r.result.total.resident_rate()).c_str(), warm ? Percent(w.resident_rate()).c_str() : "-",
                Percent(t.default_rate()).c_str(), static_cast<long long>(t.admissions),
                static_cast<long long>(t.evictions), static_cast<long long>(t.refusals), occupancy.c_str(),
                Rate(IdsPerSecond(r.result)).c_str());
  }
  for (const auto& r : runs) {
    if (r.policy.given != r.policy.name && r.mode == EvictionMode::kFast) {
      std::printf("(%s: from %s)\n", r.policy.name.c_str(), r.policy.library.c_str());
    }
  }
  // --eviction-mode both: each policy's fast round against its exact one.
  for (const auto& f : runs) {
    for (const auto& e : runs) {
      if (f.mode != EvictionMode::kFast || e.mode != EvictionMode::kExact || f.policy.name != e.policy.name) continue;
      std::printf("%s: fast - exact hit rate %+.2f points, %.1fx the ids/s%s\n", f.policy.name.c_str(),
                  100.0 * (f.result.total.stats.hit_rate() - e.result.total.stats.hit_rate()),
                  IdsPerSecond(e.result) > 0 ? IdsPerSecond(f.result) / IdsPerSecond(e.result) : 0.0,
                  f.incremental ? "" : " (this policy runs the exact round in both)");
    }
  }
}

}  // namespace

int RunReplayEvictions(const std::vector<std::string>& args) {
  GlobalOptions g;
  std::string ids_file, policy_list = "lru,lfu,distance_lfu", threshold = "none", mode_text = "fast";
  int64_t capacity = 0, batch = 4096, interval = 1;
  po::options_description desc("replay-evictions options");
  AddGlobalOptions(desc, &g);
  desc.add_options()
      ("ids", po::value(&ids_file)->required(),
       "the recorded id stream: a 1-D .npy of integer ids (int64; int32, uint64 and other integer types are "
       "accepted), in lookup order")
      ("capacity", po::value(&capacity)->required(),
       "slots that can hold an id; the table has one more row, the default row that ids without a slot read "
       "(zch_size = capacity + 1)")
      ("policy", po::value(&policy_list)->default_value(policy_list),
       "comma-separated eviction policies: component names (see 'shardrec plugins list'), or a third party's "
       "library as path/lib.so or path/lib.so:NAME")
      ("batch", po::value(&batch)->default_value(batch), "ids per training step")
      ("eviction-interval", po::value(&interval)->default_value(interval), "training steps between eviction rounds")
      ("threshold", po::value(&threshold)->default_value(threshold),
       "admission filter of each round: none, average (an id must be seen more often than the window's mean), "
       "dynamic (more than 10 x the mean)")
      ("eviction-mode", po::value(&mode_text)->default_value(mode_text),
       "fast (the incremental round where the policy allows it), exact (TorchRec's round), or both: every "
       "policy twice, and how far the fast round's hit rate is from the exact one's");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("replay-evictions", args, desc, nullptr, &vm, &code,
             "\n\nReplays a recorded id stream through one managed-collision module (TorchRec's MCH) per\n"
             "eviction policy, in steps of --batch ids, training, and prints per policy:\n"
             "  hit rate    lookups that got their id's own row\n"
             "  resident    lookups whose id held its row before the step (a round runs before its\n"
             "              step's remap, so ids it admits are hits at once, but on fresh rows)\n"
             "  warm ...    the same over the last half of the steps\n"
             "  default     lookups that read the shared default row (hit + default = 100%)\n"
             "  admissions, evictions, refusals (candidates a round left out), final occupancy,\n"
             "  ids/s       of the training forwards, one thread\n\n"
             "Policy options: --plugin-opt eviction.NAME.KEY=VALUE (e.g. eviction.lru.decay_exponent=2).\n\n"
             "examples:\n"
             "  shardrec replay-evictions --ids ids.npy --capacity 100000\n"
             "  shardrec replay-evictions --ids ids.npy --capacity 100000 --policy lru,path/to/libmine.so\n"
             "  scripts/make_id_stream.py ids.npy --ids 1000000 --distinct 200000 --alpha 1.05")) {
    return code;
  }
  auto usage = [](const std::string& m) {
    std::cerr << "shardrec replay-evictions: " << m << "\n";
    return kExitUsage;
  };
  if (capacity <= 0) return usage("--capacity must be a positive number of slots (got " + std::to_string(capacity) + ")");
  if (capacity > (int64_t{1} << 40)) return usage("--capacity " + std::to_string(capacity) + " is more than 2^40 slots");
  if (batch <= 0) return usage("--batch must be positive (got " + std::to_string(batch) + ")");
  if (interval <= 0) return usage("--eviction-interval must be positive (got " + std::to_string(interval) + ")");
  ManagedCollisionConfig base;
  base.zch_size = capacity + 1;
  base.eviction_interval = interval;
  if (threshold == "none") base.threshold = ThresholdFilter::kNone;
  else if (threshold == "average") base.threshold = ThresholdFilter::kAverage;
  else if (threshold == "dynamic") base.threshold = ThresholdFilter::kDynamic;
  else return usage("--threshold '" + threshold + "': expected none, average or dynamic");
  std::vector<EvictionMode> modes;
  if (mode_text == "fast") modes = {EvictionMode::kFast};
  else if (mode_text == "exact") modes = {EvictionMode::kExact};
  else if (mode_text == "both") modes = {EvictionMode::kFast, EvictionMode::kExact};
  else return usage("--eviction-mode '" + mode_text + "': expected fast, exact or both");
  const std::vector<std::string> policies = SplitPolicies(policy_list);
  if (policies.empty()) return usage("--policy names no policy");
  for (size_t i = 0; i < policies.size(); ++i) {
    if (std::find(policies.begin(), policies.begin() + static_cast<std::ptrdiff_t>(i), policies[i]) !=
        policies.begin() + static_cast<std::ptrdiff_t>(i)) {
      return usage("--policy names " + policies[i] + " twice");
    }
  }

  for (const std::string& file : PolicyLibraries(policies)) g.plugins.push_back(file);
  HostSession session;
  if (!OpenSession("replay-evictions", g, {SR_KIND_EVICTION}, &session)) return kExitUsage;
  std::vector<PolicyRun> runs;
  for (const std::string& given : policies) {
    ResolvedPolicy policy;
    if (!ResolvePolicy("replay-evictions", session, given, &policy, &code)) return code;
    for (EvictionMode mode : modes) runs.push_back(PolicyRun{policy, mode});
  }

  auto stream = ReadIdStream(ids_file);
  if (!stream.ok()) {
    std::cerr << "shardrec replay-evictions: --ids: " << stream.status().message() << "\n";
    return kExitFailure;
  }
  const std::vector<int64_t>& ids = stream.value();
  if (ids.empty()) {
    std::cerr << "shardrec replay-evictions: --ids: " << ids_file << " holds no ids\n";
    return kExitFailure;
  }
  const int64_t distinct = DistinctIds(ids);
  const auto n = static_cast<int64_t>(ids.size());
  // An id's first access cannot find it resident, whatever the policy.
  const double max_resident = 1.0 - static_cast<double>(distinct) / static_cast<double>(n);
  if (!g.json) {
    std::printf("replay-evictions: %lld ids (%lld distinct) from %s; capacity %lld slots (zch_size %lld), steps of "
                "%lld ids, a round every %lld step(s), threshold %s, eviction mode %s\n"
                "no policy can keep more than %s resident here (an id's first access finds no slot)\n",
                static_cast<long long>(n), static_cast<long long>(distinct), ids_file.c_str(),
                static_cast<long long>(capacity), static_cast<long long>(base.zch_size), static_cast<long long>(batch),
                static_cast<long long>(interval), threshold.c_str(), mode_text.c_str(), Percent(max_resident).c_str());
    std::fflush(stdout);
  }

  for (PolicyRun& run : runs) {
    run.config = base;
    run.config.policy = run.policy.name;
    run.config.policy_options = run.policy.options;
    run.config.eviction_mode = run.mode;
    std::optional<MchManagedCollisionModule> module;
    try {
      auto made = MchManagedCollisionModule::Create(session.registry, "replay", run.config);
      if (!made.ok()) {
        std::cerr << "shardrec replay-evictions: " << made.status().message() << "\n";
        return kExitFailure;
      }
      module.emplace(std::move(made).value());
      run.incremental = module->incremental_rounds();
    } catch (const std::bad_alloc&) {
      std::cerr << "shardrec replay-evictions: not enough memory for " << capacity << " slots\n";
      return kExitFailure;
    }
    Progress progress((n + batch - 1) / batch, !g.json, fmt::format("{:<18} ", run.Label()), "steps", "ids");
    auto result = ReplayStream(*module, ids, batch, [&](int64_t done, double per_s) { progress.Step(done, per_s); });
    if (!result.ok()) {
      std::cerr << "shardrec replay-evictions: " << run.Label() << ": " << result.status().message() << "\n";
      return kExitFailure;
    }
    run.result = result.value();
    run.bytes = module->Bytes();
  }

  if (g.json) {
    nlohmann::json j{{"ids_file", ids_file},
                     {"ids", n},
                     {"distinct_ids", distinct},
                     {"max_resident_rate", max_resident},
                     {"capacity", capacity},
                     {"zch_size", base.zch_size},
                     {"batch", batch},
                     {"steps", runs.front().result.steps},
                     {"eviction_interval", interval},
                     {"threshold", threshold},
                     {"eviction_mode", mode_text},
                     {"policies", nlohmann::json::array()}};
    for (const PolicyRun& r : runs) {
      nlohmann::json p = CountsJson(r.result.total);
      p["policy"] = r.policy.given;
      p["component"] = r.policy.name;
      p["library"] = r.policy.library;
      p["config"] = ManagedCollisionSpec(r.config);
      p["eviction_mode"] = EvictionModeName(r.mode);
      p["round"] = r.incremental ? "incremental" : "exact";
      p["occupied"] = r.result.total.stats.occupied;
      p["capacity"] = r.result.total.stats.capacity;
      p["occupancy"] = r.result.total.stats.occupancy();
      // The last half of the steps; null with a single step.
      p["warm"] = r.result.warm.stats.lookups ? CountsJson(r.result.warm) : nlohmann::json();
      p["seconds"] = r.result.seconds;
      p["ids_per_s"] = IdsPerSecond(r.result);
      p["bytes"] = r.bytes;
      j["policies"].push_back(std::move(p));
    }
    std::cout << j.dump() << "\n";
  } else {
    PrintTable(runs);
  }
  return kExitOk;
}

}  // namespace shardrec::cli
