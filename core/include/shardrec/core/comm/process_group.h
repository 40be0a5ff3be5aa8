// A rank's view of the job: its comm-backend communicator, the rendezvous
// store it met through, and where it sits (rank, host). This is what the
// sharded modules talk to, and what carries the seeds' collective helpers
// (torchrec.distributed.comm: is_leader, invoke_on_rank_and_broadcast_result,
// intra- and cross-host groups).
//
// Ranks are numbered host-major, as `shardrec launch`, torchrun, mpirun and
// Slurm's block distribution do: rank = host * local_world_size + local_rank.
// Collectives take host Tensors and element counts; Post* returns the
// request, the plain form waits for it with the group's timeout.
//
// Not thread-safe: one thread posts on a group at a time (requests may be
// waited on from any thread).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/core/comm/kv_store.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

struct RankPlacement {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
};

struct ProcessGroupConfig {
  std::string comm = "local";  // comm-backend component
  OptionList options;          // its --plugin-opt comm.NAME.* options
  // "file:DIR", "redis:HOST:PORT" or "local:NAME"; the local backend needs
  // "local:NAME", the others any.
  std::string rendezvous;
  std::string prefix;  // the job's namespace in the rendezvous (run id)
  int64_t timeout_ms = 60000;
  RankPlacement placement;
  DLDevice device{kDLCPU, 0};
};

class DeviceStaging;  // core/src/device/device_staging.h

// A job's ranks and their collectives. Tensors may be host tensors whatever
// the backend: a group whose device is a GPU (NCCL) stages them to it.
class ProcessGroup {
 public:
  // Opens the rendezvous store and joins the job: blocks until every rank
  // joined or timeout_ms passed (then the error names the missing ranks).
  static StatusOr<ProcessGroup> Create(const PluginRegistry& registry, const ProcessGroupConfig& config);
  // The same with the component given (config.comm only names it).
  static StatusOr<ProcessGroup> Create(const ComponentRef& comm, const ProcessGroupConfig& config);
  // The same through a store the caller opened (the Python package's store
  // over torch.distributed's); config.rendezvous then only names it for
  // messages.
  static StatusOr<ProcessGroup> Create(const ComponentRef& comm, const ProcessGroupConfig& config,
                                       std::shared_ptr<KvStore> store);

  int rank() const { return placement_.rank; }
  int world_size() const { return placement_.world_size; }
  int local_rank() const { return placement_.local_rank; }
  int local_world_size() const { return placement_.local_world_size; }
  int num_hosts() const { return placement_.world_size / placement_.local_world_size; }
  // The seeds' is_leader(pg, leader_rank=0).
  bool IsLeader(int leader_rank = 0) const { return rank() == leader_rank; }
  int64_t timeout_ms() const { return timeout_ms_; }
  const Communicator& communicator() const { return comm_; }
  // The rendezvous store the group met through (shared with its sub-groups).
  KvStore& store() const { return *store_; }
  const std::string& backend() const { return backend_; }

  // Collectives (see sr_comm_vtable for each one's contract).
  StatusOr<CommRequest> PostAllToAllV(const Tensor& send, const std::vector<int64_t>& send_counts, Tensor* recv,
                                      const std::vector<int64_t>& recv_counts) const;
  StatusOr<CommRequest> PostReduceScatterV(const Tensor& send, Tensor* recv, const std::vector<int64_t>& recv_counts,
                                           int32_t reduce_op = SR_REDUCE_SUM) const;
  StatusOr<CommRequest> PostAllGatherV(const Tensor& send, Tensor* recv,
                                       const std::vector<int64_t>& recv_counts) const;
  StatusOr<CommRequest> PostAllReduce(const Tensor& send, Tensor* recv, int32_t reduce_op = SR_REDUCE_SUM) const;
  StatusOr<CommRequest> PostBroadcast(Tensor* buffer, int root) const;
  StatusOr<CommRequest> PostBarrier() const;

