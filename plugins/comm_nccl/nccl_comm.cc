// The `nccl` comm backend: collectives on CUDA tensors with NCCL (>= 2.18),
// one GPU per rank, over NVLink, InfiniBand or PCIe as NCCL finds them.
// Ranks meet through the host's rendezvous store: rank 0 publishes NCCL's
// unique id there, and every rank publishes a heartbeat (sdk::PeerMonitor)
// so that a collective that times out names the rank that stopped.
//
// Each collective is enqueued on the caller's stream (sr_collective_args
// .stream, a cudaStream_t; NULL is the legacy default stream) and returns at
// once; its request completes when a CUDA event recorded after it fires:
//   all_to_all_v      ncclSend/ncclRecv per peer, on bytes (self: a copy)
//   all_gather_v      ncclAllGather when every count is equal, else one
//                     ncclBroadcast per rank into its slice of recv
//   reduce_scatter_v  ncclReduceScatter when every count is equal, else one
//                     ncclReduce of slice q to each rank q
//   all_reduce        ncclAllReduce (in place allowed)
//   broadcast         ncclBroadcast in place, on bytes
//   barrier           ncclAllReduce of one int on the communicator's stream
// Reductions of float16 and bfloat16 follow NCCL's arithmetic, which may
// round differently from the CPU backends' (those widen to float32 once).
//
// Arguments that disagree across ranks (counts, dtypes, ops, roots) are the
// caller's responsibility, as with NCCL itself: checking them would cost a
// device-to-host exchange per collective. What one rank can see is checked
// (sdk::ParseCollective). A rank that posts a mismatched collective makes
// its peers time out, and the heartbeats then say which rank is behind.
//
// The communicator is non-blocking (ncclConfig_t.blocking = 0), so a hung
// peer never hangs this process: initialization, split and every wait are
// bounded by the timeout, after which the communicator is aborted
// (ncclCommAbort) and every later collective on it fails at once. A wait
// that times out aborts too, since the kernels of a collective cannot be
// taken back otherwise and would keep using the caller's buffers: poll with
// test(), not with short waits. Posting
// blocks only while NCCL sets up the connections a collective needs the
// first time it runs (its peers must post it too), also bounded.
//
// The thread that creates or posts on a communicator gets its device as
// current device (as NCCL expects of the threads that call it).
//
// Options (--plugin-opt comm.nccl.KEY=VALUE):
//   max_ctas   most CUDA thread blocks NCCL may use per collective, leaving
//              SMs to concurrent kernels (default: NCCL's choice)
//   min_ctas   fewest thread blocks (default: NCCL's choice)
//   net_name   NCCL network plugin to use, e.g. IB or Socket (default:
//              NCCL's choice)
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "shardrec/sdk/comm.hpp"
#include "shardrec/sdk/gpu_reason.hpp"
#include "shardrec/sdk/options.hpp"

#if NCCL_VERSION_CODE < NCCL_VERSION(2, 18, 0)
#error "the nccl comm backend needs NCCL 2.18 or newer (ncclCommSplit on non-blocking communicators)"
#endif

namespace shardrec::nccl_comm {
namespace {

using sdk::Collective;
using sdk::CollectiveOp;
using Clock = std::chrono::steady_clock;

std::string CudaText(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

void CudaCheck(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return;
  cudaGetLastError();  // clears a sticky error so later calls report their own
  throw sdk::Error(e == cudaErrorMemoryAllocation ? SR_RESOURCE_EXHAUSTED : SR_INTERNAL,
                   "comm nccl: " + what + " failed (" + CudaText(e) + ")");
}

int32_t CodeOf(ncclResult_t r) {
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage: return SR_INVALID_ARGUMENT;
    case ncclSystemError:
    case ncclRemoteError: return SR_UNAVAILABLE;
    default: return SR_INTERNAL;
  }
}

// NCCL's words for `r`, with its last detailed message when it has one.
std::string NcclText(ncclResult_t r, ncclComm_t comm) {
  std::string s = std::string("NCCL error ") + std::to_string(static_cast<int>(r)) + " (" + ncclGetErrorString(r) + ")";
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') s += ": " + std::string(last);
  return s;
}

// The thread's current device becomes `device`, where it is not already:
// NCCL and the CUDA calls here act on the current device.
void UseDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current == device) return;
  CudaCheck(cudaSetDevice(device), "cudaSetDevice(" + std::to_string(device) + ")");
}

