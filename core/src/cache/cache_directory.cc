// CacheDirectory (cache_directory.h). Per slot, in arrays of their own: the
// id it holds; its accesses and last access (what the policy scores; a slot
// whose last access is this batch is never a victim within it); the
// policy's own metadata columns; and one byte saying whether it is free,
// clean or dirty. A hit writes only its 16 bytes of accesses (four slots a
// cache line, where a record of id and accesses held two), and a
// backward's MarkDirty writes the byte array alone. An id -> slot index
// (managed collision's) finds hits. Assign keeps an undo log, so that a
// failure half-way leaves the directory as it was.
#include "shardrec/core/cache/cache_directory.h"

#include <algorithm>
#include <bit>
#include <cmath>

#include <fmt/format.h>

#include "../managed_collision/id_slot_index.h"
#include "row_slot_map.h"
#include "shardrec/core/managed_collision/id_hash.h"
#include "shardrec/core/plugin_objects.h"

namespace shardrec {

namespace {
// A slot's accesses: how many batches used it since it was filled, and the
// last of them (a batch number, from 1; 0 when free).
struct Use {
  int64_t count = 0, last = 0;
};
// A slot's row, beside the slot: free (no row), clean, or changed since
// it was loaded (written back when it leaves).
enum class Row : uint8_t { kFree, kClean, kDirty };
}  // namespace

struct CacheDirectory::State {
  EvictionPolicy policy;
  int64_t columns = 0;  // the policy's metadata columns
  int64_t sets = 0, ways = 0, overflow = 0;
  std::vector<int64_t> ids;  // per slot: its id, -1 when free
  std::vector<Use> uses;     // per slot
  std::vector<Row> rows;     // per slot
  std::vector<int64_t> metadata;  // [capacity, columns]
  // id -> slot: an array by row where the rows are known and that is the
  // smaller (`direct`), else managed collision's hashed index.
  mc::IdSlotIndex index;
  RowSlotMap by_row;
  bool direct = false;
  int64_t id_limit = 0;  // ids are below it (0: unbounded)
  int64_t batch = 0;
  std::vector<int64_t> overflow_held;  // overflow slots holding last batch's ids
  CacheCounters counters;

  // Assign's undo log: a slot's state before a change this call (its
  // metadata, when the policy keeps some, in `saved_metadata` in the same
  // order), and the index's changes, undone in reverse. A hit changes only
  // its accesses, by one batch: (slot, last access before) is enough, in a
  // log of its own (a hit's slot is never changed again in its batch).
  struct Saved {
    int64_t slot, id;
    Use use;
    Row row;
  };
  std::vector<Saved> saved;
  std::vector<std::pair<int64_t, int64_t>> hits_saved;
  std::vector<int64_t> saved_metadata;
  std::vector<std::pair<int64_t, int64_t>> inserted;  // (id, slot)
  std::vector<std::pair<int64_t, int64_t>> erased;
  // Assign's scratch, kept across calls: the positions of the batch's
  // misses, and the slots its misses took so far (an open-addressing
  // table the size of the misses, which stays in cache, where a repeat
  // of a miss would otherwise search the whole index).
  std::vector<size_t> misses;
  struct Taken {
    int64_t id = 0, slot = -1;  // slot -1: empty
    size_t load = 0;            // its index in the plan's loads
  };
  std::vector<Taken> taken;

