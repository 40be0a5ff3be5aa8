// `shardrec bench abi`: the cost of crossing the plugin ABI.
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "shardrec/core/plugin_objects.h"

#ifdef SHARDREC_HAVE_BENCHMARK
#include "abi_call_bench.h"
#endif

namespace shardrec::cli {

int RunBenchAbi(const std::vector<std::string>& args) {
  GlobalOptions g;
  double min_time = 0.2;
  std::string policy_name = "lru";
  po::options_description desc("bench abi options");
  AddGlobalOptions(desc, &g);
  desc.add_options()
      ("min-time", DoubleValue(&min_time), "seconds to run each case at least")
      ("policy", po::value(&policy_name)->default_value("lru"),
       "eviction policy whose score entry is timed as the real call");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("bench abi", args, desc, nullptr, &vm, &code,
             "\n\nTimes one no-op call through the plugin ABI (a C function pointer in a loaded\n"
             "library, raw and through the host's Status-returning guard) against a direct C++\n"
             "virtual call, and a real entry (an eviction policy scoring zero ids)")) {
    return code;
  }
#ifndef SHARDREC_HAVE_BENCHMARK
  std::cerr << "shardrec bench abi: built without Google Benchmark (apt-get install libbenchmark-dev)\n";
  return kExitFailure;
#else
  HostSession session;
  if (!OpenSession("bench abi", g, {SR_KIND_EVICTION}, &session)) return kExitUsage;
  auto ref = session.registry.Find(SR_KIND_EVICTION, policy_name);
  if (!ref.ok()) {
    std::cerr << "shardrec bench abi: " << ref.status().message() << "\n";
    return kExitFailure;
  }
  auto policy = EvictionPolicy::Create(ref.value(), session.plugin_options.For("eviction", policy_name));
  if (!policy.ok()) {
    std::cerr << "shardrec bench abi: " << policy.status().message() << "\n";
    return kExitFailure;
  }
  if (!(min_time > 0)) {
    std::cerr << "shardrec bench abi: --min-time must be > 0, got " << min_time << "\n";
    return kExitUsage;
  }
  auto figures = bench::RunAbiCallBench(*ref->library, policy.value(), min_time, !g.json);
  if (!figures.ok()) {
    std::cerr << "shardrec bench abi: " << figures.status().message() << "\n";
    return kExitFailure;
  }
  const bench::AbiCallFigures& f = figures.value();
  const double raw_extra = f.abi_raw_ns - f.virtual_ns;
  const double guarded_extra = f.abi_guarded_ns - f.virtual_ns;
  constexpr double kTargetNs = 20;  // the ABI's aim: a guarded call within 20 ns of a virtual call
  if (g.json) {
    std::cout << nlohmann::json{{"virtual_call_ns", f.virtual_ns},
                                {"abi_raw_call_ns", f.abi_raw_ns},
                                {"abi_guarded_call_ns", f.abi_guarded_ns},
                                {"eviction_score_empty_ns", f.score_empty_ns},
                                {"abi_raw_extra_ns", raw_extra},
                                {"abi_guarded_extra_ns", guarded_extra},
                                {"target_extra_ns", kTargetNs},
                                {"target_met", guarded_extra < kTargetNs},
                                {"library", ref->library->path().string()}}
                     .dump()
              << "\n";
  } else {
    std::printf("\nextra cost per call over a C++ virtual call: raw ABI %+.2f ns, "
                "through the host guard %+.2f ns (target: < %.0f ns: %s)\n"
                "a real entry (%s score on 0 ids, with argument validation): %.2f ns\n",
                raw_extra, guarded_extra, kTargetNs, guarded_extra < kTargetNs ? "met" : "NOT met",
                policy_name.c_str(), f.score_empty_ns);
  }
  return kExitOk;
#endif
}

}  // namespace shardrec::cli
