// shardrec plugin SDK — the job's key/value store (sr_kv_store, ABI 1.1) as
// a C++ object, and PeerMonitor, which turns "a collective timed out" into
// "rank 3 stopped responding" for backends whose transport cannot tell.
//
// PeerMonitor publishes this rank's heartbeat (a beat counter and the
// number of collectives it has started) in the store a few times per
// timeout. When a collective fails, Diagnose() reads every peer twice, one
// beat apart: a peer whose beat did not move has exited or hangs; a peer
// whose beat moves but whose collective count is behind is alive but has
// not posted this collective (it stalled in its own code, or posts a
// different sequence). Cost: one small store write per beat per rank.
//
// The store itself can die mid-run (a Redis server killed or restarted).
// Each beat therefore also reads one peer's heartbeat, round-robin, and
// remembers when each peer's beat last moved and when this rank last
// reached the store; a Diagnose() that cannot read the store says the store
// is gone, since when, and when each peer was last seen alive.
#ifndef SHARDREC_SDK_KV_STORE_HPP_
#define SHARDREC_SDK_KV_STORE_HPP_

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/abi/comm.h"
#include "shardrec/sdk/status.hpp"

namespace shardrec::sdk {

class KvStore {
 public:
  KvStore() = default;
  explicit KvStore(const sr_kv_store* store) : store_(store) {
    if (store_ != nullptr && (store_->set == nullptr || store_->get == nullptr)) {
      throw InvalidArgument("the host's key/value store lacks set or get");
    }
  }
  bool valid() const { return store_ != nullptr; }

  void Set(const std::string& key, const std::string& value) const {
    char err[512] = {0};
    const int32_t code = store_->set(store_->ctx, key.c_str(), value.data(), value.size(), err, sizeof err);
    if (code != SR_OK) throw Error(code, "store set '" + key + "': " + err);
  }

  // Waits up to timeout_ms for `key`; throws SR_DEADLINE_EXCEEDED if absent.
  std::string Get(const std::string& key, int64_t timeout_ms) const {
    std::string value;
    if (const int32_t code = Fetch(key, timeout_ms, &value); code != SR_OK) throw Error(code, value);
    return value;
  }

  // The value if `key` is set now.
  std::optional<std::string> TryGet(const std::string& key) const {
    std::string value;
    const int32_t code = Fetch(key, 0, &value);
    if (code == SR_DEADLINE_EXCEEDED) return std::nullopt;
    if (code != SR_OK) throw Error(code, value);
    return value;
  }

 private:
  static void Sink(void* ctx, const void* value, size_t size) {
    static_cast<std::string*>(ctx)->assign(static_cast<const char*>(value), size);
  }
  // The value into *out and SR_OK, or an error code and its message in *out.
  int32_t Fetch(const std::string& key, int64_t timeout_ms, std::string* out) const {
    char err[512] = {0};
    const int32_t code = store_->get(store_->ctx, key.c_str(), timeout_ms, &Sink, out, err, sizeof err);
    if (code != SR_OK) *out = "store get '" + key + "': " + err;
    return code;
  }
  const sr_kv_store* store_ = nullptr;
};

class PeerMonitor {
 public:
  // `scope` names the communicator in the store ("gloo/world"); `global_ranks`
  // maps this communicator's ranks to the job's, for messages.
  PeerMonitor(KvStore store, std::string scope, int rank, std::vector<int> global_ranks, int64_t timeout_ms)
      : store_(store),
        scope_(std::move(scope)),
        rank_(rank),
        global_ranks_(std::move(global_ranks)),
        interval_ms_(std::clamp<int64_t>(timeout_ms / 8, 50, 1000)) {
    Beat("running");
    last_store_ok_ = Clock::now();
    thread_ = std::thread([this] { Loop(); });
  }
  PeerMonitor(const PeerMonitor&) = delete;
  PeerMonitor& operator=(const PeerMonitor&) = delete;
  ~PeerMonitor() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    thread_.join();
    try {
      Beat("left");
    } catch (...) {  // the store may be gone with the job; nothing to report to
    }
  }

  // How long Diagnose() takes: a backend whose transport times out on its
  // own should give it this much less, so the whole report still arrives
  // within the user's timeout.
  int64_t diagnose_ms() const { return interval_ms_ * 2 + 20; }

  // This rank has started its collective number `seq` (1-based).
  void Started(int64_t seq) { started_.store(seq, std::memory_order_relaxed); }

  // Diagnose(seq) as a suffix for an error message: " [why]", or "".
  std::string Blame(int64_t seq) const {
    const std::string why = Diagnose(seq);
    return why.empty() ? "" : " [" + why + "]";
  }

