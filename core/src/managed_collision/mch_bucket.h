// One bucket of a managed-collision table: its slots (rows), the id -> row
// index, per-slot metadata (lifetime count, last access, the policy's own
// columns), the current window, and the eviction round over them.
// MchManagedCollisionModule routes ids to buckets and keeps the counters.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "id_slot_index.h"
#include "shardrec/core/managed_collision/managed_collision_config.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/resources/huge_page_allocator.h"

namespace shardrec::mc {

// What one round decided, before anything is applied.
struct RoundPlan {
  // Slot holders the window saw (and the filter passed): new metadata.
  std::vector<int64_t> updated_slots, updated_count, updated_last;
  // The incremental round's: their window counts and keys before the round,
  // read in the same pass, so no later pass goes back to their lines.
  std::vector<int64_t> updated_window;
  std::vector<double> updated_key;
  // The policy's metadata columns of the slot holders, in slot order
  // (empty without metadata columns).
  std::vector<int64_t> slot_metadata;
  // (slot, candidate) pairs: the candidate takes the slot.
  std::vector<std::pair<int64_t, int64_t>> replacements;
  std::vector<int64_t> candidate_metadata;  // [candidates, columns]
  int64_t candidates = 0;                   // before the threshold filter

  // The incremental round (mch_bucket_fast.cc) decides its replacements in
  // Commit, from its files of holders by key; the plan holds what can fail:
  // the policy's keys.
  std::vector<int64_t> key_slots;    // slots whose key changes (every holder when rebuild_keys)
  std::vector<double> slot_keys;
  bool rebuild_keys = false;
  std::vector<int64_t> passing;      // candidates that passed the filter and may be admitted
  std::vector<double> passing_keys;
};

// A policy's scores: each finite or -inf, or an error naming the policy.
Status CheckScores(const EvictionPolicy& policy, std::span<const double> scores);

// Whether the incremental round's keys (scores at one fixed, late time)
// order a probe of entries as the policy's scores within a run do, and
// whether each entry scores alone as it does among the others; an error
// naming the first pair or entry that does not (mch_bucket_fast.cc). A
// policy that declares `incremental` but fails this (lru with a
// decay_exponent far from 1: its powers overflow, or round neighbouring
// steps together; a score relative to the others in the call) runs the
// exact round.
Status CheckKeysKeepOrder(const EvictionPolicy& policy);

class MchBucket {
 public:
  // Rows [first_row, first_row + slots) are managed, the last of them the
  // default row; [mch_first, mch_first + mch_rows) is the residual range.
  // incremental: run the incremental round (EvictionMode::kFast with a
  // policy that declares `incremental` and no metadata columns).
  MchBucket(int64_t first_row, int64_t slots, int64_t mch_first, int64_t mch_rows, int64_t metadata_columns,
            bool incremental = false);
  MchBucket(const MchBucket&) = delete;  // file_cache_ points into by_key_
  MchBucket& operator=(const MchBucket&) = delete;

  // rows[i]: the table row of ids[i] from its slot (from FindSlots), or
  // the residual / default row when it has none; counts the hits and the
  // residual rows.
  void Remap(std::span<const int64_t> ids, const int64_t* slots, int64_t* rows, int64_t* hits,
             int64_t* residual) const;
  // The slot of each id, -1 if none.
  void FindSlots(std::span<const int64_t> ids, int64_t* slots) const { index_.FindMany(ids, slots); }
  int64_t SlotRow(int64_t slot) const { return first_row_ + slot; }
  int64_t MissRow(int64_t id) const;

  // A training step's lookup: slots[i] as FindSlots gives it, and each id
  // counted into the window; an id without a slot becomes (or stays) one
  // of the window's candidates (kept where filed_ says). candidate_of[i]:
  // the candidate ids[i] counted toward, -1 for an id with a slot (for
  // RefreshSlots).
  void FindAndRecord(std::span<const int64_t> ids, int64_t* slots, int64_t iteration, int64_t* candidate_of);
  // After Commit of the round that FindAndRecord's window ended in: each id's slot
  // now, from what the round did (an evicted holder lost its slot, an
  // admitted candidate has the one it took), without looking the ids up
  // again. Same result as FindSlots.
  void RefreshSlots(std::span<const int64_t> ids, int64_t* slots, const int64_t* candidate_of,
                    const RoundPlan& plan);
  // Undo of every FindAndRecord since MarkWindow (a failed step).
  void MarkWindow();
  void RollbackWindow();

