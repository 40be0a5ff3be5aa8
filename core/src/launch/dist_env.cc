// Reading the launcher's variables into a DistEnv (see dist_env.h).
#include "shardrec/core/launch/dist_env.h"

#include <charconv>
#include <optional>
#include <string_view>
#include <vector>

#include "shardrec/core/comm/kv_store.h"

namespace shardrec {

namespace {

using GetEnv = std::function<const char*(const char*)>;

// The variable's value, nullopt when unset or empty (shells often export
// an empty value to mean "none").
std::optional<std::string> Get(const GetEnv& getenv_fn, const char* name) {
  const char* v = getenv_fn(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

Status Malformed(const std::string& name, const std::string& value, const std::string& expected) {
  return InvalidArgumentError(name + "='" + value + "' is not " + expected);
}

// Strict decimal: digits only, no sign or spaces, fits an int.
std::optional<int> ToInt(std::string_view s) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return std::nullopt;
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

StatusOr<int> ParseCount(const std::string& name, const std::string& value, int min) {
  std::optional<int> v = ToInt(value);
  if (!v || *v < min) {
    return Malformed(name, value, min == 0 ? "a non-negative integer" : "a positive integer");
  }
  return *v;
}

// A rank variable and its size variable, both or neither; nullopt when
// neither is set. rank < size is checked.
struct Pair {
  int rank, size;
};
StatusOr<std::optional<Pair>> ReadPair(const GetEnv& getenv_fn, const char* rank_name, const char* size_name) {
  std::optional<std::string> rank = Get(getenv_fn, rank_name);
  std::optional<std::string> size = Get(getenv_fn, size_name);
  if (!rank && !size) return std::optional<Pair>();
  if (!size) {
    return InvalidArgumentError(std::string(rank_name) + "='" + *rank + "' is set but " + size_name + " is not");
  }
  if (!rank) {
    return InvalidArgumentError(std::string(size_name) + "='" + *size + "' is set but " + rank_name + " is not");
  }
  SR_ASSIGN_OR_RETURN(int r, ParseCount(rank_name, *rank, 0));
  SR_ASSIGN_OR_RETURN(int s, ParseCount(size_name, *size, 1));
  if (r >= s) {
    return InvalidArgumentError(std::string(rank_name) + "='" + *rank + "' is not below " + size_name + "='" + *size +
                                "'");
  }
  return std::optional<Pair>(Pair{r, s});
}

// A launcher with a global pair and an optional local pair.
Status ReadGlobalAndLocal(const GetEnv& getenv_fn, const char* rank, const char* size, const char* local_rank,
                          const char* local_size, DistEnv* env) {
  SR_ASSIGN_OR_RETURN(std::optional<Pair> global, ReadPair(getenv_fn, rank, size));
  SR_ASSIGN_OR_RETURN(std::optional<Pair> local, ReadPair(getenv_fn, local_rank, local_size));
  env->rank = global->rank;
  env->world_size = global->size;
  if (local) {
    if (local->size > global->size) {
      return InvalidArgumentError(std::string(local_size) + "=" + std::to_string(local->size) + " is above " + size +
                                  "=" + std::to_string(global->size));
    }
    env->local_rank = local->rank;
    env->local_world_size = local->size;
  } else {
    env->local_rank = global->rank;
    env->local_world_size = global->size;
  }
  return Status::Ok();
}

// Slurm's per-node task counts: "2(x3),1" is nodes 0, 1, 2 with 2 tasks and
// node 3 with 1.
StatusOr<std::vector<int>> ParseSlurmTaskList(const std::string& name, const std::string& value) {
  std::vector<int> counts;
  auto bad = [&] { return Malformed(name, value, "a Slurm task list such as '2(x3),1'"); };
  std::string_view rest = value;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view item = rest.substr(0, comma);
    int repeat = 1;
    if (const size_t paren = item.find("(x"); paren != std::string_view::npos) {
      if (item.back() != ')') return bad();
      std::optional<int> r = ToInt(item.substr(paren + 2, item.size() - paren - 3));
      if (!r || *r < 1) return bad();
      repeat = *r;
      item = item.substr(0, paren);
    }
    std::optional<int> count = ToInt(item);
    if (!count || *count < 1) return bad();
    // A repeat count is a number of nodes, so an absurd one is a typo, not a job.
    if (counts.size() + static_cast<size_t>(repeat) > 1000000) return bad();
    counts.insert(counts.end(), static_cast<size_t>(repeat), *count);
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return counts;
}

Status ReadSlurm(const GetEnv& getenv_fn, DistEnv* env) {
  SR_ASSIGN_OR_RETURN(std::optional<Pair> global, ReadPair(getenv_fn, "SLURM_PROCID", "SLURM_NTASKS"));
  std::optional<std::string> local_id = Get(getenv_fn, "SLURM_LOCALID");
  if (!local_id) return InvalidArgumentError("SLURM_PROCID is set but SLURM_LOCALID is not");
  SR_ASSIGN_OR_RETURN(int local_rank, ParseCount("SLURM_LOCALID", *local_id, 0));
  // The step's own distribution first: --ntasks-per-node is only what was
  // asked for, and the last node may get fewer tasks.
  const char* list_name = "SLURM_STEP_TASKS_PER_NODE";
  std::optional<std::string> list = Get(getenv_fn, list_name);
  if (!list) {
    list_name = "SLURM_NTASKS_PER_NODE";
    list = Get(getenv_fn, list_name);
  }
  if (!list) {
    return InvalidArgumentError(
        "SLURM_PROCID is set but neither SLURM_STEP_TASKS_PER_NODE nor SLURM_NTASKS_PER_NODE says how many "
        "tasks run on this node");
  }
  SR_ASSIGN_OR_RETURN(std::vector<int> counts, ParseSlurmTaskList(list_name, *list));
  int local_size = counts[0];
  std::optional<std::string> node_id = Get(getenv_fn, "SLURM_NODEID");
  if (node_id) {
    SR_ASSIGN_OR_RETURN(int node, ParseCount("SLURM_NODEID", *node_id, 0));
    // A single count ("4") means every node runs that many.
    if (counts.size() > 1) {
      if (static_cast<size_t>(node) >= counts.size()) {
        return InvalidArgumentError("SLURM_NODEID='" + *node_id + "' is past the " + std::to_string(counts.size()) +
                                    " nodes of " + list_name + "='" + *list + "'");
      }
      local_size = counts[static_cast<size_t>(node)];
    }
  } else if (counts.size() > 1) {
    for (int c : counts) {
      if (c != counts[0]) {
        return InvalidArgumentError(std::string(list_name) + "='" + *list +
                                    "' differs between nodes and SLURM_NODEID is not set");
      }
    }
  }
  if (local_rank >= local_size) {
    return InvalidArgumentError("SLURM_LOCALID='" + *local_id + "' is not below this node's task count " +
                                std::to_string(local_size) + " (" + list_name + "='" + *list + "')");
  }
  if (local_size > global->size) {
    return InvalidArgumentError(std::string(list_name) + "='" + *list + "' gives this node " +
                                std::to_string(local_size) +
                                " tasks, more than SLURM_NTASKS=" + std::to_string(global->size));
  }
  env->rank = global->rank;
  env->world_size = global->size;
  env->local_rank = local_rank;
  env->local_world_size = local_size;
  return Status::Ok();
}

// A real step id is a number; "batch", "extern" and "interactive" are
// Slurm's own steps, which launched nothing.
// DistEnv::job_id: Slurm's job and step, else the MPI job, else torchrun's
// master address and port, else "".
std::string JobId(const GetEnv& getenv_fn) {
  if (std::optional<std::string> job = Get(getenv_fn, "SLURM_JOB_ID")) {
    std::optional<std::string> step = Get(getenv_fn, "SLURM_STEP_ID");
    if (!step) step = Get(getenv_fn, "SLURM_STEPID");
    return "slurm_" + *job + "_" + step.value_or("");
  }
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_orte_ess_jobid", "OMPI_MCA_ess_base_jobid", "PMI_JOBID"}) {
    if (std::optional<std::string> id = Get(getenv_fn, name)) return std::string("mpi_") + *id;
  }
  if (std::optional<std::string> port = Get(getenv_fn, "MASTER_PORT")) {
    return "torchrun_" + Get(getenv_fn, "MASTER_ADDR").value_or("") + "_" + *port;
  }
  return "";
}

bool InSlurmStep(const GetEnv& getenv_fn) {
  std::optional<std::string> step = Get(getenv_fn, "SLURM_STEP_ID");
  if (!step) step = Get(getenv_fn, "SLURM_STEPID");
  return step && ToInt(*step).has_value();
}

}  // namespace

Status CheckRendezvousSyntax(const std::string& rdzv) {
  const bool cross_process = rdzv.rfind("file:", 0) == 0 || rdzv.rfind("redis:", 0) == 0;
  // Launched ranks are processes: an in-process table (local:) cannot serve.
  if (!cross_process) return InvalidArgumentError("'" + rdzv + "' is neither file:DIR nor redis:HOST:PORT");
  return ParseRendezvous(rdzv).status();
}

StatusOr<DistEnv> ReadDistEnv(const std::function<const char*(const char*)>& getenv_fn) {
  DistEnv env;
  if (Get(getenv_fn, "RANK") || Get(getenv_fn, "WORLD_SIZE")) {
    SR_RETURN_IF_ERROR(ReadGlobalAndLocal(getenv_fn, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", &env));
    env.source = "torchrun";
  } else if (Get(getenv_fn, "OMPI_COMM_WORLD_RANK") || Get(getenv_fn, "OMPI_COMM_WORLD_SIZE")) {
    SR_RETURN_IF_ERROR(ReadGlobalAndLocal(getenv_fn, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                          "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", &env));
    env.source = "mpirun";
  } else if ((Get(getenv_fn, "PMI_RANK") || Get(getenv_fn, "PMI_SIZE")) &&
             // srun's own PMI sets PMI_RANK without Hydra's local ids; Slurm's
             // variables then say more (the node's task count).
             (Get(getenv_fn, "MPI_LOCALRANKID") || !InSlurmStep(getenv_fn))) {
    SR_RETURN_IF_ERROR(
        ReadGlobalAndLocal(getenv_fn, "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", &env));
    env.source = "mpirun";
  } else if (Get(getenv_fn, "SLURM_PROCID") && InSlurmStep(getenv_fn)) {
    SR_RETURN_IF_ERROR(ReadSlurm(getenv_fn, &env));
    env.source = "slurm";
  }

  if (std::optional<std::string> addr = Get(getenv_fn, "MASTER_ADDR")) env.master_addr = *addr;
  if (std::optional<std::string> port = Get(getenv_fn, "MASTER_PORT")) {
    std::optional<int> p = ToInt(*port);
    if (!p || *p < 1 || *p > 65535) return Malformed("MASTER_PORT", *port, "a port number in 1..65535");
    env.master_port = *p;
  }
  if (std::optional<std::string> rdzv = Get(getenv_fn, "SHARDREC_RDZV")) {
    if (Status s = CheckRendezvousSyntax(*rdzv); !s.ok()) return InvalidArgumentError("SHARDREC_RDZV=" + s.message());
    env.rdzv = *rdzv;
  }
  if (std::optional<std::string> id = Get(getenv_fn, "SHARDREC_RUN_ID")) {
    env.run_id = *id;
  } else if (std::optional<std::string> tid = Get(getenv_fn, "TORCHELASTIC_RUN_ID")) {
    env.run_id = *tid;
  }
  env.job_id = JobId(getenv_fn);
  return env;
}

}  // namespace shardrec
