// The `gloo` comm backend: processes and hosts over TCP with Debian's Gloo
// 0.5, or, when every rank is on one host, through a shared-memory segment
// (shm_group.h: no loopback TCP, no Gloo threads). Ranks meet through the
// host's rendezvous store (host_store.h); over TCP each collective maps onto
// one Gloo algorithm:
//   all_to_all_v      gloo::alltoallv, on bytes
//   all_gather_v      gloo::allgatherv, on bytes
//   all_reduce        gloo::allreduce (ring, or bcube with algorithm=bcube)
//                     with shardrec's reductions (float16/bfloat16 included)
//   reduce_scatter_v  gloo::alltoallv of each rank's slices, then a local
//                     reduction in rank order (Gloo 0.5 has no options-API
//                     reduce-scatter; this moves the same bytes as a ring
//                     and is deterministic)
//   broadcast         gloo::broadcast;  barrier  gloo::barrier
// Collectives run in order on the communicator's worker thread, each with
// its own tag. When one fails or times out, the heartbeats in the store
// (sdk::PeerMonitor) say which rank exited or stalled.
//
// Options (--plugin-opt comm.gloo.KEY=VALUE):
//   hostname    address to bind and advertise (default: 127.0.0.1 when every
//               rank is on one host, else this host's name)
//   iface       network interface to bind instead (e.g. eth0)
//   algorithm   all_reduce algorithm: ring (default) or bcube
//   check_args  exchange every collective's arguments first and fail on
//               ranks that disagree (counts, dtypes, ops); costs one small
//               all-gather per collective (default false; the shared-memory
//               transport always checks, at no extra exchange)
//   transport   auto (default: shm when every rank is on one host, else tcp),
//               tcp or shm
//   shm_bytes   the shared-memory transport's data region per rank (default
//               4 MiB; larger collectives run in rounds of it)
#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <signal.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

#include "host_store.h"
#include "shm_group.h"
#include "shardrec/sdk/comm.hpp"

namespace shardrec::gloo_comm {
namespace {

using sdk::Collective;
using sdk::CollectiveOp;

struct Settings {
  ::gloo::AllreduceOptions::Algorithm algorithm = ::gloo::AllreduceOptions::Algorithm::RING;
  bool check_args = false;
  bool shm = false;  // every rank on one host, through shared memory
  size_t shm_bytes = size_t{4} << 20;
};

// What a communicator and every communicator split from it share.
struct Shared {
  sdk::KvStore store;
  std::shared_ptr<::gloo::transport::Device> device;
  Settings settings;
  int64_t timeout_ms = 0;
};

// Gloo writes to sockets without MSG_NOSIGNAL in places, so a peer that
// died would kill this process with SIGPIPE instead of failing the
// collective with a message (Python, Gloo's usual host, ignores SIGPIPE).
// Done when the first communicator is created, not when the library is
// loaded, and left alone when the host installed its own handler.
void IgnoreSigpipeOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction current {};
    if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
      ::signal(SIGPIPE, SIG_IGN);
      sdk::Log(SR_LOG_DEBUG, "comm gloo", "SIGPIPE is now ignored: a closed peer socket fails the collective instead");
    }
  });
}

