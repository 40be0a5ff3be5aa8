// `shardrec launch`: runs a command as this host's ranks of a job, the way
// torchrun does, and brings every rank down when one fails. On one host it
// needs nothing but --nproc-per-node (a throwaway file rendezvous and run
// id are made up); across hosts every node runs it with the same --rdzv
// and --run-id and its own --node-rank.
#include <algorithm>
#include <filesystem>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "shardrec/core/launch/dist_env.h"
#include "shardrec/core/launch/process_launcher.h"
#include "standalone.h"

namespace shardrec::cli {

namespace {

constexpr const char* kUsageTail =
    " -- COMMAND [ARGS...]\n\n"
    "Starts COMMAND as --nproc-per-node processes (the ranks of this host) and waits for them.\n"
    "Each rank gets, as torchrun gives them:\n"
    "  RANK              node-rank * nproc-per-node + local rank (0-based, host-major)\n"
    "  WORLD_SIZE        nnodes * nproc-per-node\n"
    "  LOCAL_RANK        0 .. nproc-per-node - 1;  LOCAL_WORLD_SIZE  nproc-per-node\n"
    "  GROUP_RANK        --node-rank\n"
    "  MASTER_ADDR, MASTER_PORT                 --master-addr, --master-port\n"
    "  SHARDREC_RDZV     where the ranks meet: --rdzv\n"
    "  SHARDREC_RUN_ID, TORCHELASTIC_RUN_ID     --run-id (the job's name in the rendezvous)\n"
    "shardrec commands read these (also mpirun's and Slurm's own) to find their rank.\n\n"
    "When a rank exits non-zero or is killed, the launcher names it, sends SIGTERM to the\n"
    "others, SIGKILL after --grace seconds, and exits 1. Ctrl-C (SIGINT), SIGTERM and SIGHUP\n"
    "are passed on to the ranks, which are stopped the same way; the exit code is then 128+N.\n"
    "Everything after -- is the command, passed untouched; ranks' options go there.\n\n"
    "One host, 4 ranks (a file rendezvous in a fresh temp directory and a run id are made up):\n"
    "  shardrec launch --nproc-per-node 4 -- ./my_job --steps 100\n"
    "Two hosts, 8 ranks each, meeting in a Redis server on host a (same run id everywhere):\n"
    "  a$ shardrec launch --nproc-per-node 8 --nnodes 2 --node-rank 0 --rdzv redis:a:6379 \\\n"
    "       --run-id job42 --master-addr a -- ./my_job --steps 100\n"
    "  b$ shardrec launch --nproc-per-node 8 --nnodes 2 --node-rank 1 --rdzv redis:a:6379 \\\n"
    "       --run-id job42 --master-addr a -- ./my_job --steps 100";

struct LaunchFlags {
  int nproc_per_node = 1, nnodes = 1, node_rank = 0, master_port = 0;
  double grace = 5;
  std::string rdzv, run_id, master_addr = "127.0.0.1";
};

int UsageError(const std::string& message) {
  std::cerr << "shardrec launch: " << message << "\nTry 'shardrec launch --help'.\n";
  return kExitUsage;
}

// Checks the flags together; a usage error message, or nullopt.
std::optional<std::string> CheckFlags(const LaunchFlags& f) {
  if (f.nproc_per_node < 1) return "--nproc-per-node must be at least 1";
  if (f.nnodes < 1) return "--nnodes must be at least 1";
  if (f.node_rank < 0 || f.node_rank >= f.nnodes) {
    return "--node-rank " + std::to_string(f.node_rank) + " is not in 0.." + std::to_string(f.nnodes - 1) +
           " (--nnodes " + std::to_string(f.nnodes) + ")";
  }
  if (!(f.grace >= 0)) return "--grace must be 0 or more seconds";
  if (f.master_port < 0 || f.master_port > 65535) return "--master-port must be in 0..65535 (0: pick a free one)";
  if (f.master_addr.empty()) return "--master-addr is empty";
  if (!f.rdzv.empty()) {
    if (Status s = CheckRendezvousSyntax(f.rdzv); !s.ok()) return "--rdzv " + s.message();
  }
  if (f.nnodes > 1 && (f.rdzv.empty() || f.run_id.empty())) {
    return "--nnodes " + std::to_string(f.nnodes) +
           " needs --rdzv and --run-id: the ranks of all nodes meet in one rendezvous under one run id, so "
           "every node must be given the same ones (e.g. --rdzv redis:HOST:6379 --run-id job42)";
  }
  return std::nullopt;
}

}  // namespace

int RunLaunch(const std::vector<std::string>& args) {
  // Everything after the first "--" belongs to the ranks, even their --help.
  const auto dashes = std::find(args.begin(), args.end(), "--");
  const std::vector<std::string> own(args.begin(), dashes);
  const std::vector<std::string> command(dashes == args.end() ? args.end() : dashes + 1, args.end());

  GlobalOptions g;
  LaunchFlags f;
  po::options_description desc("launch options");
  AddGlobalOptions(desc, &g);
  desc.add_options()
      ("nproc-per-node", po::value(&f.nproc_per_node)->default_value(f.nproc_per_node),
       "ranks to start on this host")
      ("nnodes", po::value(&f.nnodes)->default_value(f.nnodes), "hosts in the job, each running shardrec launch")
      ("node-rank", po::value(&f.node_rank)->default_value(f.node_rank), "this host's index, 0 .. nnodes-1")
      ("rdzv", po::value(&f.rdzv),
       "where the ranks meet: file:DIR (one host, or a shared file system) or redis:HOST:PORT. "
       "Default on one host: file:<fresh temp directory>, removed afterwards")
      ("run-id", po::value(&f.run_id),
       "the job's name in the rendezvous; the same on every node. Default on one host: a fresh one")
      ("master-addr", po::value(&f.master_addr)->default_value(f.master_addr), "MASTER_ADDR for the ranks")
      ("master-port", po::value(&f.master_port)->default_value(f.master_port),
       "MASTER_PORT for the ranks (0: a free port of this host)")
      ("grace", DoubleValue(&f.grace),
       "seconds between SIGTERM and SIGKILL when stopping the ranks");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("launch", own, desc, nullptr, &vm, &code, kUsageTail)) return code;
  if (std::optional<std::string> error = CheckFlags(f)) return UsageError(*error);
  if (command.empty()) {
    return UsageError("no command: put the command the ranks run after '--', e.g. "
                      "shardrec launch --nproc-per-node 2 -- ./my_job --steps 100");
  }

