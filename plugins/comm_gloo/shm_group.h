// The gloo backend's transport for ranks on one host: a POSIX shared-memory
// segment instead of Gloo's TCP over loopback.
//
// Why: on one host every Gloo message is a write() into the kernel's
// loopback, an epoll wake-up of Gloo's device thread on the receiver, a
// read() and a condition-variable hand-off to the waiting thread. With two
// processes on two cores those hops are most of an exchange (perf: epoll,
// tcp_* and the scheduler ~30 % of CPU in a 2-rank training step; see
// docs/benchmarks.md). Here each rank copies what it sends into its own
// region of the segment, the ranks meet at a counter barrier in the segment
// (a short spin, then a futex on a shared word), and each rank copies what
// it receives straight out of its peers' regions: two memcpy and no system
// call when the peers arrive together.
//
// Every collective is a sequence of rounds of at most one region per rank;
// reductions run in rank order (the same sums as the `local` backend, bit
// for bit). Arguments are always checked: each rank publishes its
// collective's arguments in the segment and every rank checks every rank's,
// so disagreeing ranks all fail with the same message.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/sdk/collective.hpp"
#include "shardrec/sdk/kv_store.hpp"

namespace shardrec::gloo_comm {

class ShmGroup {
 public:
  // Says why a wait ran out (the peer monitor's diagnosis), appended to the
  // timeout message.
  using Blame = std::function<std::string()>;

  // Rank 0 creates the segment (`region_bytes` of data per rank) and
  // publishes its name in the store under `scope`; the other ranks open it.
  // Returns once every rank mapped it (the name is then unlinked, so nothing
  // stays in /dev/shm after the job). `global_ranks` name ranks in messages.
  ShmGroup(const sdk::KvStore& store, const std::string& scope, int rank, std::vector<int> global_ranks,
           size_t region_bytes, int64_t timeout_ms, const Blame& blame);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Runs one collective; every rank runs the same sequence. Throws
  // sdk::Error naming the rank that disagreed, left or did not arrive within
  // `timeout_ms`. After a failure the group refuses further collectives.
  void Run(const sdk::Collective& c, int64_t timeout_ms, const Blame& blame);

 private:
  struct Control;   // per rank: arrival counter, departure flag, arguments
  struct Header;    // the segment's first bytes: layout and the shared bell

  int world() const { return static_cast<int>(global_ranks_.size()); }
  Control& control(int q) const;
  int64_t* args(int q) const;  // where rank q publishes its collective's arguments
  char* region(int q) const;
  std::vector<sdk::Collective> Agree() const;

  // Publishes this rank's arrival at the next phase and waits for every
  // peer's; throws on a departed peer or at the deadline.
  void Arrive(const char* what, int64_t timeout_ms, const Blame& blame);
  void Ring();

  void AllToAllV(const sdk::Collective& c, int64_t t, const Blame& b);
  void AllGatherV(const sdk::Collective& c, int64_t t, const Blame& b);
  void ReduceScatterV(const sdk::Collective& c, int64_t t, const Blame& b);
  void AllReduce(const sdk::Collective& c, int64_t t, const Blame& b);
  void Broadcast(const sdk::Collective& c, int64_t t, const Blame& b);

  int rank_ = 0;
  std::vector<int> global_ranks_;
  size_t region_bytes_ = 0;
  size_t control_bytes_ = 0;  // one rank's Control block, arguments included
  size_t slot_bytes_ = 0;     // region_bytes_ / world, rounded down to 64 bytes
  void* base_ = nullptr;
  size_t mapped_bytes_ = 0;
  std::string name_;
  uint64_t phase_ = 0;        // barriers passed; the same on every rank
  bool broken_ = false;
  std::string broken_why_;
  std::vector<const void*> srcs_;
};

}  // namespace shardrec::gloo_comm
