#include "shm_group.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <random>

namespace shardrec::gloo_comm {
namespace {

using Clock = std::chrono::steady_clock;
using sdk::Collective;
using sdk::CollectiveOp;

constexpr uint64_t kMagic = 0x6d6873636572647aull;  // "zdrecshm"
constexpr uint32_t kLayoutVersion = 1;
constexpr size_t kLine = 64;
constexpr size_t kHeaderBytes = 2 * kLine;
// How long a rank spins on the peers' counters before it sleeps on the bell.
// Short: on a host with fewer cores than busy threads a spinning rank takes
// the core its peer needs to arrive.
constexpr auto kSpin = std::chrono::microseconds(20);
// The longest single futex sleep: departures and deadlines are rechecked
// this often even when no peer rings.
constexpr int64_t kSleepSliceNs = 50'000'000;

size_t RoundUp(size_t x, size_t to) { return (x + to - 1) / to * to; }

std::string Errno(int e) { return std::strerror(e); }

void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

template <class T>
std::atomic_ref<T> Atomic(T& x) {
  return std::atomic_ref<T>(x);
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

}  // namespace

struct ShmGroup::Header {
  uint64_t magic;
  uint32_t version;
  int32_t world;
  uint64_t region_bytes;
  uint64_t control_bytes;
  alignas(kLine) uint32_t bell;  // a futex word: bumped at every arrival
  uint32_t sleepers;             // ranks asleep on the bell (rings skip the syscall at 0)
};

// One rank's block; sdk::EncodeArguments of its current collective follows
// on the next cache line (args()).
struct ShmGroup::Control {
  uint64_t arrived;  // phases this rank reached
  uint32_t gone;     // set when the rank's communicator is destroyed
  uint32_t nargs;
};

int64_t* ShmGroup::args(int q) const {
  return reinterpret_cast<int64_t*>(reinterpret_cast<char*>(&control(q)) + kLine);
}

ShmGroup::Control& ShmGroup::control(int q) const {
  return *reinterpret_cast<Control*>(static_cast<char*>(base_) + kHeaderBytes + q * control_bytes_);
}

char* ShmGroup::region(int q) const {
  const size_t data = RoundUp(kHeaderBytes + world() * control_bytes_, 4096);
  return static_cast<char*>(base_) + data + q * region_bytes_;
}

ShmGroup::ShmGroup(const sdk::KvStore& store, const std::string& scope, int rank, std::vector<int> global_ranks,
                   size_t region_bytes, int64_t timeout_ms, const Blame& blame)
    : rank_(rank), global_ranks_(std::move(global_ranks)) {
  static_assert(sizeof(Header) <= kHeaderBytes && sizeof(Control) <= kLine);
  const int n = world();
  region_bytes_ = RoundUp(std::max<size_t>(region_bytes, 4096), 4096);
  slot_bytes_ = region_bytes_ / n / kLine * kLine;
  if (slot_bytes_ == 0) {
    throw sdk::InvalidArgument("comm gloo: shm_bytes of " + std::to_string(region_bytes) + " leaves no room per peer for " +
                               std::to_string(n) + " ranks; give at least " + std::to_string(n * kLine));
  }
  control_bytes_ = RoundUp(kLine + sizeof(int64_t) * (6 + 2 * static_cast<size_t>(n)), kLine);
  mapped_bytes_ = RoundUp(kHeaderBytes + n * control_bytes_, 4096) + n * region_bytes_;
  srcs_.resize(n);
  const std::string key = scope + "/shm/segment";
  const std::string where = "comm gloo (shared memory) rank " + std::to_string(global_ranks_[rank_]);
  int fd = -1;
  if (rank_ == 0) {
    std::random_device rd;
    for (int attempt = 0; fd < 0; ++attempt) {
      char name[64];
      std::snprintf(name, sizeof name, "/shardrec-%d-%08x%08x", static_cast<int>(::getpid()), rd(), rd());
      fd = ::shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
      if (fd >= 0) {
        name_ = name;
      } else if (errno != EEXIST || attempt > 8) {
        throw sdk::Error(SR_UNAVAILABLE, where + ": cannot create a shared-memory segment in /dev/shm: " +
                                             Errno(errno) + " (comm.gloo.transport=tcp avoids it)");
      }
    }
    int e = ::ftruncate(fd, static_cast<off_t>(mapped_bytes_)) == 0 ? 0 : errno;
    // Reserve the pages now: on a full tmpfs a later write would be a SIGBUS.
    if (e == 0) e = ::posix_fallocate(fd, 0, static_cast<off_t>(mapped_bytes_));
    if (e != 0) {
      ::close(fd);
      ::shm_unlink(name_.c_str());
      throw sdk::Error(SR_RESOURCE_EXHAUSTED,
                       where + ": cannot reserve " + std::to_string(mapped_bytes_ >> 20) + " MiB in /dev/shm (" +
                           Errno(e) + "); free space there, lower comm.gloo.shm_bytes or set comm.gloo.transport=tcp");
    }
  } else {
    name_ = store.Get(key, timeout_ms);
    const bool plausible = name_.rfind("/shardrec-", 0) == 0 && name_.size() < 64 &&
                           name_.find('/', 1) == std::string::npos;
    if (!plausible) {
      throw sdk::Error(SR_FAILED_PRECONDITION, where + ": the store names an unexpected segment '" + name_ + "' under " + key);
    }
    fd = ::shm_open(name_.c_str(), O_RDWR, 0);
    if (fd < 0) {
      throw sdk::Error(SR_UNAVAILABLE, where + ": cannot open rank 0's segment " + name_ + ": " + Errno(errno) +
                                           " (are all ranks on one host and one /dev/shm? comm.gloo.transport=tcp "
                                           "does not need it)");
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != mapped_bytes_) {
      ::close(fd);
      throw sdk::Error(SR_FAILED_PRECONDITION,
                       where + ": rank 0's segment " + name_ + " is " + std::to_string(st.st_size) + " bytes, not " +
                           std::to_string(mapped_bytes_) + ": do the ranks agree on comm.gloo.shm_bytes?");
    }
  }
  base_ = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (base_ == MAP_FAILED) {
    base_ = nullptr;
    if (rank_ == 0) ::shm_unlink(name_.c_str());
    throw sdk::Error(SR_RESOURCE_EXHAUSTED, where + ": cannot map " + name_ + ": " + Errno(map_errno));
  }
  Header& h = *static_cast<Header*>(base_);
  if (rank_ == 0) {
    h.version = kLayoutVersion;
    h.world = n;
    h.region_bytes = region_bytes_;
    h.control_bytes = control_bytes_;
    Atomic(h.magic).store(kMagic, std::memory_order_release);
    store.Set(key, name_);
  } else if (Atomic(h.magic).load(std::memory_order_acquire) != kMagic || h.version != kLayoutVersion ||
             h.world != n || h.region_bytes != region_bytes_ || h.control_bytes != control_bytes_) {
    ::munmap(base_, mapped_bytes_);
    base_ = nullptr;
    throw sdk::Error(SR_FAILED_PRECONDITION, where + ": rank 0's segment " + name_ +
                                                 " has another layout (world size or comm.gloo.shm_bytes differ)");
  }
  try {
    Arrive("meeting", timeout_ms, blame);
  } catch (...) {
    if (rank_ == 0) ::shm_unlink(name_.c_str());
    ::munmap(base_, mapped_bytes_);
    base_ = nullptr;
    throw;
  }
  // Every rank has it mapped: the name can go, and the memory goes with the
  // last rank, however the job ends.
  if (rank_ == 0) ::shm_unlink(name_.c_str());
}

ShmGroup::~ShmGroup() {
  if (!base_) return;
  Atomic(control(rank_).gone).store(1, std::memory_order_seq_cst);
  Ring();
  ::munmap(base_, mapped_bytes_);
}

void ShmGroup::Ring() {
  Header& h = *static_cast<Header*>(base_);
  Atomic(h.bell).fetch_add(1, std::memory_order_seq_cst);
  if (Atomic(h.sleepers).load(std::memory_order_seq_cst) > 0) {
    ::syscall(SYS_futex, &h.bell, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
}

void ShmGroup::Arrive(const char* what, int64_t timeout_ms, const Blame& blame) {
  const uint64_t target = ++phase_;
  Atomic(control(rank_).arrived).store(target, std::memory_order_seq_cst);
  Ring();
  const int n = world();
  // The ranks not there yet; throws when one of them left.
  auto missing = [&](std::vector<int>* out) {
    bool all = true;
    for (int q = 0; q < n; ++q) {
      Control& c = control(q);
      if (Atomic(c.arrived).load(std::memory_order_acquire) >= target) continue;
      if (Atomic(c.gone).load(std::memory_order_acquire) != 0) {
        throw sdk::Error(SR_UNAVAILABLE, "comm gloo (shared memory): rank " + std::to_string(global_ranks_[q]) +
                                             " left the communicator before " + what + blame());
      }
      all = false;
      if (out) out->push_back(global_ranks_[q]);
    }
    return all;
  };
  const auto start = Clock::now();
  while (Clock::now() - start < kSpin) {
    for (int i = 0; i < 64; ++i) CpuRelax();
    if (missing(nullptr)) return;
  }
  Header& h = *static_cast<Header*>(base_);
  const auto deadline = start + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    const uint32_t seen = Atomic(h.bell).load(std::memory_order_seq_cst);
    Atomic(h.sleepers).fetch_add(1, std::memory_order_seq_cst);
    bool done = false;
    try {
      done = missing(nullptr);
    } catch (...) {
      Atomic(h.sleepers).fetch_sub(1, std::memory_order_seq_cst);
      throw;
    }
    const auto now = Clock::now();
    if (!done && now < deadline) {
      const int64_t left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - now).count();
      const int64_t ns = std::min(left, kSleepSliceNs);
      timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
      ::syscall(SYS_futex, &h.bell, FUTEX_WAIT, seen, &ts, nullptr, 0);
    }
    Atomic(h.sleepers).fetch_sub(1, std::memory_order_seq_cst);
    if (done) return;
    if (Clock::now() >= deadline) {
      std::vector<int> late;
      if (missing(&late)) return;
      throw sdk::Error(SR_DEADLINE_EXCEEDED, "comm gloo (shared memory): " + std::string(what) + " waited " +
                                                 std::to_string(timeout_ms) + " ms for " + RankList(late) + blame());
    }
  }
}

void ShmGroup::Run(const Collective& c, int64_t timeout_ms, const Blame& blame) {
  if (broken_) {
    throw sdk::Error(SR_FAILED_PRECONDITION,
                     "comm gloo (shared memory): an earlier collective failed (" + broken_why_ + "); create a new one");
  }
  try {
    const int n = world();
    const std::vector<int64_t> encoded = sdk::EncodeArguments(c, n);
    control(rank_).nargs = static_cast<uint32_t>(encoded.size());
    std::memcpy(args(rank_), encoded.data(), sizeof(int64_t) * encoded.size());
    switch (c.op) {
      case CollectiveOp::kBarrier:
        // Twice: no rank may post its next collective's arguments while a
        // peer still checks this one's.
        Arrive("barrier", timeout_ms, blame);
        Agree();
        Arrive("barrier", timeout_ms, blame);
        break;
      case CollectiveOp::kAllToAllV: AllToAllV(c, timeout_ms, blame); break;
      case CollectiveOp::kAllGatherV: AllGatherV(c, timeout_ms, blame); break;
      case CollectiveOp::kReduceScatterV: ReduceScatterV(c, timeout_ms, blame); break;
      case CollectiveOp::kAllReduce: AllReduce(c, timeout_ms, blame); break;
      case CollectiveOp::kBroadcast: Broadcast(c, timeout_ms, blame); break;
    }
  } catch (const std::exception& e) {
    broken_ = true;
    broken_why_ = e.what();
    throw;
  }
}

namespace {

}  // namespace

// Every rank's published arguments, checked against each other (each rank
// checks all, so all fail alike). Called after the first arrival, before
// the second: no peer rewrites its arguments in between.
std::vector<Collective> ShmGroup::Agree() const {
  const int n = world();
  std::vector<Collective> all;
  all.reserve(n);
  for (int q = 0; q < n; ++q) {
    if (control(q).nargs != 6 + 2 * static_cast<uint32_t>(n)) {
      throw sdk::Error(SR_FAILED_PRECONDITION, "comm gloo (shared memory): rank " + std::to_string(global_ranks_[q]) +
                                                   " published malformed arguments");
    }
    all.push_back(sdk::DecodeArguments(args(q), n));
    Collective& d = all.back();
    d.elem_size = std::max<size_t>(1, d.dtype.bits / 8);
  }
  std::vector<const Collective*> ops;
  for (const Collective& d : all) ops.push_back(&d);
  sdk::CheckAgreement(ops, global_ranks_);
  return all;
}

namespace {

int64_t Rounds(size_t bytes, size_t per_round) {
  return static_cast<int64_t>((bytes + per_round - 1) / per_round);
}

// [off, off + len) of a `total`-byte buffer in round k of `per_round` bytes.
size_t Piece(size_t total, size_t off, size_t per_round) { return off >= total ? 0 : std::min(per_round, total - off); }

}  // namespace

void ShmGroup::AllToAllV(const Collective& c, int64_t t, const Blame& b) {
  const int n = world(), r = rank_;
  const size_t slot = slot_bytes_;
  if (const size_t own = c.Bytes(c.recv_counts[r])) {
    std::memmove(c.recv + c.Bytes(c.recv_displs[r]), c.send + c.Bytes(c.send_displs[r]), own);
  }
  int64_t rounds = 1;
  for (int64_t k = 0; k < rounds; ++k) {
    const size_t off = static_cast<size_t>(k) * slot;
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      const size_t len = Piece(c.Bytes(c.send_counts[q]), off, slot);
      if (len) std::memcpy(region(r) + q * slot, c.send + c.Bytes(c.send_displs[q]) + off, len);
    }
    Arrive("all_to_all_v", t, b);
    if (k == 0) {
      const std::vector<Collective> all = Agree();
      for (int p = 0; p < n; ++p) {
        for (int q = 0; q < n; ++q) {
          if (p != q) rounds = std::max(rounds, Rounds(all[p].Bytes(all[p].send_counts[q]), slot));
        }
      }
    }
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      const size_t len = Piece(c.Bytes(c.recv_counts[q]), off, slot);
      if (len) std::memcpy(c.recv + c.Bytes(c.recv_displs[q]) + off, region(q) + r * slot, len);
    }
    Arrive("all_to_all_v", t, b);
  }
}