class GlooComm {
 public:
  explicit GlooComm(const sr_comm_create_args& a) {
    IgnoreSigpipeOnce();
    auto shared = std::make_shared<Shared>();
    sdk::Options options(a.options, "comm gloo");
    const bool one_host = a.local_world_size == a.world_size;
    ::gloo::transport::tcp::attr attr;
    attr.iface = options.GetString("iface", "");
    attr.hostname = options.GetString("hostname", one_host && attr.iface.empty() ? "127.0.0.1" : "");
    const std::string algorithm = options.GetString("algorithm", "ring");
    shared->settings.check_args = options.GetBool("check_args", false);
    const std::string transport = options.GetString("transport", "auto");
    const int64_t shm_bytes = options.GetInt("shm_bytes", static_cast<int64_t>(shared->settings.shm_bytes));
    options.Finish();
    if (algorithm != "ring" && algorithm != "bcube") {
      throw sdk::InvalidArgument("comm gloo: algorithm must be ring or bcube, got '" + algorithm + "'");
    }
    if (transport != "auto" && transport != "tcp" && transport != "shm") {
      throw sdk::InvalidArgument("comm gloo: transport must be auto, tcp or shm, got '" + transport + "'");
    }
    if (transport == "shm" && !one_host) {
      throw sdk::InvalidArgument("comm gloo: transport=shm needs every rank on one host, but this host has " +
                                 std::to_string(a.local_world_size) + " of " + std::to_string(a.world_size) +
                                 " ranks; use tcp or auto");
    }
    if (shm_bytes < 4096 || shm_bytes > (int64_t{1} << 30)) {
      throw sdk::InvalidArgument("comm gloo: shm_bytes must be between 4096 and 1 GiB, got " + std::to_string(shm_bytes));
    }
    shared->settings.shm = transport == "shm" || (transport == "auto" && one_host);
    shared->settings.shm_bytes = static_cast<size_t>(shm_bytes);
    if (algorithm == "bcube") shared->settings.algorithm = ::gloo::AllreduceOptions::Algorithm::BCUBE;
    shared->store = sdk::StoreOf(a);
    if (!shared->store.valid()) {
      throw sdk::Error(SR_FAILED_PRECONDITION,
                       "comm gloo needs the host's rendezvous store (a host with plugin ABI 1.1 or newer)");
    }
    shared->timeout_ms = a.timeout_ms;
    if (shared->settings.shm) {
      Init(std::move(shared), "gloo/world", a.rank, sdk::IdentityRanks(a.world_size));
      return;
    }
    try {
      shared->device = ::gloo::transport::tcp::CreateDevice(attr);
    } catch (const std::exception& e) {
      throw sdk::Error(SR_UNAVAILABLE, std::string("comm gloo: cannot open a TCP device on '") +
                                           (attr.iface.empty() ? attr.hostname : attr.iface) + "': " + e.what());
    }
    Init(std::move(shared), "gloo/world", a.rank, sdk::IdentityRanks(a.world_size));
  }

  GlooComm(std::shared_ptr<Shared> shared, std::string scope, int rank, std::vector<int> global_ranks) {
    Init(std::move(shared), std::move(scope), rank, std::move(global_ranks));
  }