  // Plans a round at iteration `now` without changing anything.
  StatusOr<RoundPlan> PlanRound(const EvictionPolicy& policy, const ManagedCollisionConfig& config,
                                int64_t now) const;
  // Applies a plan; appends the rows of evicted ids; clears the window.
  // Returns the number of evictions. The incremental round fills in the
  // plan's replacements here, so callers read them after Commit.
  int64_t Commit(RoundPlan& plan, std::vector<int64_t>& evicted_rows);

  // Checkpoints: per slot (the default slot included) StateWidth() values:
  // occupied, id, lifetime count, last access, window count, window last
  // access, then the policy's metadata; the window's candidates as (id,
  // count, last access) triples. Everything else (the id index, the tie
  // order, the touched list) follows from these.
  int64_t StateWidth() const { return 6 + metadata_columns_; }
  void ExportState(int64_t* rows, std::vector<int64_t>* candidates) const;
  // CheckState: one flag each, ids unique, no candidate holding a slot,
  // counts >= 0, last accesses in [0, iteration]. ApplyState replaces the
  // state with checked values.
  Status CheckState(const int64_t* rows, std::span<const int64_t> candidates, int64_t iteration) const;
  void ApplyState(const int64_t* rows, std::span<const int64_t> candidates);

  int64_t capacity() const { return slots_ - 1; }
  int64_t occupied() const { return index_.size() - (filed_ ? static_cast<int64_t>(candidates_.size()) : 0); }
  int64_t first_row() const { return first_row_; }
  int64_t slots() const { return slots_; }
  bool Occupied(int64_t slot) const { return slot_[static_cast<size_t>(slot)].occupied != 0; }
  int64_t IdAt(int64_t slot) const { return Occupied(slot) ? slot_[static_cast<size_t>(slot)].id : 0; }
  int64_t Bytes() const;

 private:
  // What a training step changed in a slot's or a candidate's window
  // count and last access, to put back if the step is discarded.
  struct UndoEntry {
    int64_t at, count, last;  // the slot or candidate; its values before the step
  };
  struct WindowUndo {
    size_t touched_mark = 0, candidates_mark = 0;
    std::vector<UndoEntry> slot_log;       // in order
    std::vector<UndoEntry> candidate_log;
    bool active = false;
  };
  // One append of a whole entry: one capacity check, where three
  // push_backs of int64_t made three (and an insert of an initializer
  // list, a memmove call: 6% of a round-every-step run).
  static void Log(std::vector<UndoEntry>& log, int64_t at, int64_t count, int64_t last) {
    log.push_back({at, count, last});
  }
  template <bool kFiled>
  void FindAndRecordIn(std::span<const int64_t> ids, int64_t* slots, int64_t iteration, int64_t* candidate_of);
  // A candidate's mark in the index that holds it, and back.
  static int64_t CandidateMark(int64_t c) { return -2 - c; }
  static int64_t CandidateOfMark(int64_t row) { return -2 - row; }
  // Files a new candidate (its mark is already in the index).
  void AddCandidate(int64_t id) { candidates_.push_back({id, 0, 0, 0.0}); }
  double Threshold(const ManagedCollisionConfig& config) const;
  bool Updated(size_t slot, double threshold) const {
    return slot_[slot].window_count > 0 && static_cast<double>(slot_[slot].window_count) > threshold;
  }
  void ApplyUpdates(const RoundPlan& plan);
  // Ends the window: the holders' window counts, and the candidates (those
  // filed in the slot index leave it unless the plan admitted them: their
  // entries hold slots now); then chooses where the next window files its
  // candidates.
  void ClearWindow(const RoundPlan& plan);
  // The incremental round (mch_bucket_fast.cc).
  StatusOr<RoundPlan> PlanIncrementalRound(const EvictionPolicy& policy, double threshold, RoundPlan plan) const;
  int64_t CommitIncremental(RoundPlan& plan, std::vector<int64_t>& evicted_rows);
  // Keeps the best `bound` (< order.size()) of the candidates `order` lists.
  void KeepBestCandidates(std::vector<uint32_t>& order, size_t bound) const;
  // Whether candidate a goes before b in the exact round's order: the
  // higher key, then the higher window count, then the lower id.
  bool Better(uint32_t a, uint32_t b) const {
    const Candidate &x = candidates_[a], &y = candidates_[b];
    if (x.key != y.key) return x.key > y.key;
    return x.count != y.count ? x.count > y.count : x.id < y.id;
  }
  void RebuildFreeSlots();
  int64_t FiledBytes() const;