// Polling with a growing pause: a collective that completes in microseconds
// is seen at once, a long one costs little CPU.
class Backoff {
 public:
  void Pause() {
    if (spins_ < 64) {
      ++spins_;
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(pause_);
    pause_ = std::min(pause_ * 2, std::chrono::microseconds(1000));
  }

 private:
  int spins_ = 0;
  std::chrono::microseconds pause_{20};
};

int64_t MsUntil(Clock::time_point deadline) {
  return std::max<int64_t>(
      0, std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
}

ncclDataType_t ReduceType(DLDataType t) {
  if (t.code == kDLFloat && t.bits == 16) return ncclHalf;
  if (t.code == kDLBfloat && t.bits == 16) return ncclBfloat16;
  if (t.code == kDLFloat && t.bits == 32) return ncclFloat;
  if (t.code == kDLFloat && t.bits == 64) return ncclDouble;
  if (t.code == kDLInt && t.bits == 32) return ncclInt32;
  if (t.code == kDLInt && t.bits == 64) return ncclInt64;
  // ParseCollective lets only the types above reach a reduction.
  throw sdk::InvalidArgument("comm nccl cannot reduce dtype " + sdk::DTypeName(t));
}

ncclRedOp_t ReduceOp(int32_t op) {
  switch (op) {
    case SR_REDUCE_MAX: return ncclMax;
    case SR_REDUCE_MIN: return ncclMin;
    default: return ncclSum;
  }
}

bool AllEqual(const std::vector<int64_t>& v) {
  return std::all_of(v.begin(), v.end(), [&](int64_t x) { return x == v.front(); });
}

// What a communicator and every communicator split from it share.
struct Shared {
  sdk::KvStore store;
  int device = 0;
  int64_t timeout_ms = 0;
  int max_ctas = 0, min_ctas = 0;  // 0: NCCL's choice
  std::string net_name;

  ncclConfig_t Config() const {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // so that a hung peer can be aborted (see the top)
    if (max_ctas > 0) config.maxCTAs = max_ctas;
    if (min_ctas > 0) config.minCTAs = min_ctas;
    if (!net_name.empty()) config.netName = net_name.c_str();
    return config;
  }
};

// A CUDA event recorded after a collective.
class Event {
 public:
  Event() { CudaCheck(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "cudaEventCreate"); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { cudaEventDestroy(event_); }
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

class CommState;

class NcclRequest final : public sdk::Request {
 public:
  NcclRequest(std::shared_ptr<CommState> state, std::shared_ptr<Event> event, int64_t seq, std::string what)
      : state_(std::move(state)), event_(std::move(event)), seq_(seq), what_(std::move(what)) {}

  bool Test() override;
  void Wait(int64_t timeout_ms) override;

  int64_t seq() const { return seq_; }
  const std::string& what() const { return what_; }

  // Called by CommState::Fail before it aborts the communicator: a
  // collective whose event already fired completed; any other gets
  // `code`/`message`, since the abort may end its kernels early (and fire
  // its event without the data having arrived).
  void Settle(int32_t code, const std::string& message) {
    std::lock_guard<std::mutex> lock(m_);
    if (done_) return;
    done_ = true;
    if (cudaEventQuery(event_->get()) == cudaSuccess) return;
    cudaGetLastError();
    code_ = code;
    message_ = message;
  }

 private:
  // Throws the outcome if settled; true when settled successfully.
  bool Settled() {
    std::lock_guard<std::mutex> lock(m_);
    if (done_ && code_ != SR_OK) throw sdk::Error(code_, message_);
    return done_;
  }

  const std::shared_ptr<CommState> state_;  // keeps the communicator alive while this is
  const std::shared_ptr<Event> event_;
  const int64_t seq_;
  const std::string what_;
  std::mutex m_;
  bool done_ = false;
  int32_t code_ = SR_OK;
  std::string message_;
};

// One NCCL communicator and what its collectives need. Requests hold it by
// shared_ptr; the NCCL communicator is released when the last holder goes.
//
// Thread safety: one thread posts (the ABI's rule), any thread may test,
// wait and, on a timeout, abort. `m_` guards `comm_` against that abort:
// every NCCL call on the communicator runs under it, and an aborted
// communicator is NULL.
class CommState : public std::enable_shared_from_this<CommState> {
 public:
  CommState(std::shared_ptr<Shared> shared, std::string scope, int rank, std::vector<int> global_ranks)
      : shared_(std::move(shared)), scope_(std::move(scope)), rank_(rank), global_ranks_(std::move(global_ranks)) {
    monitor_ = std::make_unique<sdk::PeerMonitor>(shared_->store, scope_, rank_, global_ranks_, shared_->timeout_ms);
    try {
      UseDevice(shared_->device);
      CudaCheck(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
      // Stream-ordered, so freeing it never waits for the whole device
      // (where another communicator's kernel may be waiting for a peer).
      int pools = 0;
      if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, shared_->device) != cudaSuccess) {
        cudaGetLastError();
        pools = 0;
      }
      pooled_ = pools != 0;
      if (pooled_) {
        CudaCheck(cudaMallocAsync(&barrier_buffer_, sizeof(int32_t), stream_), "cudaMallocAsync");
        CudaCheck(cudaMemsetAsync(barrier_buffer_, 0, sizeof(int32_t), stream_), "cudaMemsetAsync");
        CudaCheck(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
      } else {
        CudaCheck(cudaMalloc(&barrier_buffer_, sizeof(int32_t)), "cudaMalloc");
        CudaCheck(cudaMemset(barrier_buffer_, 0, sizeof(int32_t)), "cudaMemset");
      }
    } catch (...) {
      ReleaseCuda();
      throw;
    }
  }

  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;

  // Never throws: a failure to tear down cleanly ends in an abort.
  ~CommState() {
    if (cudaSetDevice(shared_->device) != cudaSuccess) cudaGetLastError();
    {
      std::lock_guard<std::mutex> lock(m_);
      if (comm_ != nullptr) {
        if (!ready_ || !failure_.empty()) {
          ncclCommAbort(comm_);
        } else {
          // Finalize flushes what is in flight; bounded, since a peer that
          // vanished mid-collective would keep it from ever finishing.
          ncclResult_t state = ncclCommFinalize(comm_);
          const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(shared_->timeout_ms);
          Backoff backoff;
          while (state == ncclSuccess || state == ncclInProgress) {
            ncclResult_t async = ncclInProgress;
            if (ncclCommGetAsyncError(comm_, &async) != ncclSuccess) break;
            state = async;
            if (state != ncclInProgress || Clock::now() >= deadline) break;
            backoff.Pause();
          }
          if (state == ncclSuccess) {
            ncclCommDestroy(comm_);
          } else {
            ncclCommAbort(comm_);
          }
        }
        comm_ = nullptr;
      }
    }
    ReleaseCuda();
    monitor_.reset();  // publishes "left" for the peers' diagnoses
  }

  int rank() const { return rank_; }
  int world_size() const { return static_cast<int>(global_ranks_.size()); }
  const std::vector<int>& global_ranks() const { return global_ranks_; }
  const std::string& scope() const { return scope_; }
  const std::shared_ptr<Shared>& shared() const { return shared_; }
  sdk::PeerMonitor& monitor() const { return *monitor_; }
  int64_t timeout_ms() const { return shared_->timeout_ms; }

  // Takes over a communicator that NCCL is still initializing (from
  // ncclCommInitRankConfig or ncclCommSplit) and waits until it is ready.
  // `what` names the step for messages; `seq` is the collective the
  // diagnosis compares peers against (0: only whether they are alive).
  void Adopt(ncclComm_t comm, Clock::time_point deadline, const std::string& what, int64_t seq) {
    {
      std::lock_guard<std::mutex> lock(m_);
      comm_ = comm;
    }
    AwaitNccl(deadline, what, seq);
    int count = 0, user_rank = -1;
    {
      std::lock_guard<std::mutex> lock(m_);
      if (ncclCommCount(comm_, &count) != ncclSuccess || ncclCommUserRank(comm_, &user_rank) != ncclSuccess ||
          count != world_size() || user_rank != rank_) {
        throw sdk::Error(SR_INTERNAL, "comm nccl: " + what + " made rank " + std::to_string(user_rank) + " of " +
                                          std::to_string(count) + ", expected rank " + std::to_string(rank_) +
                                          " of " + std::to_string(world_size()));
      }
      ready_ = true;
    }
  }

  // Waits until the communicator has finished what NCCL is doing in the
  // background (initializing, splitting, setting up a collective's
  // connections). On an NCCL error or at the deadline the communicator is
  // aborted and the error thrown, naming the ranks the heartbeats blame.
  void AwaitNccl(Clock::time_point deadline, const std::string& what, int64_t seq) {
    Backoff backoff;
    for (;;) {
      ncclResult_t state = ncclInProgress;
      std::string nccl_error;
      {
        std::lock_guard<std::mutex> lock(m_);
        ThrowIfFailedLocked(what);
        const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
        if (r != ncclSuccess) state = r;
        if (state != ncclSuccess && state != ncclInProgress) nccl_error = NcclText(state, comm_);
      }
      if (state == ncclSuccess) return;
      if (!nccl_error.empty()) {
        const std::string message = what + ": " + nccl_error + Blame(seq);
        Fail(0, CodeOf(state), message);
        throw sdk::Error(CodeOf(state), message);
      }
      if (Clock::now() >= deadline) {
        const std::string message = what + " did not complete within " + std::to_string(timeout_ms()) + " ms" +
                                    Blame(seq);
        Fail(0, SR_DEADLINE_EXCEEDED, message);
        throw sdk::Error(SR_DEADLINE_EXCEEDED, message);
      }
      backoff.Pause();
    }
  }

  // Enqueues `c` as collective number `seq` and returns its request.
  std::shared_ptr<sdk::Request> Post(int64_t seq, const Collective& c) {
    const std::string what = std::string(sdk::CollectiveName(c.op)) + " (collective #" + std::to_string(seq) + ")";
    {
      std::lock_guard<std::mutex> lock(m_);
      ThrowIfFailedLocked(what);
    }
    monitor_->Started(seq);
    UseDevice(shared_->device);
    cudaStream_t stream = c.op == CollectiveOp::kBarrier ? stream_ : static_cast<cudaStream_t>(c.stream);
    // Requests complete in the order posted (the ABI's promise): a
    // collective on another stream than the previous one waits for it.
    if (last_event_ != nullptr && stream != last_stream_) {
      CudaCheck(cudaStreamWaitEvent(stream, last_event_->get(), 0), what + ": cudaStreamWaitEvent");
    }
    if (c.op == CollectiveOp::kAllToAllV && c.send_counts[rank_] > 0) {
      // What a rank sends itself is a device copy, not a trip through NCCL.
      CudaCheck(cudaMemcpyAsync(c.recv + c.Bytes(c.recv_displs[rank_]), c.send + c.Bytes(c.send_displs[rank_]),
                                c.Bytes(c.send_counts[rank_]), cudaMemcpyDeviceToDevice, stream),
                what + ": cudaMemcpyAsync");
    }
    std::string nccl_error;
    int32_t code = SR_OK;
    {
      std::lock_guard<std::mutex> lock(m_);
      ThrowIfFailedLocked(what);
      const ncclResult_t r = Enqueue(c, stream);
      if (r != ncclSuccess && r != ncclInProgress) {
        code = CodeOf(r);
        nccl_error = what + ": " + NcclText(r, comm_);
      }
    }
    if (!nccl_error.empty()) {
      // This rank's part is missing now, so its peers could only hang.
      Fail(0, code, nccl_error);
      throw sdk::Error(code, nccl_error);
    }
    AwaitNccl(Clock::now() + std::chrono::milliseconds(timeout_ms()), what, seq);
    auto event = std::make_shared<Event>();
    CudaCheck(cudaEventRecord(event->get(), stream), what + ": cudaEventRecord");
    auto request = std::make_shared<NcclRequest>(shared_from_this(), event, seq, what);
    {
      std::lock_guard<std::mutex> lock(m_);
      std::erase_if(outstanding_, [](const std::weak_ptr<NcclRequest>& w) { return w.expired(); });
      outstanding_.push_back(request);
    }
    last_event_ = std::move(event);
    last_stream_ = stream;
    return request;
  }

  // Splits this communicator (collective over it); the caller waits for it
  // on this communicator (AwaitNccl) and then takes the child (SplitChild).
  // On a non-blocking communicator NCCL writes the child's handle only when
  // the split completes, from its own thread: the slot it writes lives here,
  // where an abort of this communicator cannot outlive it.
  ncclResult_t SplitLocked(int32_t color, int32_t key, std::string* error) {
    std::lock_guard<std::mutex> lock(m_);
    ThrowIfFailedLocked("split");
    ncclConfig_t config = shared_->Config();
    split_child_ = nullptr;
    const ncclResult_t r = ncclCommSplit(comm_, color, key, &split_child_, &config);
    if (r != ncclSuccess && r != ncclInProgress) *error = NcclText(r, comm_);
    return r;
  }

  // The child of the last split, once AwaitNccl saw it complete.
  ncclComm_t SplitChild() {
    std::lock_guard<std::mutex> lock(m_);
    return std::exchange(split_child_, nullptr);
  }

  // Fails the communicator (see Fail) if NCCL reports an error on it now:
  // NCCL cannot run anything more on it then.
  void CheckAsync(const std::string& what, int64_t seq) {
    std::string message;
    int32_t code = SR_OK;
    {
      std::lock_guard<std::mutex> lock(m_);
      if (comm_ == nullptr) return;  // failed: the request was settled then
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) state = r;
      if (state == ncclSuccess || state == ncclInProgress) return;
      code = CodeOf(state);
      message = what + ": " + NcclText(state, comm_);
    }
    Fail(seq, code, message);
  }

  // Records the communicator's first failure, settles its outstanding
  // requests (the one numbered `seq` gets `code`/`message`, the others
  // ABORTED) and aborts it. Later calls change nothing.
  void Fail(int64_t seq, int32_t code, const std::string& message) {
    std::lock_guard<std::mutex> lock(m_);
    if (!failure_.empty()) return;
    failure_ = message;
    for (const auto& w : outstanding_) {
      if (auto r = w.lock()) {
        if (r->seq() == seq) {
          r->Settle(code, message);
        } else {
          r->Settle(SR_ABORTED, r->what() + ": aborted, the communicator failed: " + message);
        }
      }
    }
    outstanding_.clear();
    if (comm_ != nullptr) {
      ncclCommAbort(comm_);  // switches to the communicator's device and back
      comm_ = nullptr;
    }
  }

  // " [why]" from the heartbeats, or "" when every peer looks healthy.
  std::string Blame(int64_t seq) const { return monitor_->Blame(seq); }

 private:
  void ReleaseCuda() noexcept {
    if (barrier_buffer_ != nullptr) {
      if (pooled_) {
        cudaFreeAsync(barrier_buffer_, stream_);
      } else {
        cudaFree(barrier_buffer_);
      }
      barrier_buffer_ = nullptr;
    }
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    stream_ = nullptr;
    cudaGetLastError();
  }

  void ThrowIfFailedLocked(const std::string& what) const {
    if (!failure_.empty()) {
      throw sdk::Error(SR_FAILED_PRECONDITION,
                       what + ": the communicator failed earlier and cannot be used: " + failure_);
    }
    if (comm_ == nullptr) throw sdk::Error(SR_INTERNAL, what + ": the NCCL communicator is not initialized");
  }

  // The NCCL calls of one collective, as one group. Zero-sized pieces are
  // left out: every rank leaves out the same ones when counts agree.
  ncclResult_t Enqueue(const Collective& c, cudaStream_t stream) {
    const int n = world_size();
    ncclResult_t first = ncclSuccess;
    auto note = [&](ncclResult_t r) {
      if (first == ncclSuccess && r != ncclSuccess && r != ncclInProgress) first = r;
    };
    note(ncclGroupStart());
    if (first != ncclSuccess) return first;
    switch (c.op) {
      case CollectiveOp::kAllToAllV:
        for (int q = 0; q < n && first == ncclSuccess; ++q) {
          if (q == rank_) continue;  // copied before the group
          if (c.send_counts[q] > 0) {
            note(ncclSend(c.send + c.Bytes(c.send_displs[q]), c.Bytes(c.send_counts[q]), ncclUint8, q, comm_, stream));
          }
          if (c.recv_counts[q] > 0) {
            note(ncclRecv(c.recv + c.Bytes(c.recv_displs[q]), c.Bytes(c.recv_counts[q]), ncclUint8, q, comm_, stream));
          }
        }
        break;
      case CollectiveOp::kAllGatherV:
        if (AllEqual(c.recv_counts)) {
          if (c.recv_counts[0] > 0) {
            note(ncclAllGather(c.send, c.recv, c.Bytes(c.recv_counts[0]), ncclUint8, comm_, stream));
          }
        } else {
          for (int q = 0; q < n && first == ncclSuccess; ++q) {
            if (c.recv_counts[q] == 0) continue;
            char* slice = c.recv + c.Bytes(c.recv_displs[q]);
            note(ncclBroadcast(q == rank_ ? c.send : slice, slice, c.Bytes(c.recv_counts[q]), ncclUint8, q, comm_,
                               stream));
          }
        }
        break;
      case CollectiveOp::kReduceScatterV: {
        const ncclDataType_t type = ReduceType(c.dtype);
        const ncclRedOp_t op = ReduceOp(c.reduce_op);
        if (AllEqual(c.recv_counts)) {
          if (c.recv_counts[0] > 0) {
            note(ncclReduceScatter(c.send, c.recv, static_cast<size_t>(c.recv_counts[0]), type, op, comm_, stream));
          }
        } else {
          // recvbuff is read only on the root (NCCL's contract), hence NULL
          // elsewhere: recv holds only this rank's slice.
          for (int q = 0; q < n && first == ncclSuccess; ++q) {
            if (c.recv_counts[q] == 0) continue;
            note(ncclReduce(c.send + c.Bytes(c.recv_displs[q]), q == rank_ ? c.recv : nullptr,
                            static_cast<size_t>(c.recv_counts[q]), type, op, q, comm_, stream));
          }
        }
        break;
      }
      case CollectiveOp::kAllReduce:
        if (c.recv_numel > 0) {
          note(ncclAllReduce(c.send, c.recv, static_cast<size_t>(c.recv_numel), ReduceType(c.dtype),
                             ReduceOp(c.reduce_op), comm_, stream));
        }
        break;
      case CollectiveOp::kBroadcast:
        if (c.recv_numel > 0) {
          note(ncclBroadcast(c.recv, c.recv, c.Bytes(c.recv_numel), ncclUint8, c.root, comm_, stream));
        }
        break;
      case CollectiveOp::kBarrier:
        note(ncclAllReduce(barrier_buffer_, barrier_buffer_, 1, ncclInt32, ncclSum, comm_, stream));
        break;
    }
    const ncclResult_t end = ncclGroupEnd();  // closes the group even after an error
    if (first != ncclSuccess) return first;
    return end;
  }

  const std::shared_ptr<Shared> shared_;
  const std::string scope_;
  const int rank_;
  const std::vector<int> global_ranks_;
  std::unique_ptr<sdk::PeerMonitor> monitor_;
  cudaStream_t stream_ = nullptr;  // barriers
  void* barrier_buffer_ = nullptr;
  bool pooled_ = false;
  // Used by the posting thread only.
  std::shared_ptr<Event> last_event_;
  cudaStream_t last_stream_ = nullptr;

  mutable std::mutex m_;
  ncclComm_t comm_ = nullptr;
  ncclComm_t split_child_ = nullptr;  // written by NCCL when a split completes
  bool ready_ = false;
  std::string failure_;
  std::vector<std::weak_ptr<NcclRequest>> outstanding_;
};

bool NcclRequest::Test() {
  if (Settled()) return true;
  const cudaError_t e = cudaEventQuery(event_->get());
  if (e == cudaSuccess) {
    std::lock_guard<std::mutex> lock(m_);
    // Settle() may have run meanwhile: then an abort fired the event, and
    // the outcome it recorded stands.
    if (done_ && code_ != SR_OK) throw sdk::Error(code_, message_);
    done_ = true;
    return true;
  }
  if (e != cudaErrorNotReady) {
    cudaGetLastError();
    state_->Fail(seq_, SR_INTERNAL, what_ + ": " + CudaText(e));
    return Settled();
  }
  state_->CheckAsync(what_, seq_);
  return Settled();
}

void NcclRequest::Wait(int64_t timeout_ms) {
  if (timeout_ms < 0) timeout_ms = state_->timeout_ms();
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  Backoff backoff;
  while (!Test()) {
    if (Clock::now() >= deadline) {
      // Its kernels cannot be taken back; only an abort frees the buffers.
      const std::string message =
          what_ + " did not complete within " + std::to_string(timeout_ms) + " ms" + state_->Blame(seq_);
      state_->Fail(seq_, SR_DEADLINE_EXCEEDED, message);
      // Test() throws the outcome Fail settled, or is true if the
      // collective completed meanwhile.
      if (!Test()) throw sdk::Error(SR_DEADLINE_EXCEEDED, message);
      return;
    }
    backoff.Pause();
  }
}

class NcclComm {
 public:
  explicit NcclComm(const sr_comm_create_args& a) {
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(a.timeout_ms);
    auto shared = std::make_shared<Shared>();
    sdk::Options options(a.options, "comm nccl");
    const int64_t max_ctas = options.GetInt("max_ctas", 0), min_ctas = options.GetInt("min_ctas", 0);
    shared->net_name = options.GetString("net_name", "");
    options.Finish();
    // NCCL checks the upper limits itself (they depend on its build).
    constexpr int64_t kIntMax = std::numeric_limits<int>::max();
    if (max_ctas < 0 || min_ctas < 0 || max_ctas > kIntMax || min_ctas > kIntMax ||
        (max_ctas > 0 && min_ctas > max_ctas)) {
      throw sdk::InvalidArgument("comm nccl: min_ctas (" + std::to_string(min_ctas) + ") and max_ctas (" +
                                 std::to_string(max_ctas) + ") must be at least 0 (0: NCCL's choice), with min_ctas <= max_ctas");
    }
    shared->max_ctas = static_cast<int>(max_ctas);
    shared->min_ctas = static_cast<int>(min_ctas);
    int devices = 0;
    const cudaError_t e = cudaGetDeviceCount(&devices);
    if (e != cudaSuccess || devices == 0) {
      cudaGetLastError();
      throw sdk::Error(SR_FAILED_PRECONDITION,
                       "comm nccl: " + sdk::NoGpuReason(static_cast<int>(e), e != cudaSuccess ? CudaText(e) : ""));
    }
    if (a.device.device_type != kDLCUDA) {
      throw sdk::InvalidArgument("comm nccl moves CUDA tensors: its device must be a CUDA device (DLPack type " +
                                 std::to_string(kDLCUDA) + "), got device type " +
                                 std::to_string(a.device.device_type));
    }
    if (a.device.device_id < 0 || a.device.device_id >= devices) {
      throw sdk::InvalidArgument("comm nccl: device cuda:" + std::to_string(a.device.device_id) + " does not exist (" +
                                 std::to_string(devices) + " CUDA device(s) visible)");
    }
    shared->device = a.device.device_id;
    shared->timeout_ms = a.timeout_ms;
    shared->store = sdk::StoreOf(a);
    if (!shared->store.valid()) {
      throw sdk::Error(SR_FAILED_PRECONDITION,
                       "comm nccl needs the host's rendezvous store (a host with plugin ABI 1.1 or newer)");
    }
    UseDevice(shared->device);
    state_ = std::make_shared<CommState>(shared, "nccl/world", a.rank, sdk::IdentityRanks(a.world_size));

    const std::string id_key = state_->scope() + "/unique_id";
    ncclUniqueId id;
    if (a.rank == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) {
        throw sdk::Error(CodeOf(r), "comm nccl: ncclGetUniqueId failed: " + NcclText(r, nullptr));
      }
      shared->store.Set(id_key, std::string(id.internal, sizeof id.internal));
    } else {
      std::string bytes;
      try {
        bytes = shared->store.Get(id_key, std::max<int64_t>(1, MsUntil(deadline)));
      } catch (const sdk::Error& err) {
        throw sdk::Error(err.code(), "comm nccl: rank " + std::to_string(a.rank) +
                                         " did not get NCCL's unique id from rank 0: " + err.what() + state_->Blame(0));
      }
      if (bytes.size() != sizeof id.internal) {
        throw sdk::Error(SR_DATA_LOSS, "comm nccl: the unique id in the store has " + std::to_string(bytes.size()) +
                                           " bytes, expected " + std::to_string(sizeof id.internal));
      }
      std::memcpy(id.internal, bytes.data(), sizeof id.internal);
    }
    ncclConfig_t config = shared->Config();
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRankConfig(&comm, a.world_size, id, a.rank, &config);
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string message = "comm nccl: ncclCommInitRankConfig failed: " + NcclText(r, comm);
      if (comm != nullptr) ncclCommAbort(comm);
      throw sdk::Error(CodeOf(r), message);
    }
    state_->Adopt(comm, deadline, "comm nccl: rank " + std::to_string(a.rank) + " joining the NCCL communicator", 0);
  }

  explicit NcclComm(std::shared_ptr<CommState> state) : state_(std::move(state)) {}

  int rank() const { return state_->rank(); }
  int world_size() const { return state_->world_size(); }
  DLDeviceType device_type() const { return kDLCUDA; }

  std::shared_ptr<sdk::Request> Post(Collective c) { return state_->Post(++posted_, c); }

  // Ranks learn the split's membership through the store first (to name
  // their peers' global ranks, and so that a rank that never splits is
  // reported from the store's timeout), then NCCL splits.
  std::unique_ptr<NcclComm> Split(int32_t color, int32_t key) {
    const int64_t seq = ++posted_;
    const std::string what = "split (collective #" + std::to_string(seq) + ")";
    const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(state_->timeout_ms());
    state_->monitor().Started(seq);
    const std::shared_ptr<Shared>& shared = state_->shared();
    const std::string base = state_->scope() + "/split" + std::to_string(++splits_);
    shared->store.Set(base + "/" + std::to_string(rank()), std::to_string(color) + " " + std::to_string(key));
    std::vector<int64_t> colors(world_size()), keys(world_size());  // as ncclCommSplit orders them
    for (int q = 0; q < world_size(); ++q) {
      std::string entry;
      try {
        entry = shared->store.Get(base + "/" + std::to_string(q), std::max<int64_t>(1, MsUntil(deadline)));
      } catch (const sdk::Error& err) {
        throw sdk::Error(err.code(), what + ": rank " + std::to_string(state_->global_ranks()[q]) +
                                         " did not publish its color: " + err.what() + state_->Blame(seq));
      }
      long long c = 0, k = 0;
      if (std::sscanf(entry.c_str(), "%lld %lld", &c, &k) != 2) {
        throw sdk::Error(SR_DATA_LOSS, what + ": malformed split entry '" + entry + "' in the store");
      }
      colors[q] = c;
      keys[q] = k;
    }
    sdk::SplitGroup group = sdk::SplitMembers(colors, keys, rank(), state_->global_ranks());
    const int sub_rank = group.rank;
    UseDevice(shared->device);
    auto sub = std::make_shared<CommState>(shared, base + "/color" + std::to_string(color), sub_rank,
                                           std::move(group.global_ranks));
    std::string error;
    const ncclResult_t r = state_->SplitLocked(color, key, &error);
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string message = what + ": ncclCommSplit failed: " + error;
      if (ncclComm_t partial = state_->SplitChild(); partial != nullptr) ncclCommAbort(partial);
      state_->Fail(0, CodeOf(r), message);
      throw sdk::Error(CodeOf(r), message);
    }
    // The parent reports the split's progress (on failure or at the
    // deadline AwaitNccl aborts it); the child's handle exists after.
    state_->AwaitNccl(deadline, what, seq);
    ncclComm_t comm = state_->SplitChild();
    if (comm == nullptr) {
      const std::string message = what + ": ncclCommSplit completed without a communicator for color " +
                                  std::to_string(color);
      state_->Fail(0, SR_INTERNAL, message);
      throw sdk::Error(SR_INTERNAL, message);
    }
    try {
      sub->Adopt(comm, deadline, what, seq);
    } catch (const sdk::Error& err) {
      state_->Fail(0, err.code(), err.what());
      throw;
    }
    return std::make_unique<NcclComm>(std::move(sub));
  }