  ~GlooComm() {
    worker_.reset();  // the running collective ends (or times out) first
    shm_.reset();     // peers waiting on this rank learn that it left
    monitor_.reset();
  }

  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(global_ranks_.size()); }
  DLDeviceType device_type() const { return kDLCPU; }

  std::shared_ptr<sdk::Request> Post(Collective c) {
    const int64_t seq = ++posted_;
    return worker_->Submit(sdk::CollectiveName(c.op), seq, [this, seq, c = std::move(c)] { Run(seq, c); },
                           [this, seq] { return monitor_->Diagnose(seq); });
  }

  std::unique_ptr<GlooComm> Split(int32_t color, int32_t key) {
    const int64_t seq = ++posted_;
    const int64_t split_index = ++splits_;
    auto result = std::make_shared<std::unique_ptr<GlooComm>>();
    auto job = worker_->Submit(
        "split", seq,
        [this, seq, split_index, color, key, result] {
          monitor_->Started(seq);
          std::vector<int64_t> mine = {color, key}, all(2 * world_size());
          if (shm_) {
            Collective c;
            c.op = CollectiveOp::kAllGatherV;
            c.dtype = DLDataType{kDLInt, 64, 1};
            c.elem_size = 8;
            c.send = reinterpret_cast<const char*>(mine.data());
            c.recv = reinterpret_cast<char*>(all.data());
            c.send_numel = 2;
            c.recv_numel = static_cast<int64_t>(all.size());
            c.recv_counts.assign(world_size(), 2);
            for (int q = 0; q < world_size(); ++q) c.recv_displs.push_back(2 * q);
            shm_->Run(c, shared_->timeout_ms, [this, seq] { return monitor_->Blame(seq); });
          } else {
            Guarded(seq, [&] {
              ::gloo::AllgatherOptions o(context_);
              o.setInput(mine.data(), 2);
              o.setOutput(all.data(), all.size());
              o.setTag(Tag(seq));
              ::gloo::allgather(o);
            });
          }
          std::vector<int64_t> colors(world_size()), keys(world_size());
          for (int q = 0; q < world_size(); ++q) {
            colors[q] = all[2 * q];
            keys[q] = all[2 * q + 1];
          }
          sdk::SplitGroup group = sdk::SplitMembers(colors, keys, rank_, global_ranks_);
          *result = std::make_unique<GlooComm>(
              shared_, scope_ + "/split" + std::to_string(split_index) + "/color" + std::to_string(color), group.rank,
              std::move(group.global_ranks));
        },
        [this, seq] { return monitor_->Diagnose(seq); });
    job->Wait(2 * shared_->timeout_ms);  // the peers' split, then the new mesh
    return std::move(*result);
  }

 private:
  void Init(std::shared_ptr<Shared> shared, std::string scope, int rank, std::vector<int> global_ranks) {
    shared_ = std::move(shared);
    scope_ = std::move(scope);
    rank_ = rank;
    global_ranks_ = std::move(global_ranks);
    monitor_ = std::make_unique<sdk::PeerMonitor>(shared_->store, scope_, rank_, global_ranks_, shared_->timeout_ms);
    op_timeout_ = OpTimeout();
    worker_ = std::make_unique<sdk::OrderedWorker>(shared_->timeout_ms);
    if (shared_->settings.shm) {
      shm_ = std::make_unique<ShmGroup>(shared_->store, scope_, rank_, global_ranks_, shared_->settings.shm_bytes,
                                        shared_->timeout_ms, [this] { return monitor_->Blame(0); });
      return;
    }
    HostStore store(shared_->store, scope_ + "/mesh", shared_->timeout_ms);
    context_ = std::make_shared<::gloo::rendezvous::Context>(rank_, world_size());
    context_->setTimeout(op_timeout_);
    try {
      context_->connectFullMesh(store, shared_->device);
    } catch (const sdk::Error& e) {
      throw sdk::Error(e.code(), "comm gloo: rank " + std::to_string(global_ranks_[rank_]) +
                                     " could not meet its peers: " + e.what() + monitor_->Blame(0));
    } catch (const std::exception& e) {
      throw sdk::Error(SR_UNAVAILABLE, "comm gloo: rank " + std::to_string(global_ranks_[rank_]) +
                                           " could not connect to its peers: " + e.what() + monitor_->Blame(0));
    }
    srcs_.resize(world_size());
  }

  // Gloo's own timeout leaves room for the heartbeat diagnosis and a margin,
  // so the error naming a stalled peer arrives before the caller's wait
  // (with the same timeout) gives up.
  std::chrono::milliseconds OpTimeout() const {
    const int64_t t = shared_->timeout_ms;
    return std::chrono::milliseconds(std::max<int64_t>(1, t - monitor_->diagnose_ms() - std::max<int64_t>(100, t / 20)));
  }
  std::chrono::milliseconds op_timeout_{0};  // OpTimeout(), fixed once the monitor exists

  // Gloo tags must differ between operations in flight; the collective's
  // number does (it wraps after 4 billion, long after any op finished).
  static uint32_t Tag(int64_t seq) { return static_cast<uint32_t>(seq); }

  // Runs a Gloo call; a Gloo failure becomes an error that names the rank
  // the heartbeats blame.
  template <class F>
  void Guarded(int64_t seq, F&& f) {
    try {
      f();
    } catch (const sdk::Error&) {
      throw;
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      const bool timed_out = msg.find("imed out") != std::string::npos;
      throw sdk::Error(timed_out ? SR_DEADLINE_EXCEEDED : SR_UNAVAILABLE, "gloo: " + msg + monitor_->Blame(seq));
    }
  }

  void CheckArguments(int64_t seq, const Collective& c) {
    const int n = world_size();
    std::vector<int64_t> mine = sdk::EncodeArguments(c, n), all(mine.size() * n);
    Guarded(seq, [&] {
      ::gloo::AllgatherOptions o(context_);
      o.setInput(mine.data(), mine.size());
      o.setOutput(all.data(), all.size());
      o.setTag(Tag(seq) ^ 0x80000000u);  // its own tag, beside the collective's
      ::gloo::allgather(o);
    });
    std::vector<Collective> decoded;
    for (int q = 0; q < n; ++q) decoded.push_back(sdk::DecodeArguments(all.data() + q * mine.size(), n));
    std::vector<const Collective*> ops;
    for (const Collective& d : decoded) ops.push_back(&d);
    sdk::CheckAgreement(ops, global_ranks_);
  }

  void Run(int64_t seq, const Collective& c) {
    monitor_->Started(seq);
    if (shm_) {
      shm_->Run(c, op_timeout_.count(), [this, seq] { return monitor_->Blame(seq); });
      return;
    }
    if (shared_->settings.check_args) CheckArguments(seq, c);
    const auto timeout = op_timeout_;
    const int n = world_size();
    auto bytes = [&](const std::vector<int64_t>& counts) {
      std::vector<int64_t> b(counts.size());
      for (size_t i = 0; i < counts.size(); ++i) b[i] = static_cast<int64_t>(c.Bytes(counts[i]));
      return b;
    };
    // Gloo wants a pointer even for an empty buffer.
    uint8_t dummy = 0;
    auto in = [&](const char* p) { return p ? reinterpret_cast<uint8_t*>(const_cast<char*>(p)) : &dummy; };
    Guarded(seq, [&] {
      switch (c.op) {
        case CollectiveOp::kAllToAllV: {
          ::gloo::AlltoallvOptions o(context_);
          o.setInput(in(c.send), bytes(c.send_counts));
          o.setOutput(in(c.recv), bytes(c.recv_counts));
          o.setTag(Tag(seq));
          o.setTimeout(timeout);
          ::gloo::alltoallv(o);
          break;
        }
        case CollectiveOp::kAllGatherV: {
          ::gloo::AllgathervOptions o(context_);
          std::vector<size_t> out(n);
          for (int q = 0; q < n; ++q) out[q] = c.Bytes(c.recv_counts[q]);
          o.setInput(in(c.send), out[rank_]);
          o.setOutput(in(c.recv), out);
          o.setTag(Tag(seq));
          o.setTimeout(timeout);
          ::gloo::allgatherv(o);
          break;
        }
        case CollectiveOp::kAllReduce: {
          if (c.recv_numel == 0) break;
          ::gloo::AllreduceOptions o(context_);
          SetTyped(o, c);  // separate input and output when not in place: Gloo reads send directly
          const DLDataType dtype = c.dtype;
          const int32_t op = c.reduce_op;
          o.setReduceFunction([dtype, op](void* out, const void* a, const void* b, size_t count) {
            const void* srcs[2] = {a, b};
            sdk::ReduceMany(dtype, op, out, srcs, 2, static_cast<int64_t>(count));
          });
          o.setAlgorithm(shared_->settings.algorithm);
          o.setTag(Tag(seq));
          o.setTimeout(timeout);
          ::gloo::allreduce(o);
          break;
        }
        case CollectiveOp::kReduceScatterV: {
          // Slice q of every rank's send goes to rank q; rank q then reduces
          // the n slices it got, in rank order. The landing buffer is kept
          // between calls (no allocation, no page faults). Gloo copies the
          // own slice too (its alltoallv wants contiguous blocks in rank
          // order), but the reduction reads it from send, where it is warm.
          const int64_t mine = c.recv_counts[rank_];
          const size_t slice = c.Bytes(mine);
          if (scratch_.size() < slice * n) scratch_.resize(slice * n);
          ::gloo::AlltoallvOptions o(context_);
          o.setInput(in(c.send), bytes(c.recv_counts));
          o.setOutput(in(scratch_.data()), std::vector<int64_t>(n, static_cast<int64_t>(slice)));
          o.setTag(Tag(seq));
          o.setTimeout(timeout);
          ::gloo::alltoallv(o);
          for (int q = 0; q < n; ++q) {
            srcs_[q] = q == rank_ ? static_cast<const void*>(c.send + c.Bytes(c.recv_displs[rank_]))
                                 : static_cast<const void*>(scratch_.data() + slice * q);
          }
          sdk::ReduceMany(c.dtype, c.reduce_op, c.recv, srcs_.data(), n, mine);
          break;
        }
        case CollectiveOp::kBroadcast: {
          ::gloo::BroadcastOptions o(context_);
          o.setOutput(in(c.recv), c.Bytes(c.recv_numel));
          o.setRoot(c.root);
          o.setTag(Tag(seq));
          o.setTimeout(timeout);
          ::gloo::broadcast(o);
          break;
        }
        case CollectiveOp::kBarrier: {
          ::gloo::BarrierOptions o(context_);
          o.setTag(Tag(seq));
          o.setTimeout(timeout);
          ::gloo::barrier(o);
          break;
        }
      }
    });
  }

  // Gloo's allreduce sizes its pieces by the element type: give it an
  // unsigned type as wide as the real one (the reduction knows the dtype).
  static void SetTyped(::gloo::AllreduceOptions& o, const Collective& c) {
    const size_t n = static_cast<size_t>(c.recv_numel);
    auto set = [&](auto* type) {
      using T = std::remove_pointer_t<decltype(type)>;
      if (c.send != c.recv) o.setInput(reinterpret_cast<T*>(const_cast<char*>(c.send)), n);
      o.setOutput(reinterpret_cast<T*>(c.recv), n);
    };
    switch (c.elem_size) {
      case 2: set(static_cast<uint16_t*>(nullptr)); break;
      case 4: set(static_cast<uint32_t*>(nullptr)); break;
      case 8: set(static_cast<uint64_t*>(nullptr)); break;
      default: throw sdk::InvalidArgument("all_reduce: unsupported element size " + std::to_string(c.elem_size));
    }
  }

  std::shared_ptr<Shared> shared_;
  std::string scope_;
  int rank_ = 0;
  std::vector<int> global_ranks_;
  std::shared_ptr<::gloo::rendezvous::Context> context_;
  std::unique_ptr<sdk::PeerMonitor> monitor_;
  std::unique_ptr<ShmGroup> shm_;  // the one-host transport; context_ is unused then
  int64_t posted_ = 0, splits_ = 0;
  // Where reduce_scatter_v lands peers' slices; used by the worker only.
  struct Scratch {
    std::unique_ptr<char[]> data_;
    size_t size_ = 0;
    size_t size() const { return size_; }
    char* data() { return data_.get(); }
    void resize(size_t n) {
      data_.reset(new char[n]);  // uninitialised: every byte is received before it is read
      size_ = n;
    }
  } scratch_;
  std::vector<const void*> srcs_;  // reduce_scatter_v's sources, sized once
  std::unique_ptr<sdk::OrderedWorker> worker_;
};

const char* const kOptionNames[] = {"hostname", "iface", "algorithm", "check_args", "transport", "shm_bytes"};
const sr_named_value kAttributes[] = {
    sdk::StringAttr("transport", "TCP (Gloo 0.5); shared memory when every rank is on one host"),
    sdk::StringAttr("rendezvous", "file:DIR, redis:HOST:PORT or local:NAME (through the host's store)"),
    sdk::StringListAttr("reduce_dtypes", sdk::kReducibleDTypeNames, std::size(sdk::kReducibleDTypeNames)),
    sdk::StringListAttr("options", kOptionNames, std::size(kOptionNames)),
};

const sr_component kComponents[] = {
    sdk::Component(SR_KIND_COMM, "gloo", "1.0", "processes and hosts over TCP with Gloo 0.5, shared memory on one host",
                   &sdk::CommVtable<GlooComm>(), sdk::List(kAttributes), 5),
};

}  // namespace
}  // namespace shardrec::gloo_comm

SHARDREC_DEFINE_PLUGIN("gloo", "1.0", shardrec::gloo_comm::kComponents)