  // A file rendezvous directory must be there for every rank; making it
  // once here turns a bad path into one clear error instead of N.
  std::optional<TempRendezvousDir> temp_dir;
  if (f.rdzv.empty()) {
    StatusOr<TempRendezvousDir> made = TempRendezvousDir::Create();
    if (!made.ok()) {
      std::cerr << "shardrec launch: " << made.status().message() << "\n";
      return kExitFailure;
    }
    temp_dir.emplace(std::move(made).value());
    f.rdzv = temp_dir->rdzv();
  } else if (f.rdzv.rfind("file:", 0) == 0) {
    std::error_code ec;
    const std::filesystem::path dir = f.rdzv.substr(5);
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir)) {
      std::cerr << "shardrec launch: --rdzv " << f.rdzv << ": cannot create directory '" << dir.string()
                << "': " << (ec ? ec.message() : "a file of that name is in the way") << "\n";
      return kExitFailure;
    }
  }
  if (f.run_id.empty()) f.run_id = NewRunId();

  LaunchSpec spec;
  spec.command = command;
  spec.nproc_per_node = f.nproc_per_node;
  spec.nnodes = f.nnodes;
  spec.node_rank = f.node_rank;
  spec.rdzv = f.rdzv;
  spec.run_id = f.run_id;
  spec.master_addr = f.master_addr;
  spec.master_port = f.master_port;
  spec.grace_seconds = f.grace;
  StatusOr<LaunchResult> result = LaunchLocalRanks(spec);
  if (!result.ok()) {
    std::cerr << "shardrec launch: " << result.status().message() << "\n";
    return kExitFailure;
  }
  if (g.json) {
    nlohmann::json j{{"exit_code", result->exit_code},
                     {"failed_rank", result->failed_rank >= 0 ? nlohmann::json(result->failed_rank) : nullptr},
                     {"message", result->message},
                     {"nproc_per_node", f.nproc_per_node},
                     {"world_size", f.nnodes * f.nproc_per_node},
                     {"rdzv", f.rdzv},
                     {"run_id", f.run_id}};
    std::cout << j.dump() << std::endl;
  }
  return result->exit_code;
}

}  // namespace shardrec::cli
