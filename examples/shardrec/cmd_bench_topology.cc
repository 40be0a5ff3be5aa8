// `shardrec bench topology`: measures this machine for the planner
// (docs/planner.md) with the existing benches, and writes a topology file:
//   kernels     each --kernel's forward and backward + optimizer, at two row
//               widths (16 and 128 columns), with the threads one rank gets
//               (cores / ranks): a per-lookup and a per-byte cost fitted
//               through the two points, on a table that goes to memory
//               (2^18 rows) and on one that stays in the cache (4096 rows);
//               the cached figures apply to shards up to a rank's share of
//               the last-level cache (capped at 32 MiB);
//   per_table   the host's work per table per step: one rank training 32
//               small tables against one table with the same ids, rows and
//               bytes (`train` run as a child), the difference per table;
//   input_dist  the input dist's host work per id (route, pack, unpack) on a
//               one-rank group (input_dist_bench.h);
//   intra_host  an all-to-all over --comm among --world-size ranks of this
//               host: bytes each rank sends to the others per second at
//               --bytes, and the median time of an 8-byte one (latency);
//   inter_host  not measurable on one machine: --inter-host-bytes-per-s and
//               --inter-host-latency-us, said so in "measured".
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "child_process.h"
#include "cli.h"
#include "comm_bench.h"
#include "comm_job.h"
#include "commands.h"
#include "input_dist_bench.h"
#include "kernel_bench.h"
#include "kernel_threads.h"
#include "shardrec/core/modules/optimizer_spec.h"
#include "shardrec/core/planner/planner_topology.h"
#include "shardrec/core/tensor/npy.h"
#include "shardrec/core/text/byte_size.h"