  explicit State(EvictionPolicy p) : policy(std::move(p)) {}
  int64_t Find(int64_t id) const { return direct ? by_row.Find(id) : index.Find(id); }
  void FindMany(std::span<const int64_t> batch_ids, int64_t* slots) const {
    if (direct) {
      by_row.FindMany(batch_ids, slots);
    } else {
      index.FindMany(batch_ids, slots);
    }
  }
  [[gnu::always_inline]] void PrefetchIndex(int64_t id) const {
    if (direct) {
      by_row.Prefetch(id);
    } else {
      index.Prefetch(id);
    }
  }
  void Index(int64_t id, int64_t slot) {
    if (direct) {
      by_row.Insert(id, slot);
    } else {
      index.Insert(id, slot);
    }
  }
  void Unindex(int64_t id) {
    if (direct) {
      by_row.Erase(id);
    } else {
      index.Erase(id);
    }
  }
  int64_t capacity() const { return sets * ways + overflow; }
  int64_t SetOf(int64_t id) const {
    // The index homes ids by Fmix64's low bits; sets use its high bits.
    return static_cast<int64_t>(mc::ScaleToRange(mc::Fmix64(static_cast<uint64_t>(id)), static_cast<uint64_t>(sets)));
  }
  void Save(int64_t slot) {
    const auto u = static_cast<size_t>(slot);
    saved.push_back({slot, ids[u], uses[u], rows[u]});
    if (columns > 0) {
      const auto at = metadata.begin() + slot * columns;
      saved_metadata.insert(saved_metadata.end(), at, at + columns);
    }
  }
  void Undo() {
    for (auto it = inserted.rbegin(); it != inserted.rend(); ++it) Unindex(it->first);
    for (auto it = erased.rbegin(); it != erased.rend(); ++it) Index(it->first, it->second);
    auto meta = saved_metadata.end();
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      const auto u = static_cast<size_t>(it->slot);
      ids[u] = it->id;
      uses[u] = it->use;
      rows[u] = it->row;
      if (columns > 0) {
        meta -= columns;
        std::copy(meta, meta + columns, metadata.begin() + it->slot * columns);
      }
    }
    for (const auto& [slot, last] : hits_saved) {
      Use& use = uses[static_cast<size_t>(slot)];
      --use.count;
      use.last = last;
    }
  }
  // The slot a miss of this batch took, or -1 (`taken`, linear probing).
  size_t TakenHome(int64_t id) const { return mc::Fmix64(static_cast<uint64_t>(id)) & (taken.size() - 1); }
  const Taken* TakenBy(int64_t id) const {
    for (size_t b = TakenHome(id);; b = (b + 1) & (taken.size() - 1)) {
      if (taken[b].slot < 0) return nullptr;
      if (taken[b].id == id) return &taken[b];
    }
  }
  void Take(int64_t id, int64_t slot, size_t load) {
    size_t b = TakenHome(id);
    while (taken[b].slot >= 0) b = (b + 1) & (taken.size() - 1);
    taken[b] = {id, slot, load};
  }
  // Frees a slot, listing its row for a write-back when it changed.
  void Release(int64_t slot, Plan& plan) {
    Save(slot);
    const auto u = static_cast<size_t>(slot);
    const int64_t id = ids[u];
    if (rows[u] == Row::kDirty) {
      plan.write_back.ids.push_back(id);
      plan.write_back.slots.push_back(slot);
    }
    Unindex(id);
    erased.emplace_back(id, slot);
    ids[u] = -1;
    uses[u] = Use{};
    rows[u] = Row::kFree;
    if (columns > 0) std::fill_n(metadata.begin() + slot * columns, columns, 0);
  }
  // The way of `set` to evict for this batch, -1 when every way is held
  // by it; a free way first.
  // Victim's scratch, kept across calls (a miss in a full set is common).
  std::vector<int64_t> open, counts, lasts, windows, meta;
  std::vector<double> scores;

  StatusOr<int64_t> Victim(int64_t set) {
    open.clear();
    for (int64_t w = 0; w < ways; ++w) {
      const int64_t slot = set * ways + w;
      if (ids[static_cast<size_t>(slot)] < 0) return slot;
      if (uses[static_cast<size_t>(slot)].last != batch) open.push_back(slot);
    }
    if (open.empty()) return int64_t{-1};
    counts.resize(open.size());
    lasts.resize(open.size());
    windows.assign(open.size(), 0);
    meta.clear();
    for (size_t k = 0; k < open.size(); ++k) {
      counts[k] = uses[static_cast<size_t>(open[k])].count;
      lasts[k] = uses[static_cast<size_t>(open[k])].last;
      if (columns > 0) {
        meta.insert(meta.end(), metadata.begin() + open[k] * columns, metadata.begin() + (open[k] + 1) * columns);
      }
    }
    scores.assign(open.size(), 0.0);
    SR_RETURN_IF_ERROR(policy.ScoreEntries(batch, open.size(), counts, lasts, windows, meta, columns, scores)
                           .WithContext("row cache"));
    size_t worst = 0;
    for (size_t k = 0; k < open.size(); ++k) {
      if (std::isnan(scores[k])) return InternalError("row cache: " + policy.Describe() + " scored a way NaN");
      if (scores[k] <= scores[worst]) worst = k;  // ties: the later way goes, as it would rank last
    }
    for (size_t k = 0; k < open.size() && columns > 0; ++k) {  // the policy may update its columns
      Save(open[k]);
      std::copy_n(meta.begin() + static_cast<int64_t>(k) * columns, columns, metadata.begin() + open[k] * columns);
    }
    return open[worst];
  }
};

CacheDirectory::CacheDirectory(std::unique_ptr<State> state) : s_(std::move(state)) {}
CacheDirectory::CacheDirectory(CacheDirectory&&) noexcept = default;
CacheDirectory& CacheDirectory::operator=(CacheDirectory&&) noexcept = default;
CacheDirectory::~CacheDirectory() = default;

