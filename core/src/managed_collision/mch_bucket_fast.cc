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
#include <memory>
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
  // The round scores the holders it updated and the window's candidates in
  // calls of their own (PlanIncrementalRound): each entry, alone in its
  // role, must score as it does among the others.
  for (const bool as_candidates : {false, true}) {
    std::vector<double> among(counts.size(), 0.0), alone(1, 0.0);
    const size_t residents = as_candidates ? 0 : counts.size();
    if (Status st = policy.ScoreEntries(kKeyTime, residents, counts, lasts, windows, {}, 0, among); !st.ok()) return st;
    for (size_t i = 0; i < counts.size(); ++i) {
      const std::span<const int64_t> c(&counts[i], 1), l(&lasts[i], 1), w(&windows[i], 1);
      if (Status st = policy.ScoreEntries(kKeyTime, as_candidates ? 0 : 1, c, l, w, {}, 0, alone); !st.ok()) return st;
      if (alone[0] == among[i] || (std::isnan(alone[0]) && std::isnan(among[i]))) continue;
      return Status(SR_FAILED_PRECONDITION,
                    fmt::format("{} declares incremental, but scores {} (count {}, last access {}) {:.17g} alone and "
                                "{:.17g} among {} others: the incremental round scores holders and candidates in "
                                "calls of their own",
                                policy.Describe(), as_candidates ? "a candidate" : "a holder", counts[i], lasts[i],
                                alone[0], among[i], counts.size() - 1));
    }
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
  for (const auto& [key, file] : by_key_) bytes += static_cast<int64_t>(file.capacity * sizeof(int64_t)) + 64;
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
  const bool all_pass = threshold == -std::numeric_limits<double>::infinity();  // no filter
  if (all_pass) {
    plan.passing.resize(candidates_.size());
    std::iota(plan.passing.begin(), plan.passing.end(), int64_t{0});
  } else {
    for (size_t c = 0; c < candidates_.size(); ++c) {
      if (static_cast<double>(candidates_[c].count) > threshold) plan.passing.push_back(static_cast<int64_t>(c));
    }
  }
  // Two calls: the holders whose count or last access changed (every
  // holder, after a restore), scored in the arrays the plan's pass made,
  // then the passing candidates. (One call over both copied ~250,000
  // entries into three new arrays a round on bench mc --stream.) The
  // incremental promise makes a score depend on its entry alone.
  plan.rebuild_keys = !keys_ready_;
  std::vector<int64_t> counts, lasts, windows;  // the holders' when rebuilt, then the candidates'
  std::span<const int64_t> res_counts = plan.updated_count, res_lasts = plan.updated_last,
                           res_windows = plan.updated_window;
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
    res_counts = counts, res_lasts = lasts, res_windows = windows;
  } else {
    plan.key_slots = plan.updated_slots;
  }
  plan.slot_keys.assign(plan.key_slots.size(), 0.0);
  if (!plan.slot_keys.empty()) {
    if (Status st = policy.ScoreEntries(kKeyTime, plan.slot_keys.size(), res_counts, res_lasts, res_windows, {}, 0,
                                        plan.slot_keys);
        !st.ok()) {
      return st;
    }
    if (Status st = CheckScores(policy, plan.slot_keys); !st.ok()) return st;
  }
  if (!plan.rebuild_keys) {
    for (size_t k = 0; k < plan.slot_keys.size(); ++k) {
      if (plan.slot_keys[k] < plan.updated_key[k]) {
        return Status(SR_INTERNAL, policy.Describe() + " declares incremental, but an access lowered the score of "
                                   "slot " + std::to_string(plan.key_slots[k]) + " from " +
                                   std::to_string(plan.updated_key[k]) + " to " + std::to_string(plan.slot_keys[k]) +
                                   " (use eviction_mode=exact with this policy)");
      }
    }
  }
  plan.updated_window.clear();  // only scored
  plan.passing_keys.assign(plan.passing.size(), 0.0);
  if (plan.passing.empty()) return plan;
  // The candidates' counts and last accesses, side by side as the ABI wants them.
  counts.resize(plan.passing.size());
  lasts.resize(plan.passing.size());
  for (size_t i = 0; i < plan.passing.size(); ++i) {
    const Candidate& cand = candidates_[static_cast<size_t>(plan.passing[i])];
    counts[i] = cand.count;
    lasts[i] = cand.last;
  }
  // A candidate's window count is its count.
  if (Status st = policy.ScoreEntries(kKeyTime, 0, counts, lasts, counts, {}, 0, plan.passing_keys);
      !st.ok()) {
    return st;
  }
  if (Status st = CheckScores(policy, plan.passing_keys); !st.ok()) return st;
  return plan;
}