namespace shardrec::cli {
namespace {

// A rank's share of the last-level cache, for which shards the cached kernel
// speeds apply. A VM often reports its whole socket's L3, so the share is
// capped at 32 MiB; with no figure at all, 8 MiB.
int64_t CachedShardBytes(int ranks) {
  long l3 = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (l3 <= 0) l3 = ::sysconf(_SC_LEVEL2_CACHE_SIZE);
  if (l3 <= 0) return int64_t{8} << 20;
  return std::clamp<int64_t>(l3 / std::max(ranks, 1), int64_t{256} << 10, int64_t{32} << 20);
}

// The host's work per table per step: `train` on one rank with 32 tables of
// 1000 x 16 and one id per sample each, against one table of 32000 x 16 with
// 32 ids per sample: the same ids, rows and bytes in one table or in 32.
// Alternating runs; the medians' difference over 31 tables.
StatusOr<double> MeasureSecondsPerTable(const std::string& optimizer, int rounds, nlohmann::json* how) {
  constexpr int kTables = 32;
  constexpr int64_t kBatch = 512, kSteps = 120;
  auto step_seconds = [&](const std::string& tables, const std::string& pooling) -> StatusOr<double> {
    SR_ASSIGN_OR_RETURN(const double rate,
                        TrainChildSamplesPerSecond({"train", "--comm", "local", "--world-size", "1", "--tables", tables,
                                                    "--pooling-factor", pooling, "--batch", std::to_string(kBatch),
                                                    "--steps", std::to_string(kSteps), "--optimizer", optimizer,
                                                    "--json"}));
    return static_cast<double>(kBatch) / rate;
  };
  std::vector<double> many, one;
  for (int r = 0; r < rounds; ++r) {
    SR_ASSIGN_OR_RETURN(const double m, step_seconds(fmt::format("{}x1000x16", kTables), "1"));
    SR_ASSIGN_OR_RETURN(const double o, step_seconds("1x32000x16", std::to_string(kTables)));
    many.push_back(m);
    one.push_back(o);
  }
  std::sort(many.begin(), many.end());
  std::sort(one.begin(), one.end());
  const double m = many[many.size() / 2], o = one[one.size() / 2];
  *how = {{"how", fmt::format("train on one rank: {} tables of 1000 x 16 with 1 id a sample, against 1 table of "
                              "32000 x 16 with {} ids a sample; {} samples, median step of {} alternating runs",
                              kTables, kTables, kBatch, rounds)},
          {"step_seconds_many_tables", m}, {"step_seconds_one_table", o}};
  return std::max(0.0, (m - o) / (kTables - 1));
}

}  // namespace

int RunBenchTopology(const std::vector<std::string>& args) {
  GlobalOptions g;
  CommFlags comm;
  std::vector<std::string> kernels;
  std::string optimizer = "adagrad,lr=0.05", output, memory;
  double min_time = 0.2, inter_bps = 1.25e9, inter_latency_us = 200;
  int64_t bytes = int64_t{16} << 20;
  po::options_description desc("bench topology options");
  AddGlobalOptions(desc, &g);
  AddCommOptions(desc, &comm);
  desc.add_options()
      ("kernel", po::value(&kernels)->composing(), "a kernel to measure (repeatable; default: cpu)")
      ("optimizer", po::value(&optimizer)->default_value(optimizer), "the backward's fused optimizer (as train)")
      ("bytes", po::value(&bytes)->default_value(bytes), "all-to-all bytes per rank for the bandwidth")
      ("min-time", DoubleValue(&min_time), "seconds per measurement")
      ("memory-per-rank", po::value(&memory), "memory each rank may hold, written into the file (e.g. 8GiB)")
      ("inter-host-bytes-per-s", DoubleValue(&inter_bps), "the link between hosts (not measurable here)")
      ("inter-host-latency-us", DoubleValue(&inter_latency_us), "its latency per collective")
      ("output,o", po::value(&output), "write the topology here (default: print it)");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("bench topology", args, desc, nullptr, &vm, &code,
             "\n\nMeasures what the planner's cost model needs on this machine: each kernel's time per\n"
             "lookup and per byte (forward, and backward with --optimizer) on a table in memory and on\n"
             "one in the cache, with one rank's share of the cores, the input dist's host work per id,\n"
             "the host's work per table per step, and an all-to-all's bandwidth and latency among\n"
             "--world-size ranks over --comm. Run it with the comm and ranks per host you will train\n"
             "with.\n\n"
             "examples:\n"
             "  shardrec bench topology --comm gloo --world-size 2 -o topo.json\n"
             "  shardrec plan --tables tables.json --world-size 2 --topology topo.json --explain")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit = kExitUsage) {
    std::cerr << "shardrec bench topology: " << m << "\n";
    return exit;
  };
  if (kernels.empty()) kernels = {"cpu"};
  if (bytes <= 0 || !(min_time > 0) || !(inter_bps > 0) || !(inter_latency_us >= 0)) {
    return fail("--bytes, --min-time and --inter-host-bytes-per-s must be positive");
  }
  auto spec = OptimizerSpec::Parse(optimizer);
  if (!spec.ok()) return fail("--optimizer: " + spec.status().message());
  PlannerTopology topo;
  topo.kernels.clear();
  if (!memory.empty()) {
    auto b = ParseByteSize(memory);
    if (!b.ok()) return fail("--memory-per-rank: " + b.status().message());
    topo.memory_bytes_per_rank = b.value();
  }
  HostSession session;
  if (!OpenSession("bench topology", g, {SR_KIND_KERNEL, SR_KIND_COMM, SR_KIND_SHARDER}, &session)) return kExitUsage;
  const int ranks = std::max(comm.world_size, 1);
  const int cores = HostCores();
  const int threads = ThreadsPerRank(ranks);
  nlohmann::json measured = {{"when", [] {
                                const std::time_t now = std::time(nullptr);
                                char buf[32];
                                std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
                                return std::string(buf);
                              }()},
                             {"cores", cores}, {"comm", comm.comm}, {"ranks_per_host", ranks},
                             {"kernel_threads", threads}, {"optimizer", spec->ToString()},
                             {"inter_host", "not measured (one host): from --inter-host-bytes-per-s and --inter-host-latency-us"}};
  // Gloo's ranks are this command run again as processes: the kernels are
  // measured once, here, and handed to them (measured side by side they
  // would share the cores).
  constexpr const char* kHandOver = "SHARDREC_BENCH_TOPOLOGY_KERNELS";
  if (const char* given = std::getenv(kHandOver); given != nullptr) {
    auto parsed = ParseTopologyJson(given, kHandOver);
    if (!parsed.ok()) return fail(parsed.status().message(), kExitFailure);
    topo.kernels = parsed->kernels;
    topo.input_dist_seconds_per_id = parsed->input_dist_seconds_per_id;
    topo.seconds_per_table = parsed->seconds_per_table;
    const auto handed = nlohmann::json::parse(parsed->measured);
    measured["kernels"] = handed.at("kernels");
    measured["input_dist"] = handed.at("input_dist");
    measured["per_table"] = handed.at("per_table");
    kernels.clear();
  } else {
    if (!g.json) std::cerr << "[bench topology] input dist: host work per id...\n";
    bench::InputDistBenchConfig ic;
    ic.min_time = min_time;
    auto r = bench::RunInputDistBench(session.registry, ic);
    if (!r.ok()) return fail("input dist: " + r.status().message(), kExitFailure);
    topo.input_dist_seconds_per_id = r->seconds_per_id;
    measured["input_dist"] = {{"seconds_per_id", r->seconds_per_id}, {"best_seconds_per_id", r->best_seconds_per_id},
                              {"ids_per_batch", r->ids},
                              {"how", "route + KJT all-to-all of one table's batch on a one-rank local group"}};
    if (!g.json) std::cerr << "[bench topology] host work per table (train on one rank, 32 tables against 1)...\n";
    nlohmann::json how;
    auto per_table = MeasureSecondsPerTable(spec->ToString(), 5, &how);
    if (!per_table.ok()) return fail("per table: " + per_table.status().message(), kExitFailure);
    topo.seconds_per_table = per_table.value();
    how["seconds"] = per_table.value();
    measured["per_table"] = how;
  }
  for (const std::string& name : kernels) {
    auto ref = session.registry.Find(SR_KIND_KERNEL, name);
    if (!ref.ok()) return fail(ref.status().message());
    if (Status st = CheckKernelsUsable(session.registry, {name}, spec->optimizer); !st.ok()) return fail(st.message());
    OptionList kernel_options = session.plugin_options.For("kernel", name);
    // As `train` runs it; a user's figure is kept, and measured with.
    const std::string given = ShareCoresAmongRanks(ref.value(), ranks, kernel_options);
    int kernel_threads = threads;
    if (!given.empty()) {
      const auto count = ThreadsCount(given);
      if (!count) return fail(fmt::format("--plugin-opt kernel.{}.threads={}: not a number", name, given));
      kernel_threads = *count > 0 ? *count : cores;
    }
    // [0]: a table that goes to memory, [1]: one that stays in the cache.
    double fwd[2][2] = {}, bwd[2][2] = {};
    const int64_t dims[2] = {16, 128};
    const int64_t table_rows[2] = {1 << 18, 4096};
    for (int place = 0; place < 2; ++place) {
      for (int i = 0; i < 2; ++i) {
        bench::KernelBenchConfig c;
        c.rows = table_rows[place];
        c.dim = dims[i];
        c.batch = 2048;
        c.pooling = 8;
        c.optimizer = spec->optimizer;
        c.optimizer_params = spec->params;
        c.threads = kernel_threads;
        c.min_time = min_time;
        c.reps = 3;
        c.kernel_options = kernel_options;
        if (!g.json) {
          std::cerr << fmt::format("[bench topology] kernel {}: {} rows x {} columns...\n", name, c.rows, dims[i]);
        }
        auto r = bench::RunKernelBench(ref.value(), c, {});
        if (!r.ok()) return fail("kernel " + name + ": " + r.status().message(), kExitFailure);
        if (!r->has_backward) return fail("kernel " + name + " has no backward to measure", kExitFailure);
        fwd[place][i] = 1 / r->forward.median;
        bwd[place][i] = 1 / r->backward.median;
      }
    }
    // Seconds per lookup = a + b x row bytes, through the two widths.
    auto fit = [&](const double t[2]) {
      const double b0 = static_cast<double>(dims[0] * 4), b1 = static_cast<double>(dims[1] * 4);
      KernelSpeed s;
      s.seconds_per_byte = std::max(0.0, (t[1] - t[0]) / (b1 - b0));
      s.seconds_per_lookup = std::max(0.0, t[0] - s.seconds_per_byte * b0);
      if (s.seconds_per_lookup + s.seconds_per_byte <= 0) s.seconds_per_lookup = t[0];
      return s;
    };
    KernelCost cost{fit(fwd[0]), fit(bwd[0])};
    cost.cached_max_shard_bytes = CachedShardBytes(ranks);
    cost.cached_forward = fit(fwd[1]);
    cost.cached_backward = fit(bwd[1]);
    topo.kernels[name] = cost;
    measured["kernels"][name] = {
        {"forward_lookups_per_s", {{"16", 1 / fwd[0][0]}, {"128", 1 / fwd[0][1]}}},
        {"backward_lookups_per_s", {{"16", 1 / bwd[0][0]}, {"128", 1 / bwd[0][1]}}},
        {"rows", table_rows[0]},
        {"threads", kernel_threads},
        {"cached", {{"rows", table_rows[1]},
                    {"forward_lookups_per_s", {{"16", 1 / fwd[1][0]}, {"128", 1 / fwd[1][1]}}},
                    {"backward_lookups_per_s", {{"16", 1 / bwd[1][0]}, {"128", 1 / bwd[1][1]}}},
                    {"max_shard_bytes", "a rank's share of the last-level cache (sysconf), capped at 32 MiB"}}}};
  }
  topo.inter_host = {inter_bps, inter_latency_us * 1e-6};
  topo.ranks_per_host = ranks;
  topo.cores_per_host = cores;  // more ranks than cores take turns (cost_model.h)
  {
    PlannerTopology hand = topo;
    hand.intra_host = DefaultTopology().intra_host;
    hand.measured = nlohmann::json{{"kernels", measured["kernels"]},
                                   {"input_dist", measured["input_dist"]},
                                   {"per_table", measured["per_table"]}}
                        .dump();
    ::setenv(kHandOver, TopologyToJson(hand).c_str(), 1);
  }
  if (ranks == 1) {
    topo.intra_host = DefaultTopology().intra_host;
    measured["intra_host"] = "not measured (one rank): the built-in figures";
  }
  auto finish = [&]() {
    topo.measured = measured.dump();
    const std::string text = TopologyToJson(topo);
    if (output.empty()) {
      std::cout << text << "\n";
      return kExitOk;
    }
    const Status written = WriteFileAtomically(output, [&](std::ostream& os) { os << text << "\n"; }, std::ios::out);
    if (!written.ok()) return fail("-o: " + written.message(), kExitFailure);
    if (!g.json) std::cout << "topology: " << output << "\n";
    return kExitOk;
  };
  if (ranks == 1) return finish();
  return RunOnRanks("bench topology", args, comm, session, [&](const ProcessGroup& group) {
    bench::CommBenchConfig c;
    c.op = bench::CommBenchOp::kAllToAllV;
    c.bytes = bytes;
    c.min_time = min_time;
    c.reps = 3;
    c.baseline = false;
    auto r = bench::RunCommBench(group, c, {});
    if (!r.ok()) {
      PrintLine(std::cerr, "rank " + std::to_string(group.rank()) + ": " + r.status().message());
      return kExitFailure;
    }
    if (group.rank() != 0) return kExitOk;
    const double n = group.world_size();
    // Each rank sends (n-1)/n of its buffer to the others.
    topo.intra_host = {static_cast<double>(bytes) * (n - 1) / n / r->op.median, r->small.median};
    measured["intra_host"] = {{"all_to_all_bytes", bytes}, {"seconds", r->op.median},
                              {"small_seconds", r->small.median}, {"world_size", group.world_size()},
                              {"comm", group.backend()}};
    return finish();
  });
}

}  // namespace shardrec::cli
