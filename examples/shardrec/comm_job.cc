// Where a multi-rank command's ranks run (see comm_job.h).
#include "comm_job.h"

#include <algorithm>
#include <iostream>
#include <optional>

#include "shardrec/core/comm/kv_store.h"
#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/device/cuda_runtime.h"
#include "shardrec/core/launch/dist_env.h"
#include "shardrec/core/plugin_objects.h"
#include "standalone.h"

namespace shardrec::cli {

void AddCommOptions(po::options_description& desc, CommFlags* f) {
  desc.add_options()
      ("comm", po::value(&f->comm)->default_value(f->comm),
       "comm backend: local (ranks as threads of this process), gloo (processes and hosts over TCP; one host's "
       "ranks through shared memory), nccl (one process per GPU), or a plugin's")
      ("world-size", po::value(&f->world_size)->default_value(0),
       "ranks to run when no launcher started this process (0: 1, or the launcher's)")
      ("rdzv", po::value(&f->rdzv),
       "where ranks meet: file:DIR or redis:HOST:PORT (default: SHARDREC_RDZV, set by shardrec launch)")
      ("run-id", po::value(&f->run_id),
       "the job's namespace in the rendezvous (default: SHARDREC_RUN_ID, set by shardrec launch)")
      ("timeout-ms", po::value(&f->timeout_ms)->default_value(f->timeout_ms),
       "how long a rank waits for its peers (joining, and each collective) before it fails naming them");
}

namespace {

// The body's exit code, or kExitFailure after printing why the rank could
// not join.
int Finish(int rank, StatusOr<ProcessGroup> group, const RankBody& body) {
  if (!group.ok()) {
    PrintLine(std::cerr, "rank " + std::to_string(rank) + ": cannot join the job: " + group.status().message());
    return kExitFailure;
  }
  return body(group.value());
}

int RunGroup(const HostSession& session, const ProcessGroupConfig& config, const RankBody& body) {
  // A backend that runs on GPUs (nccl) gets this rank's GPU; core stages
  // the engine's host buffers to it.
  ProcessGroupConfig c = config;
  if (auto ref = session.registry.Find(SR_KIND_COMM, c.comm); ref.ok()) {
    c.device = DeviceFor(ref.value(), device::DeviceForRank(c.placement.local_rank));
  }
  return Finish(c.placement.rank, ProcessGroup::Create(session.registry, c), body);
}

}  // namespace

int RunOnRanks(const std::string& command_words, const std::vector<std::string>& args, const CommFlags& flags,
               const HostSession& session, const RankBody& body) {
  const std::string me = "shardrec " + command_words + ": ";
  if (flags.world_size < 0 || flags.world_size > kMaxRanksOnOneMachine) {
    std::cerr << me << "--world-size must be in [0, " << kMaxRanksOnOneMachine
              << "] (0: one rank, or the launcher's world; more ranks than that run across machines with "
                 "shardrec launch), got "
              << flags.world_size << "\n";
    return kExitUsage;
  }
  if (flags.timeout_ms <= 0 || flags.timeout_ms > kMaxTimeoutMs) {
    std::cerr << me << "--timeout-ms must be in [1, " << kMaxTimeoutMs << "] (30 days), got " << flags.timeout_ms
              << "\n";
    return kExitUsage;
  }
  // comm check and bench comm measure the backend on host buffers, which
  // NCCL does not take (its own GPU tests check it); train and embed stage
  // their host buffers to each rank's GPU.
  if (flags.comm == "nccl" && (command_words == "comm check" || command_words == "bench comm")) {
    std::cerr << me << "this command moves host (CPU) buffers, which nccl does not take; nccl is checked by "
              << "its GPU tests (tests/comm/comm_nccl_test.cc) and used by train and embed on GPUs\n";
    return kExitUsage;
  }
  if (flags.comm == "nccl") {
    std::string why;
    if (device::CudaDeviceCount(&why) == 0) {
      std::cerr << me << "--comm nccl runs one rank per GPU and this machine has none (" << why
                << "); use --comm gloo or local\n";
      return kExitUsage;
    }
  }
  if (!flags.rdzv.empty()) {
    if (Status s = CheckRendezvousSyntax(flags.rdzv); !s.ok()) {
      std::cerr << me << "--rdzv: " << s.message() << "\n";
      return kExitUsage;
    }
  }
  auto env = ReadDistEnv();
  if (!env.ok()) {
    std::cerr << me << env.status().message() << "\n";
    return kExitUsage;
  }
  ProcessGroupConfig config;
  config.comm = flags.comm;
  config.options = session.plugin_options.For("comm", flags.comm);
  config.timeout_ms = flags.timeout_ms;

  // A launched world of one with the local backend is just this process.
  const bool alone = env->launched() && env->world_size == 1 && flags.comm == "local";
  if (!env->launched() || alone) {
    const int world = std::max(1, flags.world_size);
    if (flags.comm == "local") {
      // Ranks as threads, meeting in this process.
      config.rendezvous = "local:" + (flags.run_id.empty() ? NewRunId() : flags.run_id);
      config.prefix = "job";
      auto ref = session.registry.Find(SR_KIND_COMM, flags.comm);
      if (!ref.ok()) {
        std::cerr << me << ref.status().message() << "\n";
        return kExitFailure;
      }
      std::vector<int> codes(world, kExitOk);
      RunRanksAsThreads(ref.value(), config, world, [&](int r, StatusOr<ProcessGroup> group) {
        codes[r] = Finish(r, std::move(group), body);
      });
      return *std::max_element(codes.begin(), codes.end());
    }
    if (auto spawned = SpawnStandaloneRanks(command_words, args, world)) return *spawned;
    // One rank on its own: a private rendezvous unless one was given.
    std::optional<TempRendezvousDir> dir;
    if (flags.rdzv.empty()) {
      auto made = TempRendezvousDir::Create();
      if (!made.ok()) {
        std::cerr << me << made.status().message() << "\n";
        return kExitFailure;
      }
      dir.emplace(std::move(made).value());
    }
    config.rendezvous = dir ? dir->rdzv() : flags.rdzv;
    config.prefix = flags.run_id.empty() ? NewRunId() : flags.run_id;
    return RunGroup(session, config, body);
  }

  if (flags.world_size != 0 && flags.world_size != env->world_size) {
    std::cerr << me << "--world-size " << flags.world_size << " disagrees with the launcher's world of "
              << env->world_size << " (" << env->source << ")\n";
    return kExitUsage;
  }
  if (flags.comm == "local" && env->world_size > 1) {
    std::cerr << me << "comm local runs ranks as threads of one process; under a launcher use --comm gloo "
              << "(or nccl)\n";
    return kExitUsage;
  }
  config.rendezvous = !flags.rdzv.empty() ? flags.rdzv : env->rdzv;
  config.prefix = !flags.run_id.empty() ? flags.run_id : env->run_id;
  if (config.rendezvous.empty()) {
    std::cerr << me << "no rendezvous: pass --rdzv file:DIR|redis:HOST:PORT or set SHARDREC_RDZV "
              << "(shardrec launch sets it; under " << env->source << " set it yourself)\n";
    return kExitUsage;
  }
  // Without a run id, the launcher's job id keeps back-to-back jobs on one
  // rendezvous apart; "shardrec" only when nothing identifies the job.
  if (config.prefix.empty()) config.prefix = env->job_id.empty() ? "shardrec" : env->job_id;
  config.placement = {env->rank, env->world_size, env->local_rank, env->local_world_size};
  return RunGroup(session, config, body);
}

}  // namespace shardrec::cli