void MchBucket::KeepBestCandidates(std::vector<uint32_t>& order, size_t bound) const {
  // By the tie order: key, then window count (descending), then the lower
  // id. The keys are few (lru: a step's, lfu: a count's), so the key that
  // straddles the bound is found from a count per key, and only its group
  // is ordered by the rest of the tie order, as compact records: an
  // nth_element over all of them, comparing records read at random, took
  // 40% of bench mc's round alone (2M candidates, 123k admitted).
  auto better = [&](uint32_t a, uint32_t b) { return Better(a, b); };
  constexpr size_t kMaxDistinct = 255;
  std::vector<std::pair<double, size_t>> keys;  // (key, candidates under it)
  size_t last = 0;
  for (uint32_t c : order) {
    const double key = candidates_[c].key;
    if (last >= keys.size() || keys[last].first != key) {
      last = static_cast<size_t>(std::find_if(keys.begin(), keys.end(), [&](const auto& k) { return k.first == key; }) -
                                 keys.begin());
      if (last == keys.size()) {
        if (keys.size() == kMaxDistinct) {
          std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(bound), order.end(), better);
          order.resize(bound);
          return;
        }
        keys.emplace_back(key, 0);
      }
    }
    ++keys[last].second;
  }
  std::sort(keys.begin(), keys.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  size_t above = 0, k = 0;
  while (above + keys[k].second < bound) above += keys[k++].second;  // bound < order.size(): k stays in range
  const double straddling = keys[k].first;
  struct Tie {
    int64_t count, id;
    uint32_t c;
  };
  std::vector<Tie> tie;
  tie.reserve(keys[k].second);
  size_t kept = 0;
  for (uint32_t c : order) {
    const Candidate& cand = candidates_[c];
    if (cand.key > straddling) {
      order[kept++] = c;
    } else if (cand.key == straddling) {
      tie.push_back({cand.count, cand.id, c});
    }
  }
  const size_t need = bound - above;
  std::nth_element(tie.begin(), tie.begin() + static_cast<std::ptrdiff_t>(need), tie.end(),
                   [](const Tie& a, const Tie& b) { return a.count != b.count ? a.count > b.count : a.id < b.id; });
  for (size_t j = 0; j < need; ++j) order[kept++] = tie[j].c;
  order.resize(kept);
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
  // unsharded one. Each passing candidate's key goes into its record, so
  // the walk below reads one line per candidate; the order moves their
  // indices only (a window holds fewer than 2^32 candidates: 128 GiB of
  // records and index before that).
  std::vector<uint32_t> order;
  order.reserve(plan.passing.size());
  double top = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < plan.passing.size(); ++i) {
    const double key = plan.passing_keys[i];
    if (key == -std::numeric_limits<double>::infinity()) continue;
    const auto c = static_cast<uint32_t>(plan.passing[i]);
    candidates_[c].key = key;
    top = std::max(top, key);
    order.push_back(c);
  }
  // At most `bound` candidates can get a slot: the empty slots, and the
  // holders filed under a key below the best candidate's (a holder filed
  // there may have risen since, so this is a bound). A round that admits a
  // few of many candidates (lru with most holders seen in the window)
  // orders only the best `bound` of them.
  if (!order.empty()) {
    size_t bound = free_.size();
    for (const auto& [key, file] : by_key_) {
      if (!(key < top) || bound >= order.size()) break;
      bound += file.size - file.head;
    }
    if (bound < order.size()) KeepBestCandidates(order, bound);
  }
  // Grouped by key, best first, each group in an order of the ids alone
  // (PlacementOrder, fast_sort.h; ~2 ms for 200k candidates where std::sort
  // by the tie order took 13). The tie order matters only in a group that
  // does not all fit, which is ordered on its own below.
  OrderByKeyThenPlacement(order, [&](uint32_t c) { return candidates_[c].key; },
                          [&](uint32_t c) { return candidates_[c].id; });
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
        SortUnique(file.begin(), file.end(), 0, slots_, sort_bits_);  // a holder is filed once: nothing is dropped
        file.sorted = true;
      }
      if (file.head + kAhead < file.size) {
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
      if (file.head == file.size) {
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
  // The evicted ids, written by index (GCC 12 left this push_back out of
  // line, ~25 instructions an eviction).
  const auto gone = std::make_unique_for_overwrite<int64_t[]>(order.size());
  size_t gone_count = 0;
  std::vector<int64_t> new_ids, new_slots;
  new_ids.reserve(order.size());
  new_slots.reserve(order.size());
  plan.replacements.reserve(order.size());
  // Room for this round's evictions at once: the module's list starts
  // empty after each TakeEvictedRows (which moves it out), and grown by
  // push_back it was copied ~18 times a round. Geometric, as push_back's:
  // the module's buckets append to the same list in turn.
  if (const size_t need = evicted_rows.size() + order.size(); need > evicted_rows.capacity()) {
    evicted_rows.reserve(std::max(need, 2 * evicted_rows.capacity()));
  }
  auto admit = [&](int64_t slot, uint32_t c, const Candidate& cand) {
    SlotState& state = slot_[static_cast<size_t>(slot)];
    if (state.occupied) {
      gone[gone_count++] = state.id;
      evicted_rows.push_back(first_row_ + slot);
    }
    state.id = cand.id;
    state.occupied = true;
    state.count = cand.count;
    state.last = cand.last;
    state.key = cand.key;
    plan.replacements.emplace_back(slot, static_cast<int64_t>(c));
    new_ids.push_back(cand.id);
    new_slots.push_back(slot);
    if (filed == nullptr || cand.key != filed_key) filed = &FileOf(cand.key), filed_key = cand.key;  // lru: a few keys a round
    filed->Add(slot);
  };
  // The records in that order, gathered in a pass of their own: read at
  // random in the walk instead, each cost ~18 ns more on bench mc --stream
  // (the walk's own random reads, the holders' lines, leave them less room
  // in flight).
  std::vector<Candidate> ordered;
  ordered.reserve(order.size());  // (sized, it was set to zero first: a tenth of the gather)
  for (size_t j = 0; j < order.size(); ++j) {
    if (j + kAhead < order.size()) __builtin_prefetch(&candidates_[order[j + kAhead]]);
    ordered.push_back(candidates_[order[j]]);
  }
  // Candidates in order, a key's group after another: each takes a slot
  // until none is left below its key; then no lower group can get one
  // either. A group's k-th slot goes to its k-th candidate; when only some
  // of a group fit, they are rewritten below with the best of the group by
  // the tie order.
  size_t k = 0, group = 0, placed_before = 0;
  for (; k < order.size(); ++k) {
    const double key = ordered[k].key;
    if (k == 0 || key != ordered[group].key) group = k, placed_before = new_slots.size();
    int64_t slot = -1;
    if (!free_.empty()) {
      if (free_.size() > kAhead) __builtin_prefetch(&slot_[static_cast<size_t>(free_[free_.size() - 1 - kAhead])], 1);
      slot = free_.back();
      free_.pop_back();
    } else {
      slot = lowest_below(key);
      if (slot < 0) break;
      ++evictions;
    }
    admit(slot, order[k], ordered[k]);
  }
  if (k < order.size() && k > group) {
    // The group [group, end) got k - group slots: the best of it by the tie
    // order take them, in the group's order again.
    const double key = candidates_[order[group]].key;
    size_t end = k;
    while (end < order.size() && candidates_[order[end]].key == key) ++end;
    const auto first = order.begin() + static_cast<std::ptrdiff_t>(group);
    const auto admitted = order.begin() + static_cast<std::ptrdiff_t>(k);
    std::nth_element(first, admitted, order.begin() + static_cast<std::ptrdiff_t>(end),
                     [&](uint32_t a, uint32_t b) { return Better(a, b); });
    std::sort(first, admitted, [&](uint32_t a, uint32_t b) {
      return PlacementOrder(candidates_[a].id) < PlacementOrder(candidates_[b].id);
    });
    for (size_t j = 0; j < k - group; ++j) {
      const size_t at = placed_before + j;
      const uint32_t c = order[group + j];
      const Candidate& cand = candidates_[c];
      SlotState& state = slot_[static_cast<size_t>(new_slots[at])];
      state.id = cand.id;
      state.count = cand.count;
      state.last = cand.last;
      new_ids[at] = cand.id;
      plan.replacements[at].second = c;
    }
  }
  // 3. The evicted ids leave the index, and the newcomers enter it: their
  // entries, which held their marks, take their slots (candidates filed
  // apart are inserted).
  index_.EraseMany({gone.get(), gone_count});
  if (filed_) {
    index_.AssignMany(new_ids, new_slots.data());
  } else {
    index_.InsertMany(new_ids, new_slots.data());
  }
  ClearWindow(plan);
  return evictions;
}

}  // namespace shardrec::mc
