// Starting this host's ranks of a job as child processes and supervising
// them, as torchrun does: each child gets the torchrun variables (RANK,
// WORLD_SIZE, ... read back by ReadDistEnv), and the first rank to fail
// brings the others down, so a job never hangs with a dead member.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec {

struct LaunchSpec {
  std::vector<std::string> command;  // argv; command[0] found through this process's PATH like execvp
  int nproc_per_node = 1, nnodes = 1, node_rank = 0;
  // An empty rdzv or run_id removes SHARDREC_RDZV or the run ids from the
  // children's environment rather than passing on the launcher's own.
  std::string rdzv, run_id, master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port on this host
  // Set in every child on top of this process's environment, after the
  // launcher's variables (so it may override them); an empty value removes
  // the variable.
  std::vector<std::pair<std::string, std::string>> extra_env;
  double grace_seconds = 5;  // after a failure: SIGTERM the others, SIGKILL after this
  // Progress and failure lines, without a trailing newline; when empty they
  // go to stderr as "shardrec launch: LINE".
  std::function<void(const std::string&)> log;
};

struct LaunchResult {
  // 0 when every rank exited 0; 1 when a rank failed (exited non-zero, was
  // killed by a signal or could not be started); 128 + N when the launcher
  // itself got signal N (SIGINT, SIGTERM, SIGHUP) and stopped the ranks.
  int exit_code = 0;
  int failed_rank = -1;  // global rank of the first failure, -1 if none
  std::string message;   // what happened, naming the rank ("" on success)
};

// Starts spec.nproc_per_node children, local rank i with
//   RANK = node_rank * nproc_per_node + i, WORLD_SIZE = nnodes * nproc_per_node,
//   LOCAL_RANK = i, LOCAL_WORLD_SIZE = nproc_per_node, GROUP_RANK = node_rank,
//   MASTER_ADDR, MASTER_PORT, SHARDREC_RDZV, SHARDREC_RUN_ID, TORCHELASTIC_RUN_ID,
// each in its own process group, and waits for all of them. When one fails
// the others get SIGTERM (to their whole process group) and, after
// grace_seconds, SIGKILL. SIGINT, SIGTERM and SIGHUP sent to the launcher
// are forwarded to the ranks, which are then stopped the same way; a second
// one kills them at once. A signal the caller ignores (nohup's SIGHUP) stays
// ignored.
//
// Blocks SIGINT, SIGTERM, SIGHUP and SIGCHLD in the calling thread while it
// runs and restores the mask and SIGCHLD's disposition before returning.
// Call it from the main thread before other threads exist (or with those
// signals blocked in every other thread), or a process-directed signal may
// go to another thread. It reaps only its own children.
//
// Error (as Status): INVALID_ARGUMENT for an empty command, nproc_per_node
// or nnodes < 1, node_rank outside [0, nnodes), a negative grace; INTERNAL
// when the system refuses (no free port, sigprocmask fails). A rank that
// cannot be started is a failed rank in the result, not an error.
StatusOr<LaunchResult> LaunchLocalRanks(const LaunchSpec& spec);

}  // namespace shardrec
