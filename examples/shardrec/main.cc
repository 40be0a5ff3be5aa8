// `shardrec`: the host program. It finds plugins, and runs jobs made of them.
// Subcommands are chosen by their leading words; everything after them is
// parsed by that subcommand (see cli.h). With no arguments at all it runs
// the main job, `demo` (a small DLRM learns a planted click log); options
// without a command are train's (DESIGN.md: "Running it").
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "cli.h"
#include "commands.h"
#include "exit_guard.h"
#include "shardrec/core/resources/step_allocations.h"
#include "shardrec/core/version.h"

namespace shardrec::cli {

const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      {"demo", "the main job: a small DLRM learns a planted click log; its AUC against the planted model's",
       &RunDemo},
      {"train", "train sharded embedding tables (synthetic data, or --model --data click logs): throughput, "
                "time split, memory, metrics, --verify",
       &RunTrain},
      {"plugins list", "list the plugins found: kind, name, version, library, ABI, capabilities",
       &RunPluginsList},
      {"plugins check", "run the conformance kit on plugin libraries given by path",
       &RunPluginsCheck},
      {"plugins", "list the plugins found and run the conformance kit on each", &RunPlugins},
      {"plan", "choose a sharding plan for tables on a topology: estimates per table and rank, --explain, --compare",
       &RunPlan},
      {"embed", "look up a batch (.npy files) in tables (JSON); optionally one optimizer step",
       &RunEmbed},
      {"bench abi", "cost of one call through the plugin ABI vs a C++ virtual call",
       &RunBenchAbi},
      {"bench kernel", "kernel forward/backward speed vs a row-gather probe of the same table",
       &RunBenchKernel},
      {"bench comm", "a comm backend's bandwidth and latency vs Gloo called directly / a memcpy probe",
       &RunBenchComm},
      {"bench topology", "measure this machine for the planner (kernel speed, link bandwidth and latency) into a JSON",
       &RunBenchTopology},
      {"bench planner", "planner speed (1000 tables x 64 ranks) and, with --train, estimated vs measured step per plan",
       &RunBenchPlanner},
      {"bench mc", "managed-collision remap speed (hits, misses, eviction rounds) vs a slot-lookup probe",
       &RunBenchMc},
      {"bench cache", "an id stream trained through a table larger than its RAM cache, per policy and load factor",
       &RunBenchCache},
      {"bench checkpoint", "checkpoint save and load speed vs a sequential write/read probe; peak extra memory",
       &RunBenchCheckpoint},
      {"bench data", "the click-log reader alone on 1 and 2 threads vs a read-only probe of the same bytes",
       &RunBenchData},
      {"replay-evictions", "replay a recorded id stream through each eviction policy: hit rates side by side",
       &RunReplayEvictions},
      {"checkpoint inspect", "what a checkpoint holds (step, optimizer, tables, files); --verify checks every file",
       &RunCheckpointInspect},
      {"comm check", "every collective of a comm backend against locally computed results",
       &RunCommCheck},
      {"datagen", "write a Criteo-format click log from a planted model, with the planted model's own AUC",
       &RunDatagen},
      {"export", "a trained checkpoint's tables quantized (int8, int4, int2, fp16) with its dense model, for infer",
       &RunExport},
      {"infer", "score a click log with an exported model: tables sharded for inference; p50/p99 latency, AUC",
       &RunInfer},
      {"metrics", "AUC, NE, log loss, calibration, accuracy of predictions (.npy), as train computes them",
       &RunMetrics},
      {"plot", "draw a train --metrics-out CSV: loss and AUC against samples (matplotlib)", &RunPlot},
      {"codec", "run a quantized comm codec (fp16, bf16, int8, fp8, a plugin's) on a .npy: bytes and error",
       &RunCodec},
      {"launch", "run a command as this host's ranks of a job (torchrun-style variables)", &RunLaunch},
  };
  return commands;
}

namespace {

void PrintTopHelp() {
  std::cout << "shardrec " << kShardrecVersion
            << " - sharded embedding tables: a host plus plugins (sharders, compute kernels,\n"
               "comm backends, eviction policies, comm codecs) behind one stable C ABI.\n\n"
               "usage: shardrec [COMMAND] [options]\n\n"
               "With no arguments, shardrec runs its main job, 'shardrec demo': a small DLRM learns a\n"
               "planted click log on 2 ranks as threads and is scored against the planted model. With\n"
               "options but no command, they are train's (synthetic sharded training by default).\n\n"
               "commands:\n";
  size_t width = 0;
  for (const Command& c : Commands()) width = std::max(width, c.words.size());
  for (const Command& c : Commands()) {
    std::cout << "  " << c.words << std::string(width + 2 - c.words.size(), ' ') << c.summary << "\n";
  }
  std::cout << "\n'shardrec COMMAND --help' shows a command's options. Every option can also be\n"
               "given in a --config file (key = value) or as SHARDREC_<OPTION> in the\n"
               "environment (e.g. SHARDREC_PLUGIN_DIR); flags win over the file, the file over\n"
               "the environment. Plugins are found in --plugin-dir, SHARDREC_PLUGIN_PATH and the\n"
               "directory installed beside this program.\n";
}

// The first tokens that are not options select the command, if they name one.
int Dispatch(const std::vector<std::string>& args) {
  if (args.size() == 1 && (args[0] == "--help" || args[0] == "-h" || args[0] == "help")) {
    PrintTopHelp();
    return kExitOk;
  }
  if (args.size() == 1 && args[0] == "--version") {
    std::cout << "shardrec " << kShardrecVersion << " (plugin ABI " << SR_ABI_MAJOR << "."
              << SR_ABI_MINOR << ")\n";
    return kExitOk;
  }
  for (const Command& c : Commands()) {
    std::vector<std::string> words;
    for (size_t start = 0, end; start < c.words.size(); start = end + 1) {
      end = c.words.find(' ', start);
      if (end == std::string::npos) end = c.words.size();
      words.push_back(c.words.substr(start, end - start));
    }
    if (args.size() >= words.size() &&
        std::equal(words.begin(), words.end(), args.begin())) {
      return c.run(std::vector<std::string>(args.begin() + words.size(), args.end()));
    }
  }
  // No arguments at all: the main job.
  if (args.empty()) return RunDemo(args);
  if (!args.empty() && args[0].rfind("-", 0) != 0) {
    std::cerr << "shardrec: unknown command '" << args[0] << (args.size() > 1 ? " " + args[1] : "")
              << "'. Commands:\n";
    for (const Command& c : Commands()) std::cerr << "  " << c.words << "\n";
    std::cerr << "Try 'shardrec --help'.\n";
    return kExitUsage;
  }
  return RunTrain(args);
}

}  // namespace
}  // namespace shardrec::cli

int main(int argc, char** argv) {
  shardrec::cli::InstallExitGuard();
  // Each step frees and reallocates the same large buffers: keep them.
  shardrec::KeepStepAllocationsForReuse();
  int code = shardrec::cli::kExitFailure;
  try {
    // Logs go to stderr so that stdout carries only results (and --json).
    spdlog::set_default_logger(spdlog::stderr_color_mt("shardrec"));
    code = shardrec::cli::Dispatch(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception& e) {
    std::cerr << "shardrec: internal error: " << e.what() << "\n";
  }
  shardrec::cli::MarkHostExit();
  return code;
}
