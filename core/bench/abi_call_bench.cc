// Google Benchmark cases for the cost of a plugin call (see abi_call_bench.h).
#include "abi_call_bench.h"

#include <benchmark/benchmark.h>

#include <map>
#include <string>

#include "noop_virtual.h"
#include "shardrec/core/dl_view.h"

namespace shardrec::bench {
namespace {

// Collects each case's real time per iteration (ns); prints when asked.
class Collector : public benchmark::ConsoleReporter {
 public:
  explicit Collector(bool print) : print_(print) {}
  bool ReportContext(const Context& c) override { return print_ ? ConsoleReporter::ReportContext(c) : true; }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) times_[r.run_name.function_name] = r.GetAdjustedRealTime();
    if (print_) ConsoleReporter::ReportRuns(runs);
  }
  double Get(const std::string& name) const {
    auto it = times_.find(name);
    return it == times_.end() ? 0.0 : it->second;
  }

 private:
  bool print_;
  std::map<std::string, double> times_;
};

}  // namespace

AbiCallFigures RunAbiCallBench(const PluginLibrary& library, const EvictionPolicy& policy,
                               double min_time_s, bool print) {
  const NoopInterface& noop = MakeNoop();
  const sr_plugin_api& api = library.api();

  std::vector<int64_t> none(1);
  std::vector<double> scores(1);
  DLView counts(none.data(), {0}), last(none.data(), {0}), window(none.data(), {0});
  DLView out(scores.data(), {0});
  sr_eviction_score_args args{};
  args.struct_size = SR_STRUCT_SIZE(sr_eviction_score_args, scores);
  args.now = 1;
  args.counts = counts.get();
  args.last_access = last.get();
  args.window_counts = window.get();
  args.scores = out.get();

  benchmark::RegisterBenchmark("virtual_call", [&](benchmark::State& st) {
    for (auto _ : st) benchmark::DoNotOptimize(noop.Noop(&st));
  })->MinTime(min_time_s);
  benchmark::RegisterBenchmark("abi_raw_call", [&](benchmark::State& st) {
    for (auto _ : st) benchmark::DoNotOptimize(api.status_code(nullptr));
  })->MinTime(min_time_s);
  benchmark::RegisterBenchmark("abi_guarded_call", [&](benchmark::State& st) {
    for (auto _ : st) {
      Status s = library.Call("noop", [&]() -> sr_status* {
        benchmark::DoNotOptimize(api.status_code(nullptr));
        return nullptr;
      });
      benchmark::DoNotOptimize(s.ok());
    }
  })->MinTime(min_time_s);
  benchmark::RegisterBenchmark("eviction_score_empty", [&](benchmark::State& st) {
    for (auto _ : st) {
      Status s = policy.Score(args);
      if (!s.ok()) st.SkipWithError(s.ToString().c_str());
      benchmark::DoNotOptimize(s.ok());
    }
  })->MinTime(min_time_s);

  Collector collector(print);
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::ClearRegisteredBenchmarks();
  return AbiCallFigures{collector.Get("virtual_call"), collector.Get("abi_raw_call"),
                        collector.Get("abi_guarded_call"), collector.Get("eviction_score_empty")};
}

}  // namespace shardrec::bench
