// The incremental eviction round (EvictionMode::kFast, mch_bucket.h): a
// round costs in proportion to the slots the window saw, the candidates and
// the residents it evicts, not to the bucket's size.
//
// It relies on the policy's `incremental` promise: the order of two entries
// that are not accessed never changes as `now` advances, and an access never
// lowers a score. So every holder keeps a key, its score at one fixed time
// (kKeyTime), computed when it is admitted or accessed; keys of different
// rounds compare as scores at the current time would.
//
// The holders are filed by key (lru: one file per last-access step; lfu: per
// count), each exactly once, under its key or a lower one: an access only
// raises key_[slot], and the holder moves up to its file when its old
// file's turn comes. Evictions take the lowest file's holders in slot order
// (a file is sorted when its turn comes), so the holder evicted is always
// the lowest by (key, slot), whatever the files' history: a restored bucket
// decides exactly as the original. A heap of (key, slot) did the same at
// three times the cost: every pop walked 20 levels of a 1M-entry heap.
//
// Against the exact round (TorchRec's rule): the same admissions and
// evictions, candidates in the same order (score, then window count, then
// id), except among residents with equal scores, where the lower slot goes
// first (the exact round: the lower raw id); and empty slots are filled
// before any holder is evicted (the exact round ranks them as count 0, last
// access 0, which every built-in policy places below any candidate).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "mch_bucket.h"
#include "shardrec/core/dl_view.h"

