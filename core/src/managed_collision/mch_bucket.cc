#include "mch_bucket.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "shardrec/core/managed_collision/id_hash.h"
#include "shardrec/core/dl_view.h"

namespace shardrec::mc {

MchBucket::MchBucket(int64_t first_row, int64_t slots, int64_t mch_first, int64_t mch_rows,
                     int64_t metadata_columns, bool incremental)
    : first_row_(first_row),
      slots_(slots),
      mch_first_(mch_first),
      mch_rows_(mch_rows),
      metadata_columns_(metadata_columns),
      incremental_(incremental && metadata_columns == 0),
      slot_(static_cast<size_t>(slots)),
      metadata_(static_cast<size_t>(slots * metadata_columns), 0),
      order_(incremental_ ? 0 : static_cast<size_t>(slots - 1)),  // the exact round's
      index_(slots),
      candidate_index_(1024, kCandidateSpread) {
  std::iota(order_.begin(), order_.end(), int64_t{0});
  if (incremental_) RebuildFreeSlots();
}

int64_t MchBucket::MissRow(int64_t id) const {
  if (mch_rows_ == 0) return first_row_ + slots_ - 1;
  // A second mix: the first one's high bits chose the bucket.
  return mch_first_ + static_cast<int64_t>(ScaleToRange(Fmix64(Fmix64(static_cast<uint64_t>(id)) ^ 0x9e3779b97f4a7c15ULL),
                                                        static_cast<uint64_t>(mch_rows_)));
}

void MchBucket::Remap(std::span<const int64_t> ids, const int64_t* slots, int64_t* rows, int64_t* hits,
                      int64_t* residual) const {
  int64_t h = 0, r = 0;
  if (mch_rows_ == 0) {
    // Without residual rows a miss reads the default row: a select, no
    // branch on hit or miss (which the stream mispredicts).
    const int64_t default_row = first_row_ + slots_ - 1;
    for (size_t i = 0; i < ids.size(); ++i) {
      const int64_t s = slots[i];
      rows[i] = s >= 0 ? s + first_row_ : default_row;
      h += s >= 0;
    }
    *hits += h;
    return;
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (slots[i] >= 0) {
      rows[i] = slots[i] + first_row_;
      ++h;
    } else {
      rows[i] = MissRow(ids[i]);
      r += mch_rows_ > 0;
    }
  }
  *hits += h;
  *residual += r;
}

void MchBucket::FindAndRecord(std::span<const int64_t> ids, int64_t* slots, int64_t iteration,
                              int64_t* candidate_of) {
  if (filed_) {
    FindAndRecordIn<true>(ids, slots, iteration, candidate_of);
  } else {
    FindAndRecordIn<false>(ids, slots, iteration, candidate_of);
  }
}

template <bool kFiled>
void MchBucket::FindAndRecordIn(std::span<const int64_t> ids, int64_t* slots, int64_t iteration,
                                int64_t* candidate_of) {
  // One pass, two stages: each id's home in the slot index is prefetched
  // kIndexAhead ids early and looked up kLineAhead ids early, which
  // prefetches the line the id is then counted into: a holder's slot, or a
  // candidate's home in the candidates' own index. When candidates are
  // filed in the slot index (kFiled), a new id is filed at the lookup, in
  // the line just read, and a candidate's record is the only other line
  // (prefetched too). (Separate passes for the lookup and the count read
  // each id's index line, then missed the second line unprefetched by the
  // lookup.)
  constexpr size_t kIndexAhead = 48, kLineAhead = 24;
  static_assert(kIndexAhead < IdSlotIndex::kRing, "an id's hash is overwritten before its lookup");
  const size_t n = ids.size();
  IdSlotIndex::HashRing hashes{};  // each id hashed once, at its prefetch, for both indexes
  auto prefetch = [&](size_t k) __attribute__((always_inline)) {
    index_.PrefetchHash(hashes.Put(k, IdSlotIndex::HashOf(ids[k])));
  };
  auto look_up = [&](size_t k) __attribute__((always_inline)) {
    int64_t row;
    if constexpr (kFiled) {
      const int64_t mark = CandidateMark(static_cast<int64_t>(candidates_.size()));
      row = index_.FindOrInsertAt(hashes.At(k), ids[k], mark);
      if (row == mark) {
        AddCandidate(ids[k]);
      } else if (row < IdSlotIndex::kEmpty) {  // a candidate seen before: its record
        __builtin_prefetch(&candidates_[static_cast<size_t>(CandidateOfMark(row))], 1);
      }
    } else {
      row = index_.FindAt(hashes.At(k), ids[k]);
      if (row < 0) candidate_index_.PrefetchHash(hashes.At(k));  // the same hash, its own mask
    }
    if (row >= 0) __builtin_prefetch(&slot_[static_cast<size_t>(row)], 1);
    slots[k] = row;
  };
  for (size_t k = 0; k < std::min(n, kIndexAhead); ++k) prefetch(k);
  for (size_t k = 0; k < std::min(n, kLineAhead); ++k) look_up(k);
  for (size_t i = 0; i < n; ++i) {
    if (i + kIndexAhead < n) prefetch(i + kIndexAhead);
    if (i + kLineAhead < n) look_up(i + kLineAhead);
    const int64_t s = slots[i];
    if (s >= 0) {
      SlotState& slot = slot_[static_cast<size_t>(s)];
      // The undo needs a slot's state before this step only: logged at its
      // first id of the step (before it, its last access is older).
      if (undo_.active && slot.window_last != iteration) Log(undo_.slot_log, s, slot.window_count, slot.window_last);
      if (slot.window_count++ == 0) touched_.push_back(s);
      slot.window_last = iteration;
      candidate_of[i] = -1;
      continue;
    }
    int64_t mark = s;
    if constexpr (!kFiled) {
      const int64_t next = CandidateMark(static_cast<int64_t>(candidates_.size()));
      mark = candidate_index_.FindOrInsertAt(hashes.At(i), ids[i], next);  // still in the ring: kIndexAhead < kRing
      if (mark == next) AddCandidate(ids[i]);
    }
    const int64_t c = CandidateOfMark(mark);
    slots[i] = -1;
    candidate_of[i] = c;
    const auto u = static_cast<size_t>(c);
    Candidate& cand = candidates_[u];
    // A candidate filed this step is erased by the undo; an older one is
    // logged at its first id of the step.
    if (undo_.active && u < undo_.candidates_mark && cand.last != iteration) {
      Log(undo_.candidate_log, c, cand.count, cand.last);
    }
    ++cand.count;
    cand.last = iteration;
  }
}

void MchBucket::RefreshSlots(std::span<const int64_t> ids, int64_t* slots, const int64_t* candidate_of,
                             const RoundPlan& plan) {
  // A holder loses its slot only to a replacement: the slots that changed
  // hands, as bits (a few KiB, in the cache), where reading each id's slot
  // line to compare its id missed the cache once an id.
  // (At least one entry: every id reads one, below.)
  slot_of_candidate_.assign(static_cast<size_t>(std::max<int64_t>(plan.candidates, 1)), -1);
  replaced_bits_.resize(static_cast<size_t>((slots_ + 63) / 64), 0);
  for (const auto& [slot, candidate] : plan.replacements) {
    slot_of_candidate_[static_cast<size_t>(candidate)] = slot;
    replaced_bits_[static_cast<size_t>(slot) / 64] |= uint64_t{1} << (slot % 64);
  }
  // Both answers are read for every id and one is selected: a branch on
  // holder or candidate is mispredicted about once in four ids on a stream.
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t s = slots[i];
    const auto as_holder = static_cast<uint64_t>(std::max<int64_t>(s, 0));
    const auto as_candidate = static_cast<size_t>(std::max<int64_t>(candidate_of[i], 0));
    // A holder keeps its slot unless the round gave it to another.
    const bool replaced = (replaced_bits_[as_holder / 64] >> (as_holder % 64)) & 1;
    const int64_t holder_slot = replaced ? -1 : s;
    slots[i] = s >= 0 ? holder_slot : slot_of_candidate_[as_candidate];
  }
  for (const auto& [slot, candidate] : plan.replacements) replaced_bits_[static_cast<size_t>(slot) / 64] = 0;
}

