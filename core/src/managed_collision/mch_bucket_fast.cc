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
// raises a holder's key, and the holder moves up to its file when its old
// file's turn comes. Evictions take the lowest file's holders in slot order
// (a file is sorted when its turn comes), so the holder evicted is always
// the lowest by (key, slot), whatever the files' history: a restored bucket
// decides exactly as the original. A heap of (key, slot) did the same at
// three times the cost: every pop walked 20 levels of a 1M-entry heap.
//
// Against the exact round (TorchRec's rule): the same admissions and
// evictions, candidates admitted in the same order (score, then window
// count, then id), except among residents with equal scores, where the
// lower slot goes first (the exact round: the lower raw id); and empty
// slots are filled before any holder is evicted (the exact round ranks them
// as count 0, last access 0, which every built-in policy places below any
// candidate). Which slot an admitted candidate takes differs: here it
// follows PlacementOrder(id) within a key (fast_sort.h), which like the
// exact round's order depends on the ids alone.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include <fmt/format.h>

#include "mch_bucket.h"
#include "fast_sort.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec::mc {

namespace {

// 2^52: late enough for any iteration, early enough that now - last_access
// stays exact in a double.
constexpr int64_t kKeyTime = int64_t{1} << 52;

}  // namespace

Status CheckKeysKeepOrder(const EvictionPolicy& policy) {
  // Entries of a run of 2^40 steps: last accesses in its first and last 33
  // steps and around every power of two, each at a few counts; scored at
  // the run's last step and at kKeyTime.
  const int64_t run_now = int64_t{1} << 40;
  std::vector<int64_t> lasts_probe;
  for (int64_t l = 0; l <= 32; ++l) {
    lasts_probe.push_back(l);
    lasts_probe.push_back(run_now - l);
  }
  for (int k = 6; k < 40; ++k) {
    for (int64_t d : {-1, 0, 1}) lasts_probe.push_back((int64_t{1} << k) + d);
  }
  std::vector<int64_t> counts, lasts;
  for (int64_t c : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{1000}, int64_t{1} << 31}) {
    for (int64_t l : lasts_probe) {
      counts.push_back(c);
      lasts.push_back(l);
    }
  }
  const std::vector<int64_t> windows(counts.size(), 0);
  auto score_at = [&](int64_t now, std::vector<double>& scores) -> Status {
    scores.assign(counts.size(), 0.0);
    if (Status st = policy.ScoreEntries(now, counts.size(), counts, lasts, windows, {}, 0, scores); !st.ok()) return st;
    return CheckScores(policy, scores);
  };
  std::vector<double> in_run, keys;
  if (Status st = score_at(run_now, in_run); !st.ok()) return st;
  if (Status st = score_at(kKeyTime, keys); !st.ok()) return st;
  std::vector<size_t> order(counts.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return in_run[a] < in_run[b]; });
  for (size_t k = 1; k < order.size(); ++k) {
    const size_t a = order[k - 1], b = order[k];
    const bool run_tie = in_run[a] == in_run[b], key_tie = keys[a] == keys[b];
    if (run_tie == key_tie && (key_tie || keys[a] < keys[b])) continue;
    auto entry = [&](size_t i) {
      return "(count " + std::to_string(counts[i]) + ", last access " + std::to_string(lasts[i]) + ")";
    };
    return Status(SR_FAILED_PRECONDITION,
                  fmt::format("{} declares incremental, but its scores at the incremental round's fixed time 2^52 do "
                              "not order entries as its scores within a run: {} and {} score {:.17g} and {:.17g} at "
                              "step 2^40, {:.17g} and {:.17g} at 2^52",
                              policy.Describe(), entry(a), entry(b), in_run[a], in_run[b], keys[a], keys[b]));
  }
  return Status::Ok();
}

MchBucket::CachedFile& MchBucket::CacheEntry(double key) {
  return file_cache_[Fmix64(std::bit_cast<uint64_t>(key)) % file_cache_.size()];
}

MchBucket::KeyBucket& MchBucket::FileOf(double key) {
  key += 0.0;  // -0.0 becomes +0.0: the map holds them as one key, the cache's hash of the bits would not
  CachedFile& cached = CacheEntry(key);
  if (cached.file == nullptr || cached.key != key) cached = {key, &by_key_[key]};
  return *cached.file;
}

