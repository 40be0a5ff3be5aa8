// ProcessGroup: joining a job and the typed collectives (process_group.h).
#include "shardrec/core/comm/process_group.h"

#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>

#include "../device/device_staging.h"

namespace shardrec {

namespace {

sr_collective_args Args(const Tensor* send, Tensor* recv) {
  sr_collective_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_collective_args, stream);
  a.send = send != nullptr ? &send->dl() : nullptr;
  a.recv = recv != nullptr ? recv->mutable_dl() : nullptr;
  return a;
}

Status CheckCounts(const std::vector<int64_t>& counts, int world_size, const char* what) {
  if (static_cast<int>(counts.size()) != world_size) {
    return InvalidArgumentError(std::string(what) + " has " + std::to_string(counts.size()) +
                                " entries; the group has " + std::to_string(world_size) + " ranks");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<ProcessGroup> ProcessGroup::Create(const PluginRegistry& registry, const ProcessGroupConfig& config) {
  SR_ASSIGN_OR_RETURN(ComponentRef ref, registry.Find(SR_KIND_COMM, config.comm));
  return Create(ref, config);
}

namespace {

// Placement and timeout, checked before any store is opened or used.
Status CheckConfig(const ProcessGroupConfig& config) {
  const RankPlacement& p = config.placement;
  if (p.world_size < 1 || p.rank < 0 || p.rank >= p.world_size) {
    return InvalidArgumentError("rank " + std::to_string(p.rank) + " is outside a world of " +
                                std::to_string(p.world_size));
  }
  if (p.local_world_size < 1 || p.world_size % p.local_world_size != 0 || p.local_rank < 0 ||
      p.local_rank >= p.local_world_size || p.rank % p.local_world_size != p.local_rank) {
    return InvalidArgumentError("rank " + std::to_string(p.rank) + " with local rank " + std::to_string(p.local_rank) +
                                " of " + std::to_string(p.local_world_size) + " per host in a world of " +
                                std::to_string(p.world_size) +
                                ": ranks must be numbered host-major (rank = host * ranks_per_host + local_rank) "
                                "with the same number of ranks on every host");
  }
  if (config.timeout_ms <= 0) return InvalidArgumentError("comm timeout must be positive");
  return Status::Ok();
}

}  // namespace

StatusOr<ProcessGroup> ProcessGroup::Create(const ComponentRef& ref, const ProcessGroupConfig& config) {
  SR_RETURN_IF_ERROR(CheckConfig(config));
  SR_ASSIGN_OR_RETURN(std::unique_ptr<KvStore> opened,
                      OpenKvStore(config.rendezvous, config.prefix, config.timeout_ms));
  return Create(ref, config, std::shared_ptr<KvStore>(std::move(opened)));
}

StatusOr<ProcessGroup> ProcessGroup::Create(const ComponentRef& ref, const ProcessGroupConfig& config,
                                            std::shared_ptr<KvStore> store) {
  SR_RETURN_IF_ERROR(CheckConfig(config));
  if (store == nullptr) return InvalidArgumentError("ProcessGroup::Create: no rendezvous store");
  const RankPlacement& p = config.placement;
  sr_comm_create_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_comm_create_args, store);
  a.rank = p.rank;
  a.world_size = p.world_size;
  a.local_rank = p.local_rank;
  a.local_world_size = p.local_world_size;
  a.rendezvous = config.rendezvous.c_str();
  a.prefix = config.prefix.c_str();
  a.timeout_ms = config.timeout_ms;
  a.device = config.device;
  a.options = config.options.view();
  a.store = store->abi();
  SR_ASSIGN_OR_RETURN(Communicator comm, Communicator::Create(ref, a));
  ProcessGroup group(std::move(store), std::move(comm), p, config.timeout_ms, ref.name());
  if (config.device.device_type == kDLCUDA) {
    SR_ASSIGN_OR_RETURN(auto staging, DeviceStaging::Create(config.device.device_id));
    group.staging_ = std::move(staging);
  }
  return group;
}

StatusOr<CommRequest> ProcessGroup::Post(
    sr_collective_args a, StatusOr<CommRequest> (Communicator::*post)(const sr_collective_args&) const) const {
  if (!staging_) return (comm_.*post)(a);
  std::lock_guard<std::mutex> lock(staging_->mutex());
  Status s = Status::Ok();
  if (auto send = staging_->In(a.send); send.ok()) {
    a.send = *send;
  } else {
    s = send.status();
  }
  if (auto recv = staging_->Out(a.recv); s.ok() && recv.ok()) {
    a.recv = *recv;
  } else if (s.ok()) {
    s = recv.status();
  }
  if (s.ok()) {
    if (staging_->staged()) a.stream = staging_->stream();
    auto request = (comm_.*post)(a);
    s = request.ok() ? request->Wait(timeout_ms_) : request.status();
  }
  const Status finished = staging_->Finish();
  if (!s.ok()) return s;
  SR_RETURN_IF_ERROR(finished);
  return CommRequest::Completed();
}

Status ProcessGroup::Finish(StatusOr<CommRequest> request) const {
  if (!request.ok()) return request.status();
  return request.value().Wait(timeout_ms_);
}

StatusOr<CommRequest> ProcessGroup::PostAllToAllV(const Tensor& send, const std::vector<int64_t>& send_counts,
                                                  Tensor* recv, const std::vector<int64_t>& recv_counts) const {
  SR_RETURN_IF_ERROR(CheckCounts(send_counts, world_size(), "send_counts"));
  SR_RETURN_IF_ERROR(CheckCounts(recv_counts, world_size(), "recv_counts"));
  sr_collective_args a = Args(&send, recv);
  a.send_counts = send_counts.data();
  a.recv_counts = recv_counts.data();
  return Post(a, &Communicator::AllToAllV);
}

StatusOr<CommRequest> ProcessGroup::PostReduceScatterV(const Tensor& send, Tensor* recv,
                                                       const std::vector<int64_t>& recv_counts,
                                                       int32_t reduce_op) const {
  SR_RETURN_IF_ERROR(CheckCounts(recv_counts, world_size(), "recv_counts"));
  sr_collective_args a = Args(&send, recv);
  a.recv_counts = recv_counts.data();
  a.reduce_op = reduce_op;
  return Post(a, &Communicator::ReduceScatterV);
}

StatusOr<CommRequest> ProcessGroup::PostAllGatherV(const Tensor& send, Tensor* recv,
                                                   const std::vector<int64_t>& recv_counts) const {
  SR_RETURN_IF_ERROR(CheckCounts(recv_counts, world_size(), "recv_counts"));
  sr_collective_args a = Args(&send, recv);
  a.recv_counts = recv_counts.data();
  return Post(a, &Communicator::AllGatherV);
}

StatusOr<CommRequest> ProcessGroup::PostAllReduce(const Tensor& send, Tensor* recv, int32_t reduce_op) const {
  sr_collective_args a = Args(&send, recv);
  a.reduce_op = reduce_op;
  return Post(a, &Communicator::AllReduce);
}

StatusOr<CommRequest> ProcessGroup::PostBroadcast(Tensor* buffer, int root) const {
  sr_collective_args a = Args(nullptr, buffer);
  a.root = root;
  return Post(a, &Communicator::Broadcast);
}

StatusOr<CommRequest> ProcessGroup::PostBarrier() const { return comm_.Barrier(); }

Status ProcessGroup::AllToAllV(const Tensor& send, const std::vector<int64_t>& send_counts, Tensor* recv,
                               const std::vector<int64_t>& recv_counts) const {
  return Finish(PostAllToAllV(send, send_counts, recv, recv_counts));
}
Status ProcessGroup::ReduceScatterV(const Tensor& send, Tensor* recv, const std::vector<int64_t>& recv_counts,
                                    int32_t reduce_op) const {
  return Finish(PostReduceScatterV(send, recv, recv_counts, reduce_op));
}
Status ProcessGroup::AllGatherV(const Tensor& send, Tensor* recv, const std::vector<int64_t>& recv_counts) const {
  return Finish(PostAllGatherV(send, recv, recv_counts));
}
Status ProcessGroup::AllReduce(const Tensor& send, Tensor* recv, int32_t reduce_op) const {
  return Finish(PostAllReduce(send, recv, reduce_op));
}
Status ProcessGroup::Broadcast(Tensor* buffer, int root) const { return Finish(PostBroadcast(buffer, root)); }
Status ProcessGroup::Barrier() const { return Finish(PostBarrier()); }

StatusOr<std::string> ProcessGroup::InvokeOnRankAndBroadcastResult(
    int rank, const std::function<StatusOr<std::string>()>& fn) const {
  if (rank < 0 || rank >= world_size()) {
    return InvalidArgumentError("invoke_on_rank_and_broadcast_result: rank " + std::to_string(rank) +
                                " is outside a world of " + std::to_string(world_size()));
  }
  // Two broadcasts: [status code, payload bytes], then the payload (the
  // result, or the error message).
  Tensor header = Tensor::Zeros(dtype::kInt64, {2});
  std::string payload;
  if (this->rank() == rank) {
    StatusOr<std::string> result = fn();
    payload = result.ok() ? std::move(result).value() : result.status().message();
    header.data<int64_t>()[0] = result.ok() ? SR_OK : result.status().code();
    header.data<int64_t>()[1] = static_cast<int64_t>(payload.size());
  }
  SR_RETURN_IF_ERROR(Broadcast(&header, rank));
  Tensor body = Tensor::Zeros(dtype::kUInt8, {header.data<int64_t>()[1]});
  if (this->rank() == rank) std::memcpy(body.raw_data(), payload.data(), payload.size());
  SR_RETURN_IF_ERROR(Broadcast(&body, rank));
  std::string out(static_cast<const char*>(body.raw_data()), static_cast<size_t>(body.numel()));
  const int32_t code = static_cast<int32_t>(header.data<int64_t>()[0]);
  if (code != SR_OK) {
    return Status(code, "rank " + std::to_string(rank) + " failed: " + out);
  }
  return out;
}

StatusOr<ProcessGroup> ProcessGroup::Split(int color, int key, RankPlacement placement) const {
  SR_ASSIGN_OR_RETURN(Communicator sub, comm_.Split(color, key));
  ProcessGroup group(store_, std::move(sub), placement, timeout_ms_, backend_);
  group.staging_ = staging_;  // same device; calls on a group and its sub-groups do not overlap
  return group;
}

StatusOr<ProcessGroup> ProcessGroup::IntraHost() const {
  const int host = rank() / local_world_size();
  return Split(host, local_rank(), {local_rank(), local_world_size(), local_rank(), local_world_size()});
}

StatusOr<ProcessGroup> ProcessGroup::Duplicate() const {
  SR_ASSIGN_OR_RETURN(ProcessGroup twin, Split(0, rank(), placement_));
  if (staging_) {
    // Sharing the staging would serialise the two groups' calls under one
    // lock, and two ranks entering them in different orders would deadlock.
    SR_ASSIGN_OR_RETURN(auto staging, DeviceStaging::Create(staging_->device()));
    twin.staging_ = std::move(staging);
  }
  return twin;
}

StatusOr<ProcessGroup> ProcessGroup::CrossHost() const {
  const int host = rank() / local_world_size();
  // One rank per host: each is alone on its "host" within the group.
  return Split(local_rank(), host, {host, num_hosts(), 0, 1});
}

StatusOr<std::vector<int64_t>> AllGatherValues(const ProcessGroup& group, int64_t mine) {
  Tensor all = Tensor::Empty(dtype::kInt64, {group.world_size()});
  SR_RETURN_IF_ERROR(group.AllGatherV(Tensor::FromVector(std::vector<int64_t>{mine}), &all,
                                      std::vector<int64_t>(static_cast<size_t>(group.world_size()), 1)));
  return std::vector<int64_t>(all.data<int64_t>(), all.data<int64_t>() + group.world_size());
}

StatusOr<std::vector<std::string>> AllGatherStrings(const ProcessGroup& group, const std::string& mine) {
  SR_ASSIGN_OR_RETURN(auto sizes, AllGatherValues(group, static_cast<int64_t>(mine.size())));
  int64_t total = 0;
  for (int64_t n : sizes) total += n;
  Tensor send = Tensor::Empty(dtype::kUInt8, {static_cast<int64_t>(mine.size())});
  if (!mine.empty()) std::memcpy(send.raw_data(), mine.data(), mine.size());
  Tensor all = Tensor::Empty(dtype::kUInt8, {total});
  SR_RETURN_IF_ERROR(group.AllGatherV(send, &all, sizes));
  std::vector<std::string> out;
  const char* p = static_cast<const char*>(all.raw_data());
  for (int64_t n : sizes) {
    out.emplace_back(p, static_cast<size_t>(n));
    p += n;
  }
  return out;
}

StatusOr<Tensor> AllGatherRows(const ProcessGroup& group, const Tensor& mine, const std::vector<int64_t>& rows_per_rank) {
  const int64_t width = mine.ndim() == 2 ? mine.size(1) : 1;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int64_t r : rows_per_rank) {
    counts.push_back(r * width);
    total += r;
  }
  Tensor all = Tensor::Empty(mine.dtype(), {total, width});
  SR_RETURN_IF_ERROR(group.AllGatherV(mine, &all, counts));
  return all;
}

void RunRanksAsThreads(const ComponentRef& comm, const ProcessGroupConfig& base, int world,
                       const std::function<void(int rank, StatusOr<ProcessGroup> group)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    try {
      threads.emplace_back([&, r] {
        ProcessGroupConfig c = base;
        c.placement = {r, world, r, world};
        body(r, ProcessGroup::Create(comm, c));
      });
    } catch (const std::system_error& e) {
      // std::thread throws when the system refuses a thread; uncaught, it
      // would end the process ("terminate called ...").
      body(r, Status(SR_RESOURCE_EXHAUSTED, "cannot start a thread for rank " + std::to_string(r) + " of " +
                                                std::to_string(world) + ": " + e.what()));
    }
  }
  for (auto& t : threads) t.join();
}

}  // namespace shardrec