void MchBucket::MarkWindow() {
  undo_.active = true;
  undo_.touched_mark = touched_.size();
  undo_.candidates_mark = candidates_.size();
  undo_.slot_log.clear();
  undo_.candidate_log.clear();
}

void MchBucket::RollbackWindow() {
  if (!undo_.active) return;
  for (auto e = undo_.slot_log.rbegin(); e != undo_.slot_log.rend(); ++e) {
    SlotState& slot = slot_[static_cast<size_t>(e->at)];
    slot.window_count = e->count;
    slot.window_last = e->last;
  }
  touched_.resize(undo_.touched_mark);
  for (auto e = undo_.candidate_log.rbegin(); e != undo_.candidate_log.rend(); ++e) {
    Candidate& cand = candidates_[static_cast<size_t>(e->at)];
    cand.count = e->count;
    cand.last = e->last;
  }
  IdSlotIndex& filed_in = filed_ ? index_ : candidate_index_;
  for (size_t c = undo_.candidates_mark; c < candidates_.size(); ++c) filed_in.Erase(candidates_[c].id);
  candidates_.resize(undo_.candidates_mark);
  undo_.active = false;
}

Status CheckScores(const EvictionPolicy& policy, std::span<const double> scores) {
  for (size_t i = 0; i < scores.size(); ++i) {
    if (std::isnan(scores[i]) || scores[i] == std::numeric_limits<double>::infinity()) {
      return Status(SR_INTERNAL, policy.Describe() + ": score returned " + std::to_string(scores[i]) +
                                     " for entry " + std::to_string(i) + " (scores must be finite or -inf)");
    }
  }
  return Status::Ok();
}