void MchBucket::ClearFiles() {
  by_key_.clear();
  file_cache_.fill(CachedFile{});
}

void MchBucket::EraseLowestFile() {
  const double key = by_key_.begin()->first;  // filed through FileOf: never -0.0
  CachedFile& cached = CacheEntry(key);
  if (cached.key == key) cached = CachedFile{};
  by_key_.erase(by_key_.begin());
}

int64_t MchBucket::FiledBytes() const {
  int64_t bytes = 0;
  for (const auto& [key, file] : by_key_) bytes += static_cast<int64_t>(file.slots.capacity() * sizeof(int64_t)) + 64;
  return bytes;
}

void MchBucket::RebuildFreeSlots() {
  free_.clear();
  for (int64_t s = slots_ - 2; s >= 0; --s) {
    if (!slot_[static_cast<size_t>(s)].occupied) free_.push_back(s);
  }
}

StatusOr<RoundPlan> MchBucket::PlanIncrementalRound(const EvictionPolicy& policy, double threshold,
                                                    RoundPlan plan) const {
  if (threshold == -std::numeric_limits<double>::infinity()) {  // no filter: every candidate passes
    plan.passing.resize(candidate_ids_.size());
    std::iota(plan.passing.begin(), plan.passing.end(), int64_t{0});
  } else {
    for (size_t c = 0; c < candidate_ids_.size(); ++c) {
      if (static_cast<double>(candidate_count_[c]) > threshold) plan.passing.push_back(static_cast<int64_t>(c));
    }
  }
  // The entries to score: the holders whose count or last access changed
  // (every holder, after a restore), then the passing candidates.
  std::vector<int64_t> counts, lasts, windows;
  plan.rebuild_keys = !keys_ready_;
  if (plan.rebuild_keys) {
    for (int64_t s = 0; s + 1 < slots_; ++s) {
      const auto u = static_cast<size_t>(s);
      const SlotState& slot = slot_[u];
      if (!slot.occupied) continue;
      const bool seen = Updated(u, threshold);  // as plan.updated_* say
      plan.key_slots.push_back(s);
      counts.push_back(seen ? slot.count + slot.window_count : slot.count);
      lasts.push_back(seen ? slot.window_last : slot.last);
      windows.push_back(slot.window_count);
    }
  } else {
    plan.key_slots = plan.updated_slots;
    const size_t n = plan.updated_slots.size() + plan.passing.size();
    counts.reserve(n);
    lasts.reserve(n);
    counts.assign(plan.updated_count.begin(), plan.updated_count.end());
    lasts.assign(plan.updated_last.begin(), plan.updated_last.end());
    windows = std::move(plan.updated_window);  // only scored here
    windows.reserve(n);
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
  if (Status st = policy.ScoreEntries(kKeyTime, residents, counts, lasts, windows, {}, 0, scores); !st.ok()) return st;
  if (Status st = CheckScores(policy, scores); !st.ok()) return st;
  if (!plan.rebuild_keys) {
    for (size_t k = 0; k < residents; ++k) {
      if (scores[k] < plan.updated_key[k]) {
        return Status(SR_INTERNAL, policy.Describe() + " declares incremental, but an access lowered the score of "
                                   "slot " + std::to_string(plan.key_slots[k]) + " from " +
                                   std::to_string(plan.updated_key[k]) + " to " + std::to_string(scores[k]) +
                                   " (use eviction_mode=exact with this policy)");
      }
    }
  }
  plan.slot_keys.assign(scores.begin(), scores.begin() + static_cast<std::ptrdiff_t>(residents));
  plan.passing_keys.assign(scores.begin() + static_cast<std::ptrdiff_t>(residents), scores.end());
  return plan;
}

int64_t MchBucket::CommitIncremental(RoundPlan& plan, std::vector<int64_t>& evicted_rows) {
  constexpr size_t kAhead = 16;
  if (plan.rebuild_keys) {
    ApplyUpdates(plan);
    for (size_t k = 0; k < plan.key_slots.size(); ++k) slot_[static_cast<size_t>(plan.key_slots[k])].key = plan.slot_keys[k];
    ClearFiles();
    for (int64_t s = 0; s + 1 < slots_; ++s) {
      if (slot_[static_cast<size_t>(s)].occupied) FileOf(slot_[static_cast<size_t>(s)].key).Add(s);
    }
    keys_ready_ = true;
  } else {
    // One pass over the touched slots (prefetched) writes the updated
    // holders' metadata and keys and ends their window: the updated slots
    // are the touched ones in order, less those the filter dropped.
    size_t k = 0;
    for (size_t i = 0; i < touched_.size(); ++i) {
      if (i + kAhead < touched_.size()) __builtin_prefetch(&slot_[static_cast<size_t>(touched_[i + kAhead])], 1);
      SlotState& slot = slot_[static_cast<size_t>(touched_[i])];
      if (k < plan.updated_slots.size() && plan.updated_slots[k] == touched_[i]) {
        slot.count = plan.updated_count[k];
        slot.last = plan.updated_last[k];
        slot.key = plan.slot_keys[k];
        ++k;
      }
      slot.window_count = 0;
    }
    // The plan was made from this window (Stage, then Apply, nothing between).
    if (k != plan.updated_slots.size()) {
      AbortOnMisuse("MchBucket::CommitIncremental: a plan of another window (" +
                    std::to_string(plan.updated_slots.size() - k) + " updated slots not touched)");
    }
    touched_.clear();
  }
  // The candidates that may be admitted (-inf never is). Which of them get
  // in follows the exact round's order: key, then window count (descending),
  // then the lower id. Which slot each takes depends on the candidates
  // alone, not on the order they came in, so a sharded table decides as an
  // unsharded one.
  struct Ranked {
    double key;
    int64_t count, id, candidate, last;
  };
  // Filled field by field in place: a push_back of the struct built on the
  // stack read it back across two stores, a store-forwarding stall each
  // (a tenth of this function on bench mc --stream).
  std::vector<Ranked> best(plan.passing.size());
  size_t ranked = 0;
  for (size_t i = 0; i < plan.passing.size(); ++i) {
    if (plan.passing_keys[i] == -std::numeric_limits<double>::infinity()) continue;
    const auto c = static_cast<size_t>(plan.passing[i]);
    Ranked& r = best[ranked++];
    r.key = plan.passing_keys[i];
    r.count = candidate_count_[c];
    r.id = candidate_ids_[c];
    r.candidate = plan.passing[i];
    r.last = candidate_last_[c];
  }
  best.resize(ranked);
  auto better = [](const Ranked& a, const Ranked& b) {
    if (a.key != b.key) return a.key > b.key;
    return a.count != b.count ? a.count > b.count : a.id < b.id;
  };
  // At most `bound` candidates can get a slot: the empty slots, and the
  // holders filed under a key below the best candidate's (a holder filed
  // there may have risen since, so this is a bound). A round that admits a
  // few of many candidates (lru with most holders seen in the window)
  // orders only the best `bound` of them.
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
  // Grouped by key, best first, each group in an order of the ids alone
  // (PlacementOrder, fast_sort.h; ~2 ms for 200k candidates where std::sort
  // by the tie order took 13). The tie order matters only in a group that does not all
  // fit, which is ordered on its own below.
  OrderByKeyThenPlacement(best, [](const Ranked& r) { return r.key; }, [](const Ranked& r) { return r.id; });
  // 1. Each admitted candidate's slot: an empty one, or the lowest holder's
  // (the files' walk reads keys, prefetched in file order).
  int64_t evictions = 0;
  KeyBucket* raised = nullptr;  // the file holders whose key rose went to last (lru: a few keys a round)
  double raised_key = 0;
  // The lowest holder whose key is below `key`: the first of the lowest
  // file, in slot order, that is still filed at its key (a holder whose key
  // rose moves up). -1 when there is none (no file left: every holder came
  // in this round).
  auto lowest_below = [&](double key) -> int64_t {
    while (!by_key_.empty()) {
      auto low = by_key_.begin();
      KeyBucket& file = low->second;
      if (!(key > low->first)) return -1;  // residents win ties
      if (!file.sorted) {
        SortUnique(file.slots.begin() + static_cast<std::ptrdiff_t>(file.head), file.slots.end(), 0, slots_,
                   sort_bits_);  // a holder is filed once: nothing is dropped
        file.sorted = true;
      }
      if (file.head + kAhead < file.slots.size()) {
        __builtin_prefetch(&slot_[static_cast<size_t>(file.slots[file.head + kAhead])]);
      }
      const int64_t s = file.slots[file.head++];
      const double now_key = slot_[static_cast<size_t>(s)].key;
      int64_t found = -1;
      if (now_key == low->first) {
        found = s;
      } else {
        if (raised == nullptr || now_key != raised_key) raised = &FileOf(now_key), raised_key = now_key;
        raised->Add(s);
      }
      if (file.head == file.slots.size()) {
        if (raised == &file) raised = nullptr;
        EraseLowestFile();
      }
      if (found >= 0) return found;
    }
    return -1;
  };
  // 2. Each newcomer takes its slot as soon as the slot is found, while
  // the holder's line is in the cache from reading its key (a pass of its
  // own afterwards missed it again): the holder's id is read on the way
  // out, the newcomer is written and filed by key (in slot order within a
  // key, as the files are read). Filing newcomers while the files are
  // walked is safe: a newcomer's key is above every key still searched
  // below (groups come best first, and residents win ties).
  KeyBucket* filed = nullptr;
  double filed_key = 0;
  std::vector<int64_t> gone, new_ids, new_slots;
  gone.reserve(best.size());
  new_ids.reserve(best.size());
  new_slots.reserve(best.size());
  plan.replacements.reserve(best.size());
  auto admit = [&](int64_t slot, const Ranked& r) {
    SlotState& state = slot_[static_cast<size_t>(slot)];
    if (state.occupied) {
      gone.push_back(state.id);
      evicted_rows.push_back(first_row_ + slot);
    }
    state.id = r.id;
    state.occupied = true;
    state.count = r.count;
    state.last = r.last;
    state.key = r.key;
    plan.replacements.emplace_back(slot, r.candidate);
    new_ids.push_back(r.id);
    new_slots.push_back(slot);
    if (filed == nullptr || r.key != filed_key) filed = &FileOf(r.key), filed_key = r.key;  // lru: a few keys a round
    filed->Add(slot);
  };
  // A group (one key) takes slots until it is placed or none is left below
  // its key; then no lower group can get one either. Its k-th slot goes to
  // its k-th candidate; when only some fit (the last group), they are
  // rewritten below with the best of the group by the tie order.
  for (size_t g = 0; g < best.size();) {
    const double key = best[g].key;
    size_t end = g + 1;
    while (end < best.size() && best[end].key == key) ++end;
    const size_t placed_before = new_slots.size();
    size_t got = 0;
    while (got < end - g) {
      int64_t slot = -1;
      if (!free_.empty()) {
        if (free_.size() > kAhead) {
          __builtin_prefetch(&slot_[static_cast<size_t>(free_[free_.size() - 1 - kAhead])], 1);
        }
        slot = free_.back();
        free_.pop_back();
      } else {
        slot = lowest_below(key);
        if (slot < 0) break;
        ++evictions;
      }
      admit(slot, best[g + got]);
      ++got;
    }
    if (got == end - g) {
      g = end;
      continue;
    }
    // The best `got` of the group by the tie order, in the group's order again.
    const auto first = best.begin() + static_cast<std::ptrdiff_t>(g);
    const auto admitted = first + static_cast<std::ptrdiff_t>(got);
    std::nth_element(first, admitted, best.begin() + static_cast<std::ptrdiff_t>(end), better);
    std::sort(first, admitted,
              [](const Ranked& a, const Ranked& b) { return PlacementOrder(a.id) < PlacementOrder(b.id); });
    for (size_t k = 0; k < got; ++k) {
      const size_t at = placed_before + k;
      const Ranked& r = best[g + k];
      SlotState& state = slot_[static_cast<size_t>(new_slots[at])];
      state.id = r.id;
      state.count = r.count;
      state.last = r.last;
      new_ids[at] = r.id;
      plan.replacements[at].second = r.candidate;
    }
    break;
  }
  // 3. The evicted ids leave the index and the newcomers enter it.
  index_.ReplaceMany(gone, new_ids, new_slots.data());
  ClearWindow();
  return evictions;
}

}  // namespace shardrec::mc
