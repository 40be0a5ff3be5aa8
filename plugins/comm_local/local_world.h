// The meeting place of the `local` comm backend: the ranks of one
// communicator are threads of one process, and a LocalWorld is what they
// share. Each collective is a few phases; in every phase a rank publishes
// where it is, then waits for every peer to get there, so a rank may read a
// peer's buffers exactly between two phases and nothing is copied twice.
// A peer that never arrives is named after the timeout; a peer that
// destroyed its communicator is named at once.
//
// Cost per phase is O(world) in total, not per rank: arrivals are counted,
// and only the last to arrive wakes the others (a wake-up per arrival, each
// waiter scanning every peer, made 1000 ranks cost O(world^3) per phase).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "shardrec/sdk/collective.hpp"

namespace shardrec::local_comm {

class LocalWorld {
 public:
  // What a rank shows its peers during a collective.
  struct Slot {
    const sdk::Collective* op = nullptr;
    int32_t color = 0, key = 0;  // split
  };

  // Joins world `name` of `size` ranks as `rank` and waits until every rank
  // joined. Two joins of one rank (another job under the same name) and a
  // size that disagrees are errors.
  static std::shared_ptr<LocalWorld> Join(const std::string& name, int size, int rank, int64_t timeout_ms);

  // This rank is gone (its communicator was destroyed): peers waiting for it
  // fail at once.
  void Leave(int rank);

  const std::string& name() const { return name_; }
  int size() const { return size_; }
  Slot& slot(int rank) { return slots_[rank]; }

  // Marks `rank` as having reached `phase` (phases only grow) and waits until
  // every rank has. `seq` and `what` name the collective in errors;
  // `global_ranks` names the peers.
  void Arrive(int rank, int64_t phase, int64_t seq, const char* what, int64_t timeout_ms,
              const std::vector<int>& global_ranks);

  // "rank 3 has not posted collective #5 (it is at #4)" for every rank
  // behind `seq`; "" when none is.
  std::string DescribeLaggards(int64_t seq, const std::vector<int>& global_ranks);

  static constexpr int64_t kPhasesPerCollective = 4;

 private:
  LocalWorld(std::string name, int size);

  const std::string name_;
  const int size_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<bool> joined_, left_;
  int joined_count_ = 0;
  // Per rank, the last phase it reached: written under m_, read by the
  // error paths (who is behind).
  std::unique_ptr<std::atomic<int64_t>[]> phase_;
  // How many ranks reached each phase that is not complete yet (all ranks
  // pass the same phases in the same order), and the last complete phase:
  // written under m_, read without it by the spin in Arrive.
  std::vector<std::pair<int64_t, int>> arrivals_;
  std::atomic<int64_t> complete_{0};
  const bool spin_;  // every rank can have a core: spin briefly before sleeping
  std::vector<Slot> slots_;
};

}  // namespace shardrec::local_comm
