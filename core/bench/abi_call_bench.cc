// Google Benchmark cases for the cost of a plugin call (see abi_call_bench.h).
#include "abi_call_bench.h"

#include <benchmark/benchmark.h>

#include <unistd.h>

#include <cstdio>
#include <map>
#include <string>

#include "noop_virtual.h"
#include "shardrec/core/dl_view.h"

namespace shardrec::bench {
namespace {

// Collects each case's real time per iteration (ns) and any error; prints
// the table when asked. Colour only on a terminal; the library's own
// context banner (date, caches, and Debian's "built as DEBUG" warning about
// Google Benchmark itself, not about us) is replaced by one line.
class Collector : public benchmark::ConsoleReporter {
 public:
  explicit Collector(bool print)
      : ConsoleReporter(isatty(fileno(stdout)) ? OO_ColorTabular : OO_Tabular), print_(print) {}
  bool ReportContext(const Context& c) override {
    name_field_width_ = c.name_field_width;
    if (print_) {
      std::printf("%d CPUs at %.0f MHz\n", c.cpu_info.num_cpus, c.cpu_info.cycles_per_second / 1e6);
    }
    return true;
  }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) {
        errors_[r.run_name.function_name] = r.error_message;
      } else {
        times_[r.run_name.function_name] = r.GetAdjustedRealTime();
      }
    }
    if (print_) ConsoleReporter::ReportRuns(runs);
  }
  // A case's time, or an error naming it (it failed, or never reported).
  StatusOr<double> Get(const std::string& name) const {
    if (auto e = errors_.find(name); e != errors_.end()) {
      return InternalError("bench case '" + name + "' failed: " + e->second);
    }
    auto it = times_.find(name);
    if (it == times_.end()) return InternalError("bench case '" + name + "' reported no time");
    return it->second;
  }

 private:
  bool print_;
  std::map<std::string, double> times_;
  std::map<std::string, std::string> errors_;
};

}  // namespace

StatusOr<AbiCallFigures> RunAbiCallBench(const PluginLibrary& library, const EvictionPolicy& policy,
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
      if (!s.ok()) {
        st.SkipWithError(s.ToString().c_str());
        break;
      }
      benchmark::DoNotOptimize(s.ok());
    }
  })->MinTime(min_time_s);

  Collector collector(print);
  benchmark::RunSpecifiedBenchmarks(&collector);
  benchmark::ClearRegisteredBenchmarks();
  AbiCallFigures f;
  SR_ASSIGN_OR_RETURN(f.virtual_ns, collector.Get("virtual_call"));
  SR_ASSIGN_OR_RETURN(f.abi_raw_ns, collector.Get("abi_raw_call"));
  SR_ASSIGN_OR_RETURN(f.abi_guarded_ns, collector.Get("abi_guarded_call"));
  SR_ASSIGN_OR_RETURN(f.score_empty_ns, collector.Get("eviction_score_empty"));
  return f;
}

}  // namespace shardrec::bench
