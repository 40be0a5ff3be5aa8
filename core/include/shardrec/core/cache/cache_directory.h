// CacheDirectory: which ids (rows of a table larger than memory) hold which
// slots of its RAM cache (docs/cache.md), and what must move when a batch
// arrives. Set-associative, as FBGEMM's caches: an id may sit only in the
// `ways` slots of its set (chosen by hash), so a miss in a full set asks
// the eviction-policy plugin to score that set's ways alone, never the
// whole cache. Every id of the batch gets a slot: a set whose every way
// already holds one of this batch's ids sends the newcomer to an overflow
// slot, which holds it for this batch only.
//
//   auto dir = CacheDirectory::Create(registry, "lru", {}, {.slots = 1 << 20});
//   auto plan = dir->Assign(batch_ids);      // per id a slot; loads; write-backs
//   ... write back plan->write_back, load plan->load, look up by slot ...
//   dir->MarkBatchDirty();                   // after the batch's backward
//   // or dir->MarkDirty(slots_updated), for rows changed otherwise
//
// Not thread-safe; Assign runs a large batch's misses on threads of its own
// (oneTBB's), each part of the sets scored by a policy handle of its own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardrec/core/plugin_options.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec {

struct CacheDirectoryConfig {
  int64_t slots = 0;     // cached rows; rounded up to whole sets
  int64_t ways = 32;     // slots per set, 1..1024
  int64_t overflow = 0;  // slots for one batch's ids beyond a full set (0: 2 x ways)
  // Ids are rows below this (0: any non-negative id). Known, it lets the
  // directory find slots through an array indexed by row when that is
  // no larger than a hashed index (a cache of a sixteenth to an eighth of the
  // rows); an id at or past it is refused.
  int64_t rows = 0;
  // A batch's misses are decided in this many parts, by set, each on a
  // thread of its own once the batch has `parallel_from` misses or more;
  // with more than one part, a batch of 8192 ids or more (and at least
  // `parallel_from`) finds and counts its hits in runs on threads too.
  // The decisions are those of one pass whatever the two are (tested).
  int64_t parts = 8;
  int64_t parallel_from = 256;
};

// Per id looked up: misses are the rows brought in.
struct CacheCounters {
  int64_t lookups = 0, hits = 0, misses = 0;
  int64_t evictions = 0, write_backs = 0;  // write-backs: evicted rows that were dirty
  int64_t overflows = 0;                   // misses sent to an overflow slot
  int64_t reloads = 0;                     // rows that left and came back in one batch (Plan::reloads)
  double hit_rate() const { return lookups ? static_cast<double>(hits) / lookups : 0.0; }
};

class CacheDirectory {
 public:
  // `policy`: an eviction component's name (lru, lfu, a plugin's).
  static StatusOr<CacheDirectory> Create(const PluginRegistry& registry, const std::string& policy,
                                         const OptionList& policy_options, const CacheDirectoryConfig& config);
  CacheDirectory(CacheDirectory&&) noexcept;
  CacheDirectory& operator=(CacheDirectory&&) noexcept;
  ~CacheDirectory();

  // Slots in all: sets x ways, then the overflow slots.
  int64_t capacity() const;
  int64_t set_slots() const;  // sets x ways: what holds rows from batch to batch
  int64_t ways() const;
  // Its own memory: per slot the bookkeeping, the policy's metadata and
  // the id index's share.
  int64_t bytes() const;

  struct Move {
    std::vector<int64_t> ids, slots;
  };
  struct Plan {
    std::vector<int64_t> slots;  // per id of the batch
    Move write_back;             // dirty rows leaving their slot: save them before `load` overwrites it
    Move load;                   // misses: row id into slot
    // Rows that leave and come back in this batch (last batch's overflow
    // rows, released first, that this batch asks for again): (index in
    // `load`, index in `write_back`). Their row is the one written back.
    std::vector<std::pair<size_t, size_t>> reloads;
  };
  // ids: one batch's ids (>= 0; a repeated id shares its slot, and counts
  // as a hit after its first sight). Hits keep their slot; misses take
  // a free way of their set, else the way the policy scores lowest among
  // those no id of this batch holds, else an overflow slot. Last batch's
  // overflow slots are released first. An error (the policy failed, or
  // the batch has more ids than its sets and the overflow hold) changes
  // nothing.
  StatusOr<Plan> Assign(std::span<const int64_t> ids);
  // Slots whose rows changed (a backward): written back when they leave.
  void MarkDirty(std::span<const int64_t> slots);
  // Every slot of the last Assign's batch changed (a backward of that
  // batch): as MarkDirty(plan.slots), at the cost of one write, not one per
  // id. A batch never marked (an evaluation) leaves its rows as they were.
  void MarkBatchDirty();
  // Every dirty resident, now clean (flush: the caller saves them).
  Move TakeDirty();
  // Forgets every resident (purge; flush first).
  void Clear();
  // The slot of `id`, or -1.
  int64_t SlotOf(int64_t id) const;
  const CacheCounters& counters() const;

 private:
  struct State;
  explicit CacheDirectory(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace shardrec