void ShmGroup::AllGatherV(const Collective& c, int64_t t, const Blame& b) {
  const int n = world(), r = rank_;
  const size_t per = region_bytes_;
  int64_t rounds = 1;
  for (int64_t k = 0; k < rounds; ++k) {
    const size_t off = static_cast<size_t>(k) * per;
    const size_t mine = Piece(c.Bytes(c.recv_counts[r]), off, per);
    if (mine) std::memcpy(region(r), c.send + off, mine);
    Arrive("all_gather_v", t, b);
    if (k == 0) {
      Agree();
      for (int q = 0; q < n; ++q) rounds = std::max(rounds, Rounds(c.Bytes(c.recv_counts[q]), per));
    }
    for (int q = 0; q < n; ++q) {
      const size_t len = Piece(c.Bytes(c.recv_counts[q]), off, per);
      // The own piece from the region too: send may lie inside recv (in place).
      if (len) std::memcpy(c.recv + c.Bytes(c.recv_displs[q]) + off, region(q), len);
    }
    Arrive("all_gather_v", t, b);
  }
}

void ShmGroup::ReduceScatterV(const Collective& c, int64_t t, const Blame& b) {
  const int n = world(), r = rank_;
  const size_t slot = slot_bytes_;
  int64_t rounds = 1;
  for (int q = 0; q < n; ++q) rounds = std::max(rounds, Rounds(c.Bytes(c.recv_counts[q]), slot));
  for (int64_t k = 0; k < rounds; ++k) {
    const size_t off = static_cast<size_t>(k) * slot;
    for (int q = 0; q < n; ++q) {
      const size_t len = Piece(c.Bytes(c.recv_counts[q]), off, slot);
      if (len) std::memcpy(region(r) + q * slot, c.send + c.Bytes(c.recv_displs[q]) + off, len);
    }
    Arrive("reduce_scatter_v", t, b);
    // Checked before any rank reads: the round count above is this rank's
    // own, which the check makes everyone's.
    if (k == 0) Agree();
    const size_t len = Piece(c.Bytes(c.recv_counts[r]), off, slot);
    if (len) {
      for (int p = 0; p < n; ++p) srcs_[p] = region(p) + r * slot;
      sdk::ReduceMany(c.dtype, c.reduce_op, c.recv + off, srcs_.data(), n, static_cast<int64_t>(len / c.elem_size));
    }
    Arrive("reduce_scatter_v", t, b);
  }
}