StatusOr<CacheDirectory> CacheDirectory::Create(const PluginRegistry& registry, const std::string& policy,
                                                const OptionList& policy_options, const CacheDirectoryConfig& config) {
  if (config.ways < 1 || config.ways > 1024) {
    return InvalidArgumentError(fmt::format("row cache: ways {} is outside 1..1024", config.ways));
  }
  if (config.slots < 1 || config.slots > (int64_t{1} << 36)) {
    return InvalidArgumentError(fmt::format("row cache: {} slots is outside 1..2^36", config.slots));
  }
  if (config.overflow < 0 || config.overflow > (int64_t{1} << 30)) {
    return InvalidArgumentError(fmt::format("row cache: overflow {} is outside 0..2^30", config.overflow));
  }
  SR_ASSIGN_OR_RETURN(auto ref, registry.Find(SR_KIND_EVICTION, policy));
  SR_ASSIGN_OR_RETURN(auto made, EvictionPolicy::Create(ref, policy_options));
  auto s = std::make_unique<State>(std::move(made));
  s->columns = ref.Int64Attribute("metadata_columns").value_or(0);
  if (s->columns < 0 || s->columns > 64) {
    return InvalidArgumentError(fmt::format("row cache: policy '{}' declares {} metadata columns (0..64)", policy,
                                            s->columns));
  }
  s->ways = config.ways;
  s->sets = (config.slots + config.ways - 1) / config.ways;
  s->overflow = config.overflow > 0 ? config.overflow : 2 * config.ways;
  s->ids.assign(static_cast<size_t>(s->capacity()), -1);
  s->uses.assign(static_cast<size_t>(s->capacity()), Use{});
  s->rows.assign(static_cast<size_t>(s->capacity()), Row::kFree);
  s->metadata.assign(static_cast<size_t>(s->capacity() * s->columns), 0);
  if (config.rows < 0 || config.rows > (int64_t{1} << 40)) {
    return InvalidArgumentError(fmt::format("row cache: {} rows is outside 0..2^40", config.rows));
  }
  s->id_limit = config.rows;
  // Half full at most (not managed collision's quarter): a cache of
  // millions of rows weighs its bookkeeping against the rows it could hold.
  // An array by row instead where it is the smaller (4 bytes a row against
  // 16 an entry at 2 to 4 entries a slot: a sixteenth to an eighth of the
  // rows cached, or more, by how the index's power of two falls).
  const auto index_bytes = static_cast<int64_t>(mc::IdIndexEntries(s->capacity(), 2) * 16);
  s->direct = config.rows > 0 && config.rows * 4 <= index_bytes && s->capacity() < (int64_t{1} << 31);
  if (s->direct) {
    s->by_row = RowSlotMap(config.rows);
  } else {
    s->index = mc::IdSlotIndex(s->capacity(), 2);
  }
  return CacheDirectory(std::move(s));
}

int64_t CacheDirectory::capacity() const { return s_->capacity(); }
int64_t CacheDirectory::set_slots() const { return s_->sets * s_->ways; }
int64_t CacheDirectory::ways() const { return s_->ways; }
int64_t CacheDirectory::bytes() const {
  return static_cast<int64_t>(s_->ids.size() * (sizeof(int64_t) + sizeof(Use) + sizeof(Row)) +
                              s_->metadata.size() * sizeof(int64_t) + s_->index.bytes() + s_->by_row.bytes());
}
const CacheCounters& CacheDirectory::counters() const { return s_->counters; }
int64_t CacheDirectory::SlotOf(int64_t id) const {
  if (id < 0 || (s_->id_limit > 0 && id >= s_->id_limit)) return -1;
  return s_->Find(id);
}