  Status AllToAllV(const Tensor& send, const std::vector<int64_t>& send_counts, Tensor* recv,
                   const std::vector<int64_t>& recv_counts) const;
  Status ReduceScatterV(const Tensor& send, Tensor* recv, const std::vector<int64_t>& recv_counts,
                        int32_t reduce_op = SR_REDUCE_SUM) const;
  Status AllGatherV(const Tensor& send, Tensor* recv, const std::vector<int64_t>& recv_counts) const;
  Status AllReduce(const Tensor& send, Tensor* recv, int32_t reduce_op = SR_REDUCE_SUM) const;
  Status Broadcast(Tensor* buffer, int root) const;
  Status Barrier() const;

  // The seeds' invoke_on_rank_and_broadcast_result: runs `fn` on `rank`
  // only and returns its result (bytes) on every rank; an error from `fn`
  // reaches every rank too.
  StatusOr<std::string> InvokeOnRankAndBroadcastResult(int rank,
                                                       const std::function<StatusOr<std::string>()>& fn) const;

  // The ranks of this host (ordered by local rank), and the ranks with this
  // rank's local rank on every host (ordered by host): what table-row-wise
  // sharding reduces within and across. Collective over this group.
  StatusOr<ProcessGroup> IntraHost() const;
  StatusOr<ProcessGroup> CrossHost() const;
  // The same ranks on a communicator of their own (collective): what a
  // second thread posts on while this group is busy, e.g. the train
  // pipeline's input dist next to the step's output dist. Its collectives
  // never wait behind this group's, and a GPU group gets its own staging
  // stream.
  StatusOr<ProcessGroup> Duplicate() const;

 private:
  ProcessGroup(std::shared_ptr<KvStore> store, Communicator comm, RankPlacement placement, int64_t timeout_ms,
               std::string backend)
      : store_(std::move(store)),
        comm_(std::move(comm)),
        placement_(placement),
        timeout_ms_(timeout_ms),
        backend_(std::move(backend)) {}
  StatusOr<ProcessGroup> Split(int color, int key, RankPlacement placement) const;
  Status Finish(StatusOr<CommRequest> request) const;
  // Posts `a` through `post`, staging host tensors to the group's GPU first
  // when it has one (then the collective completes before this returns).
  StatusOr<CommRequest> Post(sr_collective_args a,
                             StatusOr<CommRequest> (Communicator::*post)(const sr_collective_args&) const) const;

  std::shared_ptr<KvStore> store_;  // before comm_: the backend may use it until destroyed
  Communicator comm_;
  RankPlacement placement_;
  int64_t timeout_ms_;
  // Set for a group on a GPU (config.device kDLCUDA, e.g. NCCL): the
  // embedding engine hands it host tensors, which are staged.
  std::shared_ptr<DeviceStaging> staging_;
  std::string backend_;
};

// Collective: one int64 from every rank, in rank order, on every rank.
StatusOr<std::vector<int64_t>> AllGatherValues(const ProcessGroup& group, int64_t mine);
// Collective: one string (bytes) from every rank, in rank order, on every rank.
StatusOr<std::vector<std::string>> AllGatherStrings(const ProcessGroup& group, const std::string& mine);
// Collective: every rank's rows ([rows_per_rank[r], width], one dtype),
// stacked in rank order on every rank: [sum of rows_per_rank, width].
StatusOr<Tensor> AllGatherRows(const ProcessGroup& group, const Tensor& mine, const std::vector<int64_t>& rows_per_rank);

// The most ranks one machine runs for a job it starts itself (ranks as
// threads, or processes it spawns): past this, thread and process creation
// fail and the rendezvous grows slow, so it is refused up front.
inline constexpr int kMaxRanksOnOneMachine = 1024;

// Runs body(rank, group) on `world` threads of this process, rank r joining
// `base` with placement {r, world, r, world}; a rank that cannot join gets
// its error as `group`. A rank whose thread cannot be started (the system's
// thread limit) gets that error on the calling thread instead of aborting
// the process; its peers then fail to meet it within the timeout. Returns
// when every thread has.
void RunRanksAsThreads(const ComponentRef& comm, const ProcessGroupConfig& base, int world,
                       const std::function<void(int rank, StatusOr<ProcessGroup> group)>& body);

}  // namespace shardrec