  int64_t first_row_, slots_, mch_first_, mch_rows_, metadata_columns_;
  bool incremental_;  // the incremental round (mch_bucket_fast.cc)
  // Everything about one slot that a step or a round reads or writes, in
  // one cache line: a hit's window update, an admission or an eviction
  // misses the cache once per slot, not once per field (six arrays did six
  // times). The default slot slots_-1 never holds an id.
  struct alignas(64) SlotState {
    int64_t id = 0, count = 0, last = 0;  // lifetime count and last access
    int64_t window_count = 0, window_last = 0;
    double key = 0;  // the incremental round's key (mch_bucket_fast.cc)
    bool occupied = false;
  };
  std::vector<SlotState, HugePageAllocator<SlotState>> slot_;
  std::vector<int64_t> metadata_;  // [slots, metadata_columns_]
  // Managed slots in TorchRec's order: holders by raw id, then the empty
  // ones by slot (the policy's tie order). The default slot is not in it.
  // The exact round's; empty with the incremental round.
  std::vector<int64_t> order_;
  // Every holder's id -> its slot. While rounds admit most candidates
  // (filed_), every candidate's id -> its mark (CandidateMark) too: a new
  // id's miss files it at once, in the line the lookup just read, where the
  // candidates' own index costs a random line per new id; an admission then
  // rewrites the entry, the round erases the others. While rounds refuse
  // most, the candidates' own index holds them (kCandidateSpread: at most
  // half full), cleared at once at the round's end.
  IdSlotIndex index_;
  static constexpr int64_t kCandidateSpread = 2;
  IdSlotIndex candidate_index_;
  bool filed_ = true;
  // The window: the slots touched (their counts are in slot_), and the
  // candidates (ids without a slot) with theirs.
  std::vector<int64_t> touched_;
  // A candidate's record: its id, window count and last access, one line
  // at most for the step that counts it; the incremental commit writes its
  // key here, so ordering and gathering the candidates read one line each.
  struct Candidate {
    int64_t id = 0, count = 0, last = 0;
    double key = 0;
  };
  std::vector<Candidate, HugePageAllocator<Candidate>> candidates_;
  WindowUndo undo_;

  // The incremental round (mch_bucket_fast.cc): each holder's key (its
  // score at kKeyTime, in slot_); the holders filed by key, each exactly once, under
  // its key or a lower one (keys only rise; a holder is moved up when its
  // old key's turn comes); and the empty slots, highest first so the
  // lowest is taken first.
  // A file's slots live in a buffer of its own, not a std::vector: GCC 12
  // left push_back out of line in the round's commit, ~25 instructions a
  // call, about once an admission.
  struct KeyBucket {
    std::unique_ptr<int64_t[]> slots;  // [head, size) are filed here
    size_t size = 0, capacity = 0, head = 0;
    bool sorted = true;  // [head, size) ascending
    int64_t* begin() const { return slots.get() + head; }
    int64_t* end() const { return slots.get() + size; }
    [[gnu::always_inline]] void Add(int64_t slot) {
      sorted = sorted && (size == head || slots[size - 1] < slot);
      if (size == capacity) [[unlikely]] Grow();
      slots[size++] = slot;
    }
    [[gnu::noinline]] void Grow() {
      capacity = std::max<size_t>(64, 2 * capacity);
      auto bigger = std::make_unique_for_overwrite<int64_t[]>(capacity);
      std::copy(slots.get(), slots.get() + size, bigger.get());
      slots = std::move(bigger);
    }
  };
  std::map<double, KeyBucket> by_key_;
  // The file of a key, through a small cache of recent keys (a map node
  // stays put until its file is erased): lru's raised holders and newcomers
  // come under a few dozen keys in no order, and a walk down the map's tree
  // per holder, its compares mispredicted, was a tenth of a round's commit.
  KeyBucket& FileOf(double key);
  void ClearFiles();
  void EraseLowestFile();
  struct CachedFile {
    double key = 0;
    KeyBucket* file = nullptr;
  };
  CachedFile& CacheEntry(double key);  // the one entry a key may occupy
  std::array<CachedFile, 64> file_cache_{};
  bool keys_ready_ = true;  // false after ApplyState: the next round scores every holder
  std::vector<int64_t> free_;
  std::vector<uint64_t> sort_bits_;  // SortUnique's scratch
  std::vector<int64_t> slot_of_candidate_;  // RefreshSlots' scratch
  std::vector<uint64_t> replaced_bits_;     // RefreshSlots' scratch, all zero between calls
  std::vector<uint64_t> admitted_bits_;     // ClearWindow's scratch
  std::vector<int64_t> refused_ids_;        // ClearWindow's scratch
};

}  // namespace shardrec::mc
