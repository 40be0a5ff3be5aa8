// The comm flags of every multi-rank command (`comm check`, `bench comm`,
// later `train`), and running a command's body on the ranks this process
// hosts:
//   --comm local --world-size N      N threads of this process
//   --comm gloo  --world-size N      N processes: re-runs itself through the
//                                    launcher (like torchrun --standalone)
//   under shardrec launch / torchrun / mpirun / Slurm
//                                    this process is one rank; the rank, the
//                                    world and the rendezvous come from the
//                                    environment (SHARDREC_RDZV, SHARDREC_RUN_ID)
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli.h"
#include "shardrec/core/comm/process_group.h"

namespace shardrec::cli {

struct CommFlags {
  std::string comm = "local";
  int world_size = 0;  // 0: the launcher's, or 1
  std::string rdzv;    // default: SHARDREC_RDZV from the launcher
  std::string run_id;  // default: SHARDREC_RUN_ID from the launcher
  int64_t timeout_ms = 60000;
};

void AddCommOptions(po::options_description& desc, CommFlags* flags);

// Runs body(group) once per rank hosted here (threads for `local`), and
// returns the worst exit code. `command_words` and `args` are what a
// standalone spawn re-runs. Errors joining the job are printed with the rank
// and give kExitFailure.
using RankBody = std::function<int(const ProcessGroup& group)>;
int RunOnRanks(const std::string& command_words, const std::vector<std::string>& args, const CommFlags& flags,
               const HostSession& session, const RankBody& body);

}  // namespace shardrec::cli
