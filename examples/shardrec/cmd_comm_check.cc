// `shardrec comm check`: every collective of a comm backend against results
// each rank computes locally (core/comm/collective_check.h), on the ranks
// this process hosts. The acceptance run for a backend on a new machine or
// cluster, and how the tests drive ranks as processes. `--fault` makes one
// rank misbehave so the others' failure reports can be checked.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <mutex>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "comm_job.h"
#include "commands.h"
#include "shardrec/core/comm/collective_check.h"

namespace shardrec::cli {

int RunCommCheck(const std::vector<std::string>& args) {
  GlobalOptions g;
  CommFlags flags;
  bool large = false;
  std::string fault;
  po::options_description desc("comm check options");
  AddGlobalOptions(desc, &g);
  AddCommOptions(desc, &flags);
  desc.add_options()
      ("large", po::bool_switch(&large), "also move 64 MiB per rank through each data collective")
      ("fault", po::value(&fault),
       "make one rank misbehave after joining, to test failure reports: exit@RANK (leaves at once, "
       "exit code 0) or stall@RANK (sleeps through the others' timeout)");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("comm check", args, desc, nullptr, &vm, &code,
             "\n\nRuns all_to_all_v, reduce_scatter_v, all_gather_v, all_reduce, broadcast and barrier with\n"
             "empty, tiny and very uneven per-peer counts, float32/float16/bfloat16/int64, several requests\n"
             "in flight, the intra-/cross-host groups and invoke_on_rank_and_broadcast_result, and compares\n"
             "every result with what the rank computes locally. Exit code 0 when every rank passed.\n\n"
             "examples:\n"
             "  shardrec comm check --world-size 7                      # local: 7 threads\n"
             "  shardrec comm check --comm gloo --world-size 4          # gloo: 4 processes on 127.0.0.1\n"
             "  shardrec launch --nproc-per-node 2 --nnodes 2 --node-rank 0 --rdzv redis:HOST:6379 \\\n"
             "      --run-id job1 -- shardrec comm check --comm gloo   # and --node-rank 1 on the other host")) {
    return code;
  }
  int fault_rank = -1;
  std::string fault_kind;
  if (!fault.empty()) {
    const size_t at = fault.find('@');
    fault_kind = fault.substr(0, at);
    if (at == std::string::npos || (fault_kind != "exit" && fault_kind != "stall")) {
      std::cerr << "shardrec comm check: --fault must be exit@RANK or stall@RANK, got '" << fault << "'\n";
      return kExitUsage;
    }
    const std::string rank_text = fault.substr(at + 1);
    char* end = nullptr;
    fault_rank = static_cast<int>(std::strtol(rank_text.c_str(), &end, 10));
    if (rank_text.empty() || *end != '\0' || fault_rank < 0) {
      std::cerr << "shardrec comm check: --fault " << fault << ": RANK must be a rank number\n";
      return kExitUsage;
    }
    if (fault_kind == "exit" && flags.comm == "local") {
      std::cerr << "shardrec comm check: --fault exit@RANK needs ranks as processes (--comm gloo): with local, "
                   "ranks are threads and an exit would end them all\n";
      return kExitUsage;
    }
  }
  HostSession session;
  if (!OpenSession("comm check", g, {SR_KIND_COMM}, &session)) return kExitUsage;

  std::mutex out;
  return RunOnRanks("comm check", args, flags, session, [&](const ProcessGroup& group) {
    if (fault_rank >= group.world_size()) {
      std::cerr << "shardrec comm check: --fault names rank " << fault_rank << " of a " << group.world_size()
                << "-rank world\n";
      return kExitUsage;
    }
    if (group.rank() == fault_rank) {
      if (fault_kind == "exit") {  // gone without a word, as a crashed rank is
        std::fflush(nullptr);
        std::_Exit(0);  // not exit(): the host's exit guard would rightly call that a failure
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(group.timeout_ms() * 3));
      return kExitOk;
    }
    CollectiveCheckOptions o;
    o.large = large;
    if (!g.json) o.progress = [&](const std::string& line) { std::cerr << "  " << line << "\n"; };
    const auto start = std::chrono::steady_clock::now();
    CollectiveCheckReport report = RunCollectiveChecks(group, o);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::lock_guard<std::mutex> lock(out);
    // One write per report, so ranks that are processes sharing a terminal
    // do not interleave within a line.
    std::string failures;
    for (const std::string& f : report.failures) failures += "FAILED " + f + "\n";
    if (!failures.empty()) {
      failures.pop_back();  // PrintLine adds the last newline
      PrintLine(std::cerr, failures);
    }
    if (g.json) {
      nlohmann::json j = {{"rank", group.rank()}, {"world_size", group.world_size()}, {"comm", group.backend()},
                          {"passed", report.passed}, {"failures", report.failures}, {"seconds", secs}};
      PrintLine(std::cout, j.dump());
    } else {
      PrintLine(std::cout, fmt::format("rank {} of {} ({}): {} checks passed, {} failed in {:.3f} s", group.rank(),
                                       group.world_size(), group.backend(), report.passed, report.failures.size(),
                                       secs));
    }
    return report.ok() ? kExitOk : kExitFailure;
  });
}

}  // namespace shardrec::cli
