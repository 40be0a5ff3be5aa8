// `shardrec bench comm`: a comm backend's bandwidth and small-message
// latency for one collective, with the ratio to the machine's own limit
// measured in the same run (core/bench/comm_bench.h): Gloo called directly
// for gloo, a memcpy probe for local. Runs on the ranks this process hosts
// (comm_job.h); rank 0 prints.
#include <iomanip>
#include <iostream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "comm_bench.h"
#include "comm_job.h"
#include "commands.h"

namespace shardrec::cli {

int RunBenchComm(const std::vector<std::string>& args) {
  GlobalOptions g;
  CommFlags flags;
  bench::CommBenchConfig c;
  std::string op_name = "all_to_all_v";
  bool no_baseline = false;
  po::options_description desc("bench comm options");
  AddGlobalOptions(desc, &g);
  AddCommOptions(desc, &flags);
  desc.add_options()
      ("op", po::value(&op_name)->default_value(op_name),
       "all_to_all_v, reduce_scatter_v, all_gather_v or all_reduce (float32)")
      ("bytes", po::value(&c.bytes)->default_value(c.bytes),
       "send buffer per rank in bytes (all_gather_v: receive buffer)")
      ("small-bytes", po::value(&c.small_bytes)->default_value(c.small_bytes), "size of the latency measurement")
      ("min-time", DoubleValue(&c.min_time), "seconds per measurement")
      ("reps", po::value(&c.reps)->default_value(c.reps), "measurements (best and median are reported)")
      ("no-baseline", po::bool_switch(&no_baseline), "skip the direct-Gloo / memcpy baseline");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("bench comm", args, desc, nullptr, &vm, &code,
             "\n\nTimes one collective at --bytes (bandwidth) and at --small-bytes (latency) on every rank\n"
             "and reports the slowest rank's median: algbw = bytes / time and busbw = algbw x (n-1)/n\n"
             "(x 2(n-1)/n for all_reduce), the nccl-tests conventions. Beside it, the same run measures\n"
             "the machine's own limit on the same buffers: for gloo, Gloo's algorithm called directly\n"
             "(ratio = direct time / plugin time; 1.0 = no overhead); for local, every rank's thread\n"
             "copying the same bytes at once (ratio = memcpy time / collective time).\n\n"
             "examples:\n"
             "  shardrec bench comm --world-size 4 --op all_to_all_v --bytes 67108864\n"
             "  shardrec bench comm --comm gloo --world-size 2 --op all_reduce --bytes 1048576 --json")) {
    return code;
  }
  auto op = bench::ParseCommBenchOp(op_name);
  if (!op.ok() || c.bytes <= 0 || c.small_bytes <= 0 || c.reps <= 0 || c.min_time <= 0) {
    std::cerr << "shardrec bench comm: "
              << (op.ok() ? "--bytes, --small-bytes, --reps and --min-time must be positive" : op.status().message())
              << "\n";
    return kExitUsage;
  }
  c.op = op.value();
  c.baseline = !no_baseline;
  HostSession session;
  if (!OpenSession("bench comm", g, {SR_KIND_COMM}, &session)) return kExitUsage;
  const OptionList gloo_options = session.plugin_options.For("comm", "gloo");
  for (const auto& [key, value] : gloo_options.items()) {
    if (key == "hostname") c.gloo_hostname = value;
    if (key == "iface") c.gloo_iface = value;
  }

  return RunOnRanks("bench comm", args, flags, session, [&](const ProcessGroup& group) {
    auto result = bench::RunCommBench(group, c, [&](const std::string& line) {
      if (!g.json) std::cerr << "  " << line << "\n";
    });
    if (!result.ok()) {
      PrintLine(std::cerr, "rank " + std::to_string(group.rank()) + ": " + result.status().message());
      return kExitFailure;
    }
    if (group.rank() != 0) return kExitOk;
    const bench::CommBenchResult& r = result.value();
    if (g.json) {
      nlohmann::json j = {{"comm", group.backend()},
                          {"world_size", group.world_size()},
                          {"op", op_name},
                          {"bytes", c.bytes},
                          {"time_us", {{"best", r.op.best * 1e6}, {"median", r.op.median * 1e6}}},
                          {"algbw_gbps", r.algbw_gbps},
                          {"busbw_gbps", r.busbw_gbps},
                          {"small_bytes", c.small_bytes},
                          {"small_latency_us", {{"best", r.small.best * 1e6}, {"median", r.small.median * 1e6}}}};
      if (!r.baseline_name.empty()) {
        j["baseline"] = {{"name", r.baseline_name},
                         {"time_us", {{"best", r.baseline.best * 1e6}, {"median", r.baseline.median * 1e6}}},
                         {"ratio", r.baseline_ratio},
                         {"ratio_best", r.baseline_ratio_best}};
      }
      std::cout << j.dump() << "\n";
      return kExitOk;
    }
    std::cout << std::fixed << std::setprecision(2) << group.backend() << " " << op_name << ", "
              << group.world_size() << " ranks, " << c.bytes << " bytes per rank\n"
              << "  time        " << r.op.median * 1e6 << " us median (best " << r.op.best * 1e6 << ")\n"
              << "  algbw       " << r.algbw_gbps << " GB/s\n"
              << "  busbw       " << r.busbw_gbps << " GB/s (x " << r.bus_factor << ")\n"
              << "  latency     " << r.small.median * 1e6 << " us median at " << c.small_bytes << " bytes (best "
              << r.small.best * 1e6 << ")\n";
    if (!r.baseline_name.empty()) {
      std::cout << "  baseline    " << r.baseline_name << ": " << r.baseline.median * 1e6 << " us median\n"
                << "  ratio       " << std::setprecision(3) << r.baseline_ratio
                << " (baseline time / this time; " << r.baseline_ratio_best << " from the best measurements)\n";
    }
    return kExitOk;
  });
}

}  // namespace shardrec::cli