// The threshold filter runs over every id of the window, slot holders
// included (TorchRec filters its unique history before the update).
double MchBucket::Threshold(const ManagedCollisionConfig& config) const {
  const size_t num_candidates = candidates_.size();
  if (config.threshold == ThresholdFilter::kNone || touched_.size() + num_candidates == 0) {
    return -std::numeric_limits<double>::infinity();
  }
  double total = 0;
  for (int64_t s : touched_) total += static_cast<double>(slot_[static_cast<size_t>(s)].window_count);
  for (const Candidate& c : candidates_) total += static_cast<double>(c.count);
  const double mean = total / static_cast<double>(touched_.size() + num_candidates);
  return config.threshold == ThresholdFilter::kAverage ? mean : mean * config.threshold_skew_multiplier;
}

StatusOr<RoundPlan> MchBucket::PlanRound(const EvictionPolicy& policy, const ManagedCollisionConfig& config,
                                         int64_t now) const {
  RoundPlan plan;
  const size_t num_candidates = candidates_.size();
  plan.candidates = static_cast<int64_t>(num_candidates);
  const double threshold = Threshold(config);

  // Slot holders the window saw (and the filter passed): lifetime count and
  // last access after the window. Only touched slots have a window count.
  // The touched slots' lines are scattered over the bucket: each is
  // prefetched kAhead slots early, and read here once for everything the
  // round needs (a threshold filter has read them once more, above).
  auto updated = [&](size_t u) { return Updated(u, threshold); };
  constexpr size_t kAhead = 16;
  // Reserved: grown by push_back they were copied ~12 times a round.
  const bool keyed = incremental_ && keys_ready_;
  plan.updated_slots.reserve(touched_.size());
  plan.updated_count.reserve(touched_.size());
  plan.updated_last.reserve(touched_.size());
  if (keyed) {
    plan.updated_window.reserve(touched_.size());
    plan.updated_key.reserve(touched_.size());
  }
  for (size_t i = 0; i < touched_.size(); ++i) {
    if (i + kAhead < touched_.size()) __builtin_prefetch(&slot_[static_cast<size_t>(touched_[i + kAhead])]);
    const int64_t s = touched_[i];
    const auto u = static_cast<size_t>(s);
    if (!updated(u)) continue;
    const SlotState& slot = slot_[u];
    plan.updated_slots.push_back(s);
    plan.updated_count.push_back(slot.count + slot.window_count);
    plan.updated_last.push_back(slot.window_last);
    if (keyed) {  // the incremental plan's; a rebuild scores every holder afresh
      plan.updated_window.push_back(slot.window_count);
      plan.updated_key.push_back(slot.key);
    }
  }
  if (incremental_) return PlanIncrementalRound(policy, threshold, std::move(plan));

  // Candidates that pass the filter, by window count (desc) then id.
  std::vector<int64_t> passing;
  for (size_t c = 0; c < num_candidates; ++c) {
    if (static_cast<double>(candidates_[c].count) > threshold) passing.push_back(static_cast<int64_t>(c));
  }
  std::sort(passing.begin(), passing.end(), [&](int64_t a, int64_t b) {
    const Candidate &x = candidates_[static_cast<size_t>(a)], &y = candidates_[static_cast<size_t>(b)];
    return x.count != y.count ? x.count > y.count : x.id < y.id;
  });
  if (passing.empty() && metadata_columns_ == 0) return plan;  // nothing can change hands

  const size_t residents = order_.size(), n = residents + passing.size();
  std::vector<int64_t> counts(n), lasts(n), windows(n), metadata(n * static_cast<size_t>(metadata_columns_), 0);
  const auto cols = static_cast<size_t>(metadata_columns_);
  for (size_t i = 0; i < residents; ++i) {
    const auto s = static_cast<size_t>(order_[i]);
    const bool seen = updated(s);
    counts[i] = seen ? slot_[s].count + slot_[s].window_count : slot_[s].count;
    lasts[i] = seen ? slot_[s].window_last : (slot_[s].occupied ? slot_[s].last : 0);
    windows[i] = slot_[s].window_count;
    std::copy_n(metadata_.begin() + static_cast<std::ptrdiff_t>(s * cols), cols,
                metadata.begin() + static_cast<std::ptrdiff_t>(i * cols));
  }
  for (size_t k = 0; k < passing.size(); ++k) {
    const auto c = static_cast<size_t>(passing[k]);
    counts[residents + k] = candidates_[c].count;
    lasts[residents + k] = candidates_[c].last;
    windows[residents + k] = candidates_[c].count;
  }
  std::vector<double> scores(n, 0.0);
  const auto n64 = static_cast<int64_t>(n);
  DLView counts_view(counts.data(), {n64}), lasts_view(lasts.data(), {n64}), windows_view(windows.data(), {n64}),
      scores_view(scores.data(), {n64}),
      metadata_view(metadata.data(), {n64, metadata_columns_});
  sr_eviction_score_args args{};
  args.struct_size = SR_STRUCT_SIZE(sr_eviction_score_args, scores);
  args.now = now;
  args.num_resident = residents;
  args.num_candidates = passing.size();
  args.counts = counts_view.get();
  args.last_access = lasts_view.get();
  args.window_counts = windows_view.get();
  args.metadata = metadata_columns_ > 0 ? metadata_view.get() : nullptr;
  args.scores = scores_view.get();
  if (Status st = policy.Score(args); !st.ok()) return st;
  if (Status st = CheckScores(policy, scores); !st.ok()) return st;

  // Rank order: higher score first, then the earlier entry.
  auto before = [&](int64_t a, int64_t b) {
    const double sa = scores[static_cast<size_t>(a)], sb = scores[static_cast<size_t>(b)];
    return sa != sb ? sa > sb : a < b;
  };
  const auto res64 = static_cast<int64_t>(residents);
  std::vector<int64_t> admitted, dropped;  // candidates that get a slot; holders that may lose theirs
  if (policy.HasSelect()) {
    std::vector<uint8_t> keep(n, 0);
    DLView keep_view(keep.data(), {n64});
    sr_eviction_select_args sel{};
    sel.struct_size = SR_STRUCT_SIZE(sr_eviction_select_args, keep);
    sel.scored = &args;
    sel.capacity = residents;
    sel.keep = keep_view.get();
    if (Status st = policy.Select(sel); !st.ok()) return st;
    size_t kept = 0;
    for (size_t i = 0; i < n; ++i) {
      if (keep[i] > 1) {
        return Status(SR_INTERNAL, policy.Describe() + ": select wrote " + std::to_string(keep[i]) +
                                       " at entry " + std::to_string(i) + " (keep must be 0 or 1)");
      }
      kept += keep[i];
    }
    if (kept > residents) {
      return Status(SR_INTERNAL, policy.Describe() + ": select kept " + std::to_string(kept) + " entries, capacity " +
                                     std::to_string(residents));
    }
    for (int64_t i = 0; i < n64; ++i) {
      if (i < res64 && !keep[static_cast<size_t>(i)]) dropped.push_back(i);
      if (i >= res64 && keep[static_cast<size_t>(i)]) admitted.push_back(i);
    }
  } else {
    std::vector<int64_t> rank(n);
    std::iota(rank.begin(), rank.end(), int64_t{0});
    std::nth_element(rank.begin(), rank.begin() + res64, rank.end(), before);
    for (size_t k = 0; k < n; ++k) {
      if (k < residents && rank[k] >= res64) admitted.push_back(rank[k]);
      if (k >= residents && rank[k] < res64) dropped.push_back(rank[k]);
    }
  }
  // -inf: never admitted.
  std::erase_if(admitted, [&](int64_t i) { return scores[static_cast<size_t>(i)] == -std::numeric_limits<double>::infinity(); });
  std::sort(admitted.begin(), admitted.end(), before);
  std::sort(dropped.begin(), dropped.end(), before);
  // The lowest-ranked holders make room, the best of them for the best candidate.
  const size_t first_evicted = dropped.size() - admitted.size();
  for (size_t k = 0; k < admitted.size(); ++k) {
    const int64_t entry = admitted[k];
    plan.replacements.emplace_back(order_[static_cast<size_t>(dropped[first_evicted + k])],
                                   passing[static_cast<size_t>(entry - res64)]);
    plan.candidate_metadata.insert(plan.candidate_metadata.end(),
                                   metadata.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(entry) * cols),
                                   metadata.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(entry + 1) * cols));
  }
  if (metadata_columns_ > 0) metadata.resize(residents * cols), plan.slot_metadata = std::move(metadata);
  return plan;
}

