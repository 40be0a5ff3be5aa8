// Where this process sits in a multi-process job, as told by whoever started
// it: `shardrec launch` or torchrun (RANK, WORLD_SIZE, ...), mpirun (Open MPI
// or MPICH/Hydra) or Slurm's srun. Commands read it once at start-up to pick
// their rank, the rendezvous and the run id; a process that no launcher
// started reads as rank 0 of 1 with launched() false.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

#include "shardrec/core/status.h"

namespace shardrec {

struct DistEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr;  // MASTER_ADDR, "" when unset
  int master_port = 0;      // MASTER_PORT, 0 when unset
  std::string rdzv;         // SHARDREC_RDZV: "file:DIR" | "redis:HOST:PORT" ("" when none)
  std::string run_id;       // SHARDREC_RUN_ID, else TORCHELASTIC_RUN_ID, else ""
  // The launcher's own job id, a run id for jobs that name none:
  // "slurm_<SLURM_JOB_ID>_<step>", "mpi_<PMIX_NAMESPACE or Open MPI/PMI job id>",
  // "torchrun_<MASTER_ADDR>_<MASTER_PORT>", or "".
  std::string job_id;
  // "torchrun" (also set by shardrec launch), "mpirun", "slurm", or "" (not launched).
  std::string source;
  bool launched() const { return !source.empty(); }
};

// Reads the environment through `getenv_fn` (tests pass a fake one). The
// first launcher whose variables are present wins:
//   torchrun   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   Open MPI   OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   MPICH      PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS
//   Slurm      SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and the node's task
//              count from SLURM_STEP_TASKS_PER_NODE or SLURM_NTASKS_PER_NODE
//              ("2(x3),1": nodes 0-2 run 2 tasks, node 3 runs 1; this node
//              is SLURM_NODEID). Only inside an srun step (SLURM_STEP_ID set
//              and numeric): a batch script also has SLURM_PROCID=0 but
//              started no ranks.
// For torchrun and MPI the local pair is optional; without it every rank is
// taken to be on this host (local = global). MASTER_ADDR, MASTER_PORT,
// SHARDREC_RDZV and SHARDREC_RUN_ID are read whatever the launcher. An empty
// variable counts as unset.
// Error: INVALID_ARGUMENT naming the variable and its value for a
// non-number, a rank outside its size, a rank without its size (or the
// reverse), a malformed SHARDREC_RDZV or MASTER_PORT.
StatusOr<DistEnv> ReadDistEnv(const std::function<const char*(const char*)>& getenv_fn =
                                  [](const char* name) -> const char* { return std::getenv(name); });

// Checks the syntax of a rendezvous for processes: "file:DIR" (DIR not
// empty) or "redis:HOST:PORT" (PORT in 1..65535). Does not touch the
// directory or the server. Error: INVALID_ARGUMENT starting with the quoted
// value ("'redis:h:x': port 'x' is not a number in 1..65535"), so callers
// prefix the flag or variable it came from.
Status CheckRendezvousSyntax(const std::string& rdzv);

}  // namespace shardrec
