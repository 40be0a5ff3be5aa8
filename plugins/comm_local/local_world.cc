// LocalWorld: joining, leaving and the phase barrier (see local_world.h).
#include "local_world.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

namespace shardrec::local_comm {

namespace {
std::mutex& RegistryMutex() {
  static std::mutex m;
  return m;
}
// Worlds by name; a world lives while one of its communicators does, so a
// name is free again once the job that used it is gone.
std::map<std::string, std::weak_ptr<LocalWorld>>& Registry() {
  static std::map<std::string, std::weak_ptr<LocalWorld>> worlds;
  return worlds;
}

std::string RankList(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}
}  // namespace

LocalWorld::LocalWorld(std::string name, int size)
    : name_(std::move(name)),
      size_(size),
      joined_(size),
      left_(size),
      phase_(new std::atomic<int64_t>[size]),
      spin_(size <= static_cast<int>(std::thread::hardware_concurrency())),
      slots_(size) {
  for (int r = 0; r < size; ++r) phase_[r].store(0);
}

std::shared_ptr<LocalWorld> LocalWorld::Join(const std::string& name, int size, int rank, int64_t timeout_ms) {
  std::shared_ptr<LocalWorld> w;
  {
    std::lock_guard<std::mutex> lock(RegistryMutex());
    auto it = Registry().find(name);
    if (it != Registry().end()) w = it->second.lock();
    if (w == nullptr) {
      w.reset(new LocalWorld(name, size));
      Registry()[name] = w;
    }
  }
  std::unique_lock<std::mutex> lock(w->m_);
  if (w->size_ != size) {
    throw sdk::InvalidArgument("rank " + std::to_string(rank) + " joins '" + name + "' as a world of " +
                               std::to_string(size) + " ranks, but ranks already there said " +
                               std::to_string(w->size_));
  }
  if (w->joined_[rank]) {
    throw sdk::Error(SR_ALREADY_EXISTS, "rank " + std::to_string(rank) + " joined '" + name +
                                            "' twice: another job uses the same rendezvous name and prefix");
  }
  w->joined_[rank] = true;
  if (++w->joined_count_ == size) w->cv_.notify_all();  // the last to join wakes the others
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  auto all_joined = [&] { return w->joined_count_ == w->size_; };
  if (!w->cv_.wait_until(lock, deadline, all_joined)) {
    std::vector<int> missing;
    for (int r = 0; r < size; ++r) {
      if (!w->joined_[r]) missing.push_back(r);
    }
    w->joined_[rank] = false;  // leave the name usable for a retry
    --w->joined_count_;
    throw sdk::Error(SR_DEADLINE_EXCEEDED, "rank(s) " + RankList(missing) + " did not join local:" + name +
                                               " within " + std::to_string(timeout_ms) + " ms");
  }
  return w;
}

void LocalWorld::Leave(int rank) {
  {
    std::lock_guard<std::mutex> lock(m_);
    left_[rank] = true;
  }
  cv_.notify_all();
}

void LocalWorld::Arrive(int rank, int64_t phase, int64_t seq, const char* what, int64_t timeout_ms,
                        const std::vector<int>& global_ranks) {
  {
    std::lock_guard<std::mutex> lock(m_);
    phase_[rank].store(phase, std::memory_order_release);
    auto it = std::find_if(arrivals_.begin(), arrivals_.end(), [&](const auto& a) { return a.first == phase; });
    if (it == arrivals_.end()) it = arrivals_.insert(arrivals_.end(), {phase, 0});
    if (++it->second == size_) {
      // The last to arrive: the phase is complete; wake everyone once.
      arrivals_.erase(it);
      if (phase > complete_.load()) complete_.store(phase, std::memory_order_release);
      cv_.notify_all();
      return;
    }
  }
  auto everyone_there = [&] { return complete_.load(std::memory_order_acquire) >= phase; };
  if (spin_) {
    // Peers on other cores usually arrive within microseconds; a sleep and
    // wake-up would cost tens of them.
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(30);
    do {
      if (everyone_there()) return;
    } while (std::chrono::steady_clock::now() < until);
  }
  std::unique_lock<std::mutex> lock(m_);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (;;) {
    if (everyone_there()) return;
    // Woken without the phase complete: a peer left (Leave wakes everyone),
    // or the time is up. Scanning the peers is for these rare wake-ups only.
    for (int q = 0; q < size_; ++q) {
      if (left_[q] && phase_[q].load() < phase) {
        throw sdk::Error(SR_UNAVAILABLE, "rank " + std::to_string(global_ranks[q]) +
                                             " left the communicator (destroyed it, or its thread ended) before "
                                             "collective #" + std::to_string(seq) + " (" + what + ")");
      }
    }
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
      if (everyone_there()) return;
      std::vector<int> late;
      int behind = -1;
      for (int q = 0; q < size_; ++q) {
        if (phase_[q].load() < phase) {
          late.push_back(global_ranks[q]);
          if (behind < 0) behind = q;
        }
      }
      if (behind < 0) return;
      const int64_t at = phase_[behind].load() / kPhasesPerCollective;
      throw sdk::Error(SR_DEADLINE_EXCEEDED,
                       "rank(s) " + RankList(late) + " did not reach collective #" + std::to_string(seq) + " (" +
                           what + ") within " + std::to_string(timeout_ms) + " ms; rank " +
                           std::to_string(global_ranks[behind]) + " is at collective #" + std::to_string(at));
    }
  }
}

std::string LocalWorld::DescribeLaggards(int64_t seq, const std::vector<int>& global_ranks) {
  std::lock_guard<std::mutex> lock(m_);
  std::string out;
  for (int q = 0; q < size_; ++q) {
    const int64_t at = phase_[q].load() / kPhasesPerCollective;
    if (at >= seq) continue;
    out += (out.empty() ? "" : "; ") + std::string("rank ") + std::to_string(global_ranks[q]) +
           (left_[q] ? " left the communicator" : " has not posted it") + " (it is at collective #" +
           std::to_string(at) + ")";
  }
  return out;
}

}  // namespace shardrec::local_comm