void MchBucket::ApplyUpdates(const RoundPlan& plan) {
  for (size_t k = 0; k < plan.updated_slots.size(); ++k) {
    const auto s = static_cast<size_t>(plan.updated_slots[k]);
    slot_[s].count = plan.updated_count[k];
    slot_[s].last = plan.updated_last[k];
  }
}

void MchBucket::ClearWindow(const RoundPlan& plan) {
  for (int64_t s : touched_) slot_[static_cast<size_t>(s)].window_count = 0;
  touched_.clear();
  const size_t n = candidates_.size(), refused = n - plan.replacements.size();
  if (!filed_) {
    candidate_index_.Clear();
  } else if (refused * 32 > index_.entries()) {
    index_.EraseMarks();  // most new ids refused: one pass over the index
  } else if (refused > 0) {  // (lru on a stream admits every candidate)
    admitted_bits_.assign((n + 63) / 64, 0);
    for (const auto& [slot, c] : plan.replacements) admitted_bits_[static_cast<size_t>(c) / 64] |= uint64_t{1} << (c % 64);
    refused_ids_.clear();
    for (size_t c = 0; c < n; ++c) {
      if (!((admitted_bits_[c / 64] >> (c % 64)) & 1)) refused_ids_.push_back(candidates_[c].id);
    }
    index_.EraseMany(refused_ids_);
  }
  // Where the next window files its candidates: in the slot index while
  // rounds admit most of them (each then saves a random line), apart while
  // they refuse most (each refused mark would cost an erase from the slot
  // index, where the candidates' own index is cleared at once). Either way
  // the round decides the same.
  if (n > 0) filed_ = 2 * plan.replacements.size() >= n;
  candidates_.clear();
}