 private:
  std::shared_ptr<CommState> state_;
  int64_t posted_ = 0, splits_ = 0;
};

const char* const kOptionNames[] = {"max_ctas", "min_ctas", "net_name"};
const char* const kDevices[] = {"cuda"};
const sr_named_value kAttributes[] = {
    sdk::StringAttr("transport", "NVLink/InfiniBand/PCIe via NCCL"),
    sdk::StringAttr("rendezvous", "file:DIR, redis:HOST:PORT or local:NAME (through the host's store)"),
    sdk::StringListAttr("devices", kDevices, std::size(kDevices)),
    sdk::StringListAttr("reduce_dtypes", sdk::kReducibleDTypeNames, std::size(sdk::kReducibleDTypeNames)),
    sdk::StringListAttr("options", kOptionNames, std::size(kOptionNames)),
    sdk::BoolAttr("checks_arguments_across_ranks", false),
    // The static CUDA runtime in this library must not be unloaded while
    // the process runs.
    sdk::BoolAttr("never_unload", true),
};

// Priority 1, below local (10) and gloo (5): never the default on a CPU host.
const sr_component kComponents[] = {
    sdk::Component(SR_KIND_COMM, "nccl", "1.0", "one GPU per rank, collectives on CUDA streams with NCCL",
                   &sdk::CommVtable<NcclComm>(), sdk::List(kAttributes), 1),
};

}  // namespace
}  // namespace shardrec::nccl_comm

SHARDREC_DEFINE_PLUGIN("nccl", "1.0", shardrec::nccl_comm::kComponents)