void ShmGroup::AllReduce(const Collective& c, int64_t t, const Blame& b) {
  const int n = world(), r = rank_;
  const size_t slot = slot_bytes_, block = slot * n;
  const size_t total = c.Bytes(c.recv_numel);
  const char* src = c.send ? c.send : c.recv;
  const int64_t rounds = std::max<int64_t>(1, Rounds(total, block));
  // Round k: rank q reduces chunk q of the block (in rank order) and leaves
  // the sum in its own slot q, from where every rank copies it.
  for (int64_t k = 0; k < rounds; ++k) {
    const size_t base = static_cast<size_t>(k) * block;
    auto chunk = [&](int q) { return Piece(total, base + q * slot, slot); };
    for (int q = 0; q < n; ++q) {
      if (const size_t len = chunk(q)) std::memcpy(region(r) + q * slot, src + base + q * slot, len);
    }
    Arrive("all_reduce", t, b);
    if (k == 0) Agree();
    if (const size_t len = chunk(r)) {
      for (int p = 0; p < n; ++p) srcs_[p] = region(p) + r * slot;
      char* out = c.recv + base + r * slot;  // not a source: every source is in the segment
      sdk::ReduceMany(c.dtype, c.reduce_op, out, srcs_.data(), n, static_cast<int64_t>(len / c.elem_size));
      std::memcpy(region(r) + r * slot, out, len);
    }
    Arrive("all_reduce", t, b);
    for (int q = 0; q < n; ++q) {
      if (q == r) continue;
      if (const size_t len = chunk(q)) std::memcpy(c.recv + base + q * slot, region(q) + q * slot, len);
    }
    Arrive("all_reduce", t, b);
  }
}

void ShmGroup::Broadcast(const Collective& c, int64_t t, const Blame& b) {
  const int n = world(), r = rank_;
  const size_t per = region_bytes_;
  const size_t total = c.Bytes(c.recv_numel);
  const int64_t rounds = std::max<int64_t>(1, Rounds(total, per));
  for (int64_t k = 0; k < rounds; ++k) {
    const size_t off = static_cast<size_t>(k) * per;
    const size_t len = Piece(total, off, per);
    if (r == c.root && len) std::memcpy(region(r), c.recv + off, len);
    Arrive("broadcast", t, b);
    if (k == 0) {
      Agree();
      if (c.root < 0 || c.root >= n) {
        throw sdk::InvalidArgument("broadcast: root " + std::to_string(c.root) + " is not a rank of " +
                                   std::to_string(n));
      }
    }
    if (r != c.root && len) std::memcpy(c.recv + off, region(c.root), len);
    Arrive("broadcast", t, b);
  }
}

}  // namespace shardrec::gloo_comm