int64_t MchBucket::Commit(RoundPlan& plan, std::vector<int64_t>& evicted_rows) {
  undo_.active = false;
  if (incremental_) return CommitIncremental(plan, evicted_rows);
  ApplyUpdates(plan);
  const auto cols = static_cast<size_t>(metadata_columns_);
  if (!plan.slot_metadata.empty()) {
    for (size_t i = 0; i < order_.size(); ++i) {
      std::copy_n(plan.slot_metadata.begin() + static_cast<std::ptrdiff_t>(i * cols), cols,
                  metadata_.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(order_[i]) * cols));
    }
  }
  int64_t evictions = 0;
  std::vector<uint8_t> changed;
  if (!plan.replacements.empty()) changed.assign(static_cast<size_t>(slots_), 0);
  for (size_t k = 0; k < plan.replacements.size(); ++k) {
    const auto [slot, candidate] = plan.replacements[k];
    const auto s = static_cast<size_t>(slot);
    const auto c = static_cast<size_t>(candidate);
    if (slot_[s].occupied) {
      index_.Erase(slot_[s].id);
      evicted_rows.push_back(first_row_ + slot);
      ++evictions;
    }
    slot_[s].id = candidates_[c].id;
    slot_[s].occupied = true;
    if (filed_) {
      index_.Assign(slot_[s].id, slot);  // its entry held the candidate's mark
    } else {
      index_.Insert(slot_[s].id, slot);
    }
    slot_[s].count = candidates_[c].count;
    slot_[s].last = candidates_[c].last;
    std::copy_n(plan.candidate_metadata.begin() + static_cast<std::ptrdiff_t>(k * cols), cols,
                metadata_.begin() + static_cast<std::ptrdiff_t>(s * cols));
    changed[s] = 1;
  }
  if (!plan.replacements.empty()) {
    // Holders stay sorted by id: merge the unchanged ones with the new.
    std::vector<int64_t> kept, fresh, empty;
    for (int64_t s : order_) {
      const auto u = static_cast<size_t>(s);
      if (changed[u]) continue;
      (slot_[u].occupied ? kept : empty).push_back(s);
    }
    for (const auto& r : plan.replacements) fresh.push_back(r.first);
    auto by_id = [&](int64_t a, int64_t b) { return slot_[static_cast<size_t>(a)].id < slot_[static_cast<size_t>(b)].id; };
    std::sort(fresh.begin(), fresh.end(), by_id);
    auto out = std::merge(kept.begin(), kept.end(), fresh.begin(), fresh.end(), order_.begin(), by_id);
    std::copy(empty.begin(), empty.end(), out);
  }
  ClearWindow(plan);
  return evictions;
}

int64_t MchBucket::Bytes() const {
  auto vec = [](const auto& v) { return static_cast<int64_t>(v.capacity() * sizeof(v[0])); };
  return vec(slot_) + vec(metadata_) + vec(order_) + static_cast<int64_t>(index_.bytes()) + vec(touched_) +
         vec(candidates_) + static_cast<int64_t>(candidate_index_.bytes()) + vec(free_) + vec(sort_bits_) +
         vec(slot_of_candidate_) + vec(replaced_bits_) + vec(admitted_bits_) + vec(refused_ids_) + FiledBytes();
}

}  // namespace shardrec::mc