StatusOr<CacheDirectory::Plan> CacheDirectory::Assign(std::span<const int64_t> ids) {
  State& s = *s_;
  for (int64_t id : ids) {
    if (id < 0) return InvalidArgumentError(fmt::format("row cache: id {} is negative", id));
    if (s.id_limit > 0 && id >= s.id_limit) {
      return InvalidArgumentError(fmt::format("row cache: id {} is not a row of its {}", id, s.id_limit));
    }
  }
  s.saved.clear();
  s.hits_saved.clear();
  s.saved_metadata.clear();
  s.inserted.clear();
  s.erased.clear();
  const int64_t batch_before = s.batch;
  const std::vector<int64_t> overflow_before = s.overflow_held;
  const CacheCounters counters_before = s.counters;
  ++s.batch;
  Plan plan;
  auto fail = [&](Status st) -> StatusOr<Plan> {
    s.Undo();
    s.batch = batch_before;
    s.overflow_held = overflow_before;
    s.counters = counters_before;
    return st;
  };
  for (int64_t slot : s.overflow_held) s.Release(slot, plan);
  s.overflow_held.clear();
  plan.slots.resize(ids.size());
  s.FindMany(ids, plan.slots.data());  // prefetched lookups, many misses in flight
  // Hits: one access each per batch (a repeat is no second access).
  s.misses.clear();
  constexpr size_t kAhead = 16;  // hits' slots are scattered: bring each toward the cache early
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i + kAhead < ids.size() && plan.slots[i + kAhead] >= 0) {
      __builtin_prefetch(&s.uses[static_cast<size_t>(plan.slots[i + kAhead])], 1);
    }
    const int64_t slot = plan.slots[i];
    if (slot < 0) {
      s.misses.push_back(i);
      continue;
    }
    Use& hit = s.uses[static_cast<size_t>(slot)];
    if (hit.last == s.batch) continue;
    s.hits_saved.emplace_back(slot, hit.last);
    ++hit.count;
    hit.last = s.batch;
  }
  // Misses: a way of their set each, once per distinct id.
  s.taken.assign(std::bit_ceil(2 * s.misses.size() + 2), State::Taken{});
  int64_t next_overflow = s.sets * s.ways;
  int64_t loads = 0;
  for (size_t k = 0; k < s.misses.size(); ++k) {
    if (k + kAhead < s.misses.size()) {  // the set's first line, and the index entry the insert writes
      const int64_t ahead = ids[s.misses[k + kAhead]];
      __builtin_prefetch(&s.ids[static_cast<size_t>(s.SetOf(ahead) * s.ways)]);
      s.PrefetchIndex(ahead);
    }
    const size_t i = s.misses[k];
    const int64_t id = ids[i];
    if (const State::Taken* earlier = s.TakenBy(id)) {  // a repeat of a miss loaded above
      plan.slots[i] = earlier->slot;
      continue;
    }
    ++loads;
    auto victim = s.Victim(s.SetOf(id));
    if (!victim.ok()) return fail(victim.status());
    int64_t slot = *victim;
    if (slot < 0) {  // every way of the set holds this batch's ids
      if (next_overflow == s.capacity()) {
        return fail(Status(SR_RESOURCE_EXHAUSTED, fmt::format(
            "row cache: a batch of {} ids fills a set of {} ways and all {} overflow slots; raise the cache's "
            "load factor or its overflow (cache_params overflow=N: slots for one batch's ids beyond full sets), "
            "or lower the batch",
            ids.size(), s.ways, s.overflow)));
      }
      slot = next_overflow++;
      s.overflow_held.push_back(slot);
      ++s.counters.overflows;
    } else if (s.ids[static_cast<size_t>(slot)] >= 0) {
      s.Release(slot, plan);
      ++s.counters.evictions;
    }
    s.Save(slot);
    s.ids[static_cast<size_t>(slot)] = id;
    s.uses[static_cast<size_t>(slot)] = Use{1, s.batch};
    s.rows[static_cast<size_t>(slot)] = Row::kClean;
    s.Index(id, slot);
    s.inserted.emplace_back(id, slot);
    s.Take(id, slot, plan.load.ids.size());
    plan.slots[i] = slot;
    plan.load.ids.push_back(id);
    plan.load.slots.push_back(slot);
  }
  for (size_t w = 0; w < plan.write_back.ids.size(); ++w) {
    if (const State::Taken* back = s.TakenBy(plan.write_back.ids[w])) plan.reloads.emplace_back(back->load, w);
  }
  s.counters.lookups += static_cast<int64_t>(ids.size());
  s.counters.misses += loads;
  s.counters.hits += static_cast<int64_t>(ids.size()) - loads;
  s.counters.write_backs += static_cast<int64_t>(plan.write_back.ids.size());
  s.counters.reloads += static_cast<int64_t>(plan.reloads.size());
  return plan;
}

void CacheDirectory::MarkDirty(std::span<const int64_t> slots) {
  std::vector<Row>& rows = s_->rows;
  for (int64_t slot : slots) {
    if (slot >= 0 && static_cast<size_t>(slot) < rows.size() && rows[static_cast<size_t>(slot)] != Row::kFree) {
      rows[static_cast<size_t>(slot)] = Row::kDirty;
    }
  }
}

CacheDirectory::Move CacheDirectory::TakeDirty() {
  Move out;
  for (size_t slot = 0; slot < s_->ids.size(); ++slot) {
    if (s_->rows[slot] != Row::kDirty) continue;
    out.ids.push_back(s_->ids[slot]);
    out.slots.push_back(static_cast<int64_t>(slot));
    s_->rows[slot] = Row::kClean;
  }
  return out;
}

void CacheDirectory::Clear() {
  std::fill(s_->ids.begin(), s_->ids.end(), -1);
  std::fill(s_->uses.begin(), s_->uses.end(), Use{});
  std::fill(s_->rows.begin(), s_->rows.end(), Row::kFree);
  std::fill(s_->metadata.begin(), s_->metadata.end(), 0);
  s_->index.Clear();
  s_->by_row.Clear();
  s_->overflow_held.clear();
}

}  // namespace shardrec