  // Why collective `seq` cannot complete, as far as the heartbeats tell:
  // "rank 2 stopped responding ..." or "" when every peer looks healthy.
  // Blocks about two beats.
  std::string Diagnose(int64_t seq) const {
    const int world = static_cast<int>(global_ranks_.size());
    std::vector<std::optional<Heartbeat>> first(world), second(world);
    try {
      for (int p = 0; p < world; ++p) first[p] = Read(p);
      std::this_thread::sleep_for(std::chrono::milliseconds(diagnose_ms()));
      for (int p = 0; p < world; ++p) second[p] = Read(p);
    } catch (const std::exception& e) {
      return StoreGone(e.what());
    }
    std::string out;
    auto add = [&](const std::string& s) { out += (out.empty() ? "" : "; ") + s; };
    for (int p = 0; p < world; ++p) {
      if (p == rank_) continue;
      const std::string who = Name(p);
      if (!second[p]) {
        add(who + " never published a heartbeat");
      } else if (second[p]->state == "left") {
        add(who + " destroyed its communicator after starting " + std::to_string(second[p]->started) +
            " collectives (this rank is at #" + std::to_string(seq) + ")");
      } else if (first[p] && first[p]->beat == second[p]->beat) {
        add(who + " stopped responding (no heartbeat for over " + std::to_string(interval_ms_ * 2) +
            " ms: it exited, was killed or hangs)");
      } else if (second[p]->started < seq) {
        add(who + " is alive but has started only " + std::to_string(second[p]->started) +
            " collectives, this is #" + std::to_string(seq) +
            " (it stalled before posting it, or posts a different sequence)");
      }
    }
    return out;
  }

 private:
  using Clock = std::chrono::steady_clock;

  struct Heartbeat {
    long long beat = 0, started = 0;
    std::string state;
  };
  // What this rank last saw of a peer: its beat, and when that beat moved.
  struct Seen {
    long long beat = -1, started = 0;
    std::optional<Clock::time_point> moved;
  };

  static std::string Ago(Clock::time_point then) {
    const double s = std::chrono::duration<double>(Clock::now() - then).count();
    char text[32];
    std::snprintf(text, sizeof text, "%.1f s ago", s);
    return text;
  }

  // The message when the store cannot be read: that it is gone, since when
  // (as far as this rank's beats tell), and when each peer was last seen.
  std::string StoreGone(const std::string& error) const {
    std::lock_guard<std::mutex> lock(m_);
    std::string out = "the store is unreachable (" + error + "), so the peers' heartbeats cannot be read; ";
    out += last_store_ok_ ? "this rank last reached it " + Ago(*last_store_ok_) : "this rank never reached it";
    if (store_failing_since_) out += " and has failed to since " + Ago(*store_failing_since_);
    std::string peers;
    for (size_t p = 0; p < seen_.size(); ++p) {
      if (static_cast<int>(p) == rank_) continue;
      const Seen& s = seen_[p];
      peers += (peers.empty() ? "" : ", ") + Name(static_cast<int>(p)) +
               (s.moved ? " " + Ago(*s.moved) + " (at collective #" + std::to_string(s.started) + ")"
                        : std::string(" not yet"));
    }
    if (!peers.empty()) out += "; peers last seen alive: " + peers;
    return out;
  }

  // One beat's bookkeeping: the store was reached (or not), and peer `p`
  // read as `h`.
  void Observe(int p, const std::optional<Heartbeat>& h) {
    std::lock_guard<std::mutex> lock(m_);
    Seen& s = seen_[static_cast<size_t>(p)];
    if (h && h->beat != s.beat) {
      s.beat = h->beat;
      s.started = h->started;
      s.moved = Clock::now();
    }
  }

  std::string Key(int rank) const { return scope_ + "/heartbeat/" + std::to_string(rank); }
  std::string Name(int p) const {
    const int g = global_ranks_[p];
    return g == p ? "rank " + std::to_string(g)
                  : "rank " + std::to_string(g) + " (rank " + std::to_string(p) + " of this sub-communicator)";
  }

  std::optional<Heartbeat> Read(int p) const {
    std::optional<std::string> v = store_.TryGet(Key(p));
    if (!v) return std::nullopt;
    Heartbeat h;
    char state[16] = {0};
    if (std::sscanf(v->c_str(), "%lld %lld %15s", &h.beat, &h.started, state) != 3) return std::nullopt;
    h.state = state;
    return h;
  }

  void Beat(const char* state) {
    const long long beat = ++beats_;
    store_.Set(Key(rank_), std::to_string(beat) + " " +
                               std::to_string(started_.load(std::memory_order_relaxed)) + " " + state);
  }

  void Loop() {
    const int world = static_cast<int>(global_ranks_.size());
    int next_peer = rank_;
    std::unique_lock<std::mutex> lock(m_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(interval_ms_), [&] { return stopping_; })) {
      lock.unlock();
      bool reached = false;
      try {
        Beat("running");
        if (world > 1) {
          next_peer = (next_peer + 1) % world;
          if (next_peer == rank_) next_peer = (next_peer + 1) % world;
          Observe(next_peer, Read(next_peer));
        }
        reached = true;
      } catch (...) {  // a store hiccup: the next beat tries again
      }
      lock.lock();
      if (reached) {
        last_store_ok_ = Clock::now();
        store_failing_since_.reset();
      } else if (!store_failing_since_) {
        store_failing_since_ = Clock::now();
      }
    }
  }

  const KvStore store_;
  const std::string scope_;
  const int rank_;
  const std::vector<int> global_ranks_;
  const int64_t interval_ms_;
  std::atomic<int64_t> started_{0};
  long long beats_ = 0;
  mutable std::mutex m_;  // guards stopping_ and what the beats observed:
  std::vector<Seen> seen_ = std::vector<Seen>(global_ranks_.size());
  std::optional<Clock::time_point> last_store_ok_, store_failing_since_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_KV_STORE_HPP_