namespace shardrec::mc {

namespace {

// 2^52: late enough for any iteration, early enough that now - last_access
// stays exact in a double.
constexpr int64_t kKeyTime = int64_t{1} << 52;

}  // namespace

int64_t MchBucket::FiledBytes() const {
  int64_t bytes = 0;
  for (const auto& [key, file] : by_key_) bytes += static_cast<int64_t>(file.slots.capacity() * sizeof(int64_t)) + 64;
  return bytes;
}

void MchBucket::RebuildFreeSlots() {
  free_.clear();
  for (int64_t s = slots_ - 2; s >= 0; --s) {
    if (!occupied_[static_cast<size_t>(s)]) free_.push_back(s);
  }
}

StatusOr<RoundPlan> MchBucket::PlanIncrementalRound(const EvictionPolicy& policy, double threshold,
                                                    RoundPlan plan) const {
  for (size_t c = 0; c < candidate_ids_.size(); ++c) {
    if (static_cast<double>(candidate_count_[c]) > threshold) plan.passing.push_back(static_cast<int64_t>(c));
  }
  // The entries to score: the holders whose count or last access changed
  // (every holder, after a restore), then the passing candidates.
  std::vector<int64_t> counts, lasts, windows;
  plan.rebuild_keys = !keys_ready_;
  if (plan.rebuild_keys) {
    std::vector<int64_t> count = count_, last = last_;
    for (size_t k = 0; k < plan.updated_slots.size(); ++k) {
      const auto s = static_cast<size_t>(plan.updated_slots[k]);
      count[s] = plan.updated_count[k];
      last[s] = plan.updated_last[k];
    }
    for (int64_t s = 0; s + 1 < slots_; ++s) {
      const auto u = static_cast<size_t>(s);
      if (!occupied_[u]) continue;
      plan.key_slots.push_back(s);
      counts.push_back(count[u]);
      lasts.push_back(last[u]);
      windows.push_back(window_count_[u]);
    }
  } else {
    plan.key_slots = plan.updated_slots;
    counts = plan.updated_count;
    lasts = plan.updated_last;
    for (int64_t s : plan.updated_slots) windows.push_back(window_count_[static_cast<size_t>(s)]);
  }
  for (int64_t c : plan.passing) {
    const auto u = static_cast<size_t>(c);
    counts.push_back(candidate_count_[u]);
    lasts.push_back(candidate_last_[u]);
    windows.push_back(candidate_count_[u]);
  }
  const size_t residents = plan.key_slots.size(), n = counts.size();
  if (n == 0) return plan;
  std::vector<double> scores(n, 0.0);
  const auto n64 = static_cast<int64_t>(n);
  DLView counts_view(counts.data(), {n64}), lasts_view(lasts.data(), {n64}), windows_view(windows.data(), {n64}),
      scores_view(scores.data(), {n64});
  sr_eviction_score_args args{};
  args.struct_size = SR_STRUCT_SIZE(sr_eviction_score_args, scores);
  args.now = kKeyTime;
  args.num_resident = residents;
  args.num_candidates = plan.passing.size();
  args.counts = counts_view.get();
  args.last_access = lasts_view.get();
  args.window_counts = windows_view.get();
  args.metadata = nullptr;
  args.scores = scores_view.get();
  if (Status st = policy.Score(args); !st.ok()) return st;
  if (Status st = CheckScores(policy, scores); !st.ok()) return st;
  if (!plan.rebuild_keys) {
    for (size_t k = 0; k < residents; ++k) {
      const auto s = static_cast<size_t>(plan.key_slots[k]);
      if (scores[k] < key_[s]) {
        return Status(SR_INTERNAL, policy.Describe() + " declares incremental, but an access lowered the score of "
                                   "slot " + std::to_string(s) + " from " + std::to_string(key_[s]) + " to " +
                                   std::to_string(scores[k]) + " (use eviction_mode=exact with this policy)");
      }
    }
  }
  plan.slot_keys.assign(scores.begin(), scores.begin() + static_cast<std::ptrdiff_t>(residents));
  plan.passing_keys.assign(scores.begin() + static_cast<std::ptrdiff_t>(residents), scores.end());
  return plan;
}

void MchBucket::Admit(int64_t slot, int64_t candidate, double key) {
  const auto s = static_cast<size_t>(slot), c = static_cast<size_t>(candidate);
  ids_[s] = candidate_ids_[c];
  occupied_[s] = 1;
  index_.Insert(ids_[s], slot);
  count_[s] = candidate_count_[c];
  last_[s] = candidate_last_[c];
  key_[s] = key;
}

int64_t MchBucket::CommitIncremental(RoundPlan& plan, std::vector<int64_t>& evicted_rows) {
  ApplyUpdates(plan);
  for (size_t k = 0; k < plan.key_slots.size(); ++k) key_[static_cast<size_t>(plan.key_slots[k])] = plan.slot_keys[k];
  if (plan.rebuild_keys) {
    by_key_.clear();
    for (int64_t s = 0; s + 1 < slots_; ++s) {
      if (occupied_[static_cast<size_t>(s)]) by_key_[key_[static_cast<size_t>(s)]].Add(s);
    }
    keys_ready_ = true;
  }
  // Candidates best first: key, then the exact round's tie order (window
  // count, descending, then the lower id); -inf is never admitted.
  struct Ranked {
    double key;
    int64_t count, id, candidate;
  };
  std::vector<Ranked> best;
  best.reserve(plan.passing.size());
  for (size_t i = 0; i < plan.passing.size(); ++i) {
    if (plan.passing_keys[i] == -std::numeric_limits<double>::infinity()) continue;
    const auto c = static_cast<size_t>(plan.passing[i]);
    best.push_back({plan.passing_keys[i], candidate_count_[c], candidate_ids_[c], plan.passing[i]});
  }
  auto better = [](const Ranked& a, const Ranked& b) {
    if (a.key != b.key) return a.key > b.key;
    return a.count != b.count ? a.count > b.count : a.id < b.id;
  };
  // At most `bound` candidates can get a slot: the empty slots, and the
  // holders filed under a key below the best candidate's (a holder filed
  // there may have risen since, so this is a bound). A round that admits a
  // few of many candidates (lru with most holders seen in the window)
  // sorts only the best `bound` of them.
  if (!best.empty()) {
    const double top = std::max_element(best.begin(), best.end(), [](const Ranked& a, const Ranked& b) {
                         return a.key < b.key;
                       })->key;
    size_t bound = free_.size();
    for (const auto& [key, file] : by_key_) {
      if (!(key < top) || bound >= best.size()) break;
      bound += file.slots.size() - file.head;
    }
    if (bound < best.size()) {
      std::nth_element(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(bound), best.end(), better);
      best.resize(bound);
    }
  }
  std::sort(best.begin(), best.end(), better);
  // 1. Each admitted candidate's slot: an empty one, or the lowest holder's.
  // Only keys are read here; the slots' other fields and the id index are
  // written in the passes after it, which prefetch ahead.
  std::vector<std::pair<int64_t, Ranked>> taken;  // (slot, the candidate)
  std::vector<int64_t> victims;
  constexpr size_t kAhead = 16;
  for (const Ranked& next : best) {
    const double key = next.key;
    int64_t slot = -1;
    if (!free_.empty()) {
      slot = free_.back();
      free_.pop_back();
    } else {
      // The lowest holder: the first of the lowest file, in slot order, that
      // is still filed at its key (a holder whose key rose moves up). No
      // file left: every holder came in this round.
      while (slot < 0 && !by_key_.empty()) {
        auto low = by_key_.begin();
        KeyBucket& file = low->second;
        if (!(key > low->first)) break;  // residents win ties, and no later candidate scores higher
        if (!file.sorted) {
          std::sort(file.slots.begin() + static_cast<std::ptrdiff_t>(file.head), file.slots.end());
          file.sorted = true;
        }
        if (file.head + kAhead < file.slots.size()) __builtin_prefetch(&key_[static_cast<size_t>(file.slots[file.head + kAhead])]);
        const int64_t s = file.slots[file.head++];
        const double now_key = key_[static_cast<size_t>(s)];
        if (now_key == low->first) {
          slot = s;
        } else {
          by_key_[now_key].Add(s);
        }
        if (file.head == file.slots.size()) by_key_.erase(low);
      }
      if (slot < 0) break;
      victims.push_back(slot);
    }
    taken.emplace_back(slot, next);
  }
  // 2. The evicted ids leave the index.
  for (size_t k = 0; k < victims.size(); ++k) {
    if (k + 2 * kAhead < victims.size()) __builtin_prefetch(&ids_[static_cast<size_t>(victims[k + 2 * kAhead])]);
    if (k + kAhead < victims.size()) index_.Prefetch(ids_[static_cast<size_t>(victims[k + kAhead])]);
    index_.Erase(ids_[static_cast<size_t>(victims[k])]);
    evicted_rows.push_back(first_row_ + victims[k]);
  }
  // 3. The newcomers take their slots, and are filed by key (in slot order
  // within a key, as the files are read).
  KeyBucket* filed = nullptr;
  double filed_key = 0;
  for (size_t k = 0; k < taken.size(); ++k) {
    if (k + kAhead < taken.size()) {
      const auto& [ahead, candidate] = taken[k + kAhead];
      index_.Prefetch(candidate.id);
      const auto u = static_cast<size_t>(ahead);
      __builtin_prefetch(&ids_[u], 1);
      __builtin_prefetch(&count_[u], 1);
      __builtin_prefetch(&last_[u], 1);
      __builtin_prefetch(&key_[u], 1);
      __builtin_prefetch(&occupied_[u], 1);
    }
    const auto& [slot, r] = taken[k];
    plan.replacements.emplace_back(slot, r.candidate);
    Admit(slot, r.candidate, r.key);
    if (filed == nullptr || r.key != filed_key) filed = &by_key_[r.key], filed_key = r.key;  // lru: a few keys a round
    filed->Add(slot);
  }
  const auto evictions = static_cast<int64_t>(victims.size());
  ClearWindow();
  return evictions;
}

}  // namespace shardrec::mc
