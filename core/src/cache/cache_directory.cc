// CacheDirectory (cache_directory.h). Per slot, in arrays of their own: the
// id it holds; its accesses and last access (what the policy scores; a slot
// whose last access is this batch is never a victim within it); the
// policy's own metadata columns; and one byte saying whether it is free,
// clean or dirty. A hit writes only its 16 bytes of accesses (four slots a
// cache line, where a record of id and accesses held two). A backward of
// the last batch marks it dirty whole (MarkBatchDirty) without touching a
// slot: a row is dirty when its last access is a batch trained since the
// last flush, and a hit that takes a slot from such a batch carries that
// in a bit of its last access (below, "Dirty by batch"). An id -> slot index
// (managed collision's) finds hits. Assign keeps an undo log, so that a
// failure half-way leaves the directory as it was.
//
// A batch's misses are decided in parts, by set (set % parts), on threads
// when there are enough of them: a miss's victim is the memory-bound scan of
// its set's ways, and sets never share a slot, so parts decide exactly what
// one pass in batch order would. Their lists merge back into that pass's
// order by the position of the miss that made each entry, and the index
// changes they make are applied afterwards on the calling thread (the
// hashed index is not thread-safe). Each part scores with a policy handle
// of its own; a policy that does not declare `thread_safe` gets one part.
#include "shardrec/core/cache/cache_directory.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <optional>

#include <tbb/parallel_for.h>

#include <fmt/format.h>

#include "../managed_collision/id_slot_index.h"
#include "row_slot_map.h"
#include "shardrec/core/managed_collision/id_hash.h"
#include "shardrec/core/plugin_objects.h"

namespace shardrec {

namespace {
// A slot's accesses: how many batches used it since it was filled, and the
// last of them (a batch number, from 1; 0 when free), with kCarried set
// when the row changed in an earlier batch (BatchOf strips it).
struct Use {
  int64_t count = 0, last = 0;
};
constexpr int64_t kCarried = int64_t{1} << 62;
constexpr int64_t BatchOf(int64_t last) { return last & ~kCarried; }
// A slot's row, beside the slot: free (no row), clean, or changed since
// it was loaded (written back when it leaves).
enum class Row : uint8_t { kFree, kClean, kDirty };
}  // namespace

namespace {
// Assign's undo log of slots: each slot's state before a change (its
// metadata, when the policy keeps some, in `metadata` in the same order),
// restored in reverse.
struct Saved {
  int64_t slot, id;
  Use use;
  Row row;
};
struct SlotLog {
  std::vector<Saved> saved;
  std::vector<int64_t> metadata;
  void Clear() {
    saved.clear();
    metadata.clear();
  }
};

// A batch's miss in a set's way, or an overflow slot wanted for it: `at`,
// the position in the batch of the miss that made it, orders every list
// the parts make as one pass would have.
struct Entry {
  size_t at;
  int64_t id, slot;
};

// The slot a miss of this batch took (kWantsOverflow: one the set could not
// give), in an open-addressing table the size of the misses, which stays
// in cache, where a repeat of a miss would otherwise search the whole index.
constexpr int64_t kWantsOverflow = -2;
struct Taken {
  int64_t id = 0, slot = -1;  // slot -1: empty
};
class TakenTable {
 public:
  void Reset(size_t misses) { t_.assign(std::bit_ceil(2 * misses + 2), Taken{}); }
  const Taken* Find(int64_t id) const {
    for (size_t b = Home(id);; b = (b + 1) & (t_.size() - 1)) {
      if (t_[b].slot == -1) return nullptr;
      if (t_[b].id == id) return &t_[b];
    }
  }
  void Put(int64_t id, int64_t slot) {
    size_t b = Home(id);
    while (t_[b].slot != -1) b = (b + 1) & (t_.size() - 1);
    t_[b] = {id, slot};
  }

 private:
  size_t Home(int64_t id) const { return mc::Fmix64(static_cast<uint64_t>(id)) & (t_.size() - 1); }
  std::vector<Taken> t_;
};

// One part of a batch's misses (the sets s with s % parts == its number):
// what it decided, its undo log, and its scratch, kept across batches.
struct Part {
  const EvictionPolicy* policy = nullptr;
  std::optional<EvictionPolicy> own;  // parts after the first: a handle of their own
  std::vector<std::pair<size_t, int64_t>> misses;  // (position in the batch, set)
  SlotLog log;
  std::vector<Entry> loads, write_backs, overflow;  // overflow: first sights that found their set held
  std::vector<size_t> overflow_repeats;             // repeats of those: their slot comes later
  std::vector<std::pair<int64_t, int64_t>> erased;  // (id, slot) it evicted: unindexed afterwards
  TakenTable taken;
  int64_t evictions = 0;
  Status failed = Status::Ok();
  size_t failed_at = 0;
  // Victim's scratch (a miss in a full set is common).
  std::vector<int64_t> open, counts, lasts, windows, meta;
  std::vector<double> scores;
  void Clear() {
    misses.clear();
    log.Clear();
    loads.clear();
    write_backs.clear();
    overflow.clear();
    overflow_repeats.clear();
    erased.clear();
    evictions = 0;
    failed = Status::Ok();
  }
};
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
  // Dirty by batch. A backward of the last batch (MarkBatchDirty) marks it
  // trained, which makes every row whose last access is that batch dirty
  // at once: a write per batch, where a mark per id cost a random line
  // (5 ns an id, 4% of a cached step). A row is then dirty when its byte
  // says so (MarkDirty), when its last access carries kCarried, or when
  // that access is a batch trained after `clean_through` (the last
  // flush's). A hit that moves the last access on from such a batch sets
  // kCarried, in the line it writes anyway, so a later batch that is never
  // trained (an evaluation) does not hide the change.
  bool batch_trained = false;  // MarkBatchDirty since the last Assign
  int64_t clean_through = 0;   // rows last used up to this batch were written by the last TakeDirty
  // Batches before `batch` that were not trained, as ascending [first, last]
  // runs (empty while every batch trains; dropped at a flush; at most
  // kMaxUntrainedRuns, 16 KiB).
  std::vector<std::pair<int64_t, int64_t>> untrained;
  std::vector<int64_t> overflow_held;  // overflow slots holding last batch's ids
  CacheCounters counters;
  std::vector<Part> parts;
  size_t parallel_from = 0;  // misses in a batch from which the parts run on threads

  // Assign's undo log: the slots it changed itself (the parts keep their
  // own), and the index's changes, undone in reverse. A hit changes only
  // its accesses, by one batch: (slot, last access before) is enough, in
  // its run's log (a hit's slot is never changed again in its batch).
  SlotLog log;
  std::vector<std::pair<int64_t, int64_t>> inserted;  // (id, slot)
  std::vector<std::pair<int64_t, int64_t>> erased;
  // Assign's scratch, kept across calls: per run of the batch (its hits
  // are counted on threads), the positions of its misses and its hits'
  // undo log; the loads made (for the reloads).
  struct Run {
    std::vector<size_t> misses;
    std::vector<std::pair<int64_t, int64_t>> hits_saved;
  };
  std::vector<Run> runs;
  size_t runs_used = 0;  // this batch's runs (the undo restores their hits)
  TakenTable loaded;

  explicit State(EvictionPolicy p) : policy(std::move(p)) {}
  bool Trained(int64_t b) const {
    if (b == batch) return batch_trained;
    if (untrained.empty() || b > untrained.back().second) return true;
    auto run = std::upper_bound(untrained.begin(), untrained.end(), b,
                                [](int64_t x, const std::pair<int64_t, int64_t>& r) { return x < r.first; });
    return run == untrained.begin() || b > std::prev(run)->second;
  }
  // Whether a slot's row changed since the last flush, by its last access.
  bool ChangedSince(int64_t last) const {
    return (last & kCarried) != 0 || (BatchOf(last) > clean_through && Trained(BatchOf(last)));
  }
  bool Dirty(size_t u) const { return rows[u] == Row::kDirty || ChangedSince(uses[u].last); }
  // Notes whether batch `b` (the last, before a new one starts) was
  // trained; again for the same batch after a refused Assign.
  void NoteTrained(int64_t b, bool trained) {
    if (b <= clean_through && !trained) return;  // rows up to it are clean either way
    const bool noted = !untrained.empty() && untrained.back().second == b;
    if (trained) {
      if (noted && untrained.back().first == b) {
        untrained.pop_back();
      } else if (noted) {
        --untrained.back().second;
      }
    } else if (!noted) {
      if (!untrained.empty() && untrained.back().second == b - 1) {
        untrained.back().second = b;
      } else if (untrained.size() >= kMaxUntrainedRuns) {
        Materialize();  // b is then at or below clean_through: clean until trained
      } else {
        untrained.emplace_back(b, b);
      }
    }
  }
  // Training and evaluation taking turns add a run per evaluation until a
  // flush drops them. Past kMaxUntrainedRuns, each slot's dirtiness by
  // batch is written into its byte instead (one pass over the slots every
  // thousand-odd evaluations), and no batch so far counts any more.
  static constexpr size_t kMaxUntrainedRuns = 1024;
  void Materialize() {
    for (size_t u = 0; u < ids.size(); ++u) {
      if (ids[u] < 0 || !ChangedSince(uses[u].last)) continue;
      rows[u] = Row::kDirty;
      uses[u].last = BatchOf(uses[u].last);
    }
    AllWritten();
  }
  // Every row's change so far is on the file or in its byte: no batch so
  // far makes a row dirty any more (a backward of the current one, still
  // to come, lowers clean_through again).
  void AllWritten() {
    clean_through = batch;
    untrained.clear();
  }
  StatusOr<Plan> DecideBatch(std::span<const int64_t> ids);
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
  void Save(SlotLog& to, int64_t slot) {
    const auto u = static_cast<size_t>(slot);
    to.saved.push_back({slot, ids[u], uses[u], rows[u]});
    if (columns > 0) {
      const auto at = metadata.begin() + slot * columns;
      to.metadata.insert(to.metadata.end(), at, at + columns);
    }
  }
  void Restore(const SlotLog& from) {
    auto meta = from.metadata.end();
    for (auto it = from.saved.rbegin(); it != from.saved.rend(); ++it) {
      const auto u = static_cast<size_t>(it->slot);
      ids[u] = it->id;
      uses[u] = it->use;
      rows[u] = it->row;
      if (columns > 0) {
        meta -= columns;
        std::copy(meta, meta + columns, metadata.begin() + it->slot * columns);
      }
    }
  }
  void Undo() {
    for (auto it = inserted.rbegin(); it != inserted.rend(); ++it) Unindex(it->first);
    for (auto it = erased.rbegin(); it != erased.rend(); ++it) Index(it->first, it->second);
    Restore(log);  // the parts' slots are set slots, these overflow slots: in any order
    for (const Part& p : parts) Restore(p.log);
    for (size_t r = 0; r < runs_used; ++r) {
      for (const auto& [slot, last] : runs[r].hits_saved) {
        Use& use = uses[static_cast<size_t>(slot)];
        --use.count;
        use.last = last;
      }
    }
  }
  // Empties a slot (its row listed in `write_backs` when it changed; its id
  // and slot in `gone`, for the index), logged in `to`.
  void Empty(SlotLog& to, int64_t slot, size_t at, std::vector<Entry>& write_backs,
             std::vector<std::pair<int64_t, int64_t>>& gone) {
    Save(to, slot);
    const auto u = static_cast<size_t>(slot);
    const int64_t id = ids[u];
    if (Dirty(u)) write_backs.push_back({at, id, slot});
    gone.emplace_back(id, slot);
    ids[u] = -1;
    uses[u] = Use{};
    rows[u] = Row::kFree;
    if (columns > 0) std::fill_n(metadata.begin() + slot * columns, columns, 0);
  }
  // Gives `slot` to `id` for this batch, logged in `to`.
  void Fill(SlotLog& to, int64_t slot, int64_t id) {
    Save(to, slot);
    ids[static_cast<size_t>(slot)] = id;
    uses[static_cast<size_t>(slot)] = Use{1, batch};
    rows[static_cast<size_t>(slot)] = Row::kClean;
  }

  // The way of `set` to evict for this batch, -1 when every way is held
  // by it; a free way first.
  StatusOr<int64_t> Victim(Part& p, int64_t set) {
    p.open.clear();
    for (int64_t w = 0; w < ways; ++w) {
      const int64_t slot = set * ways + w;
      if (ids[static_cast<size_t>(slot)] < 0) return slot;
      if (BatchOf(uses[static_cast<size_t>(slot)].last) != batch) p.open.push_back(slot);
    }
    if (p.open.empty()) return int64_t{-1};
    const size_t n = p.open.size();
    p.counts.resize(n);
    p.lasts.resize(n);
    p.windows.assign(n, 0);
    p.meta.clear();
    for (size_t k = 0; k < n; ++k) {
      p.counts[k] = uses[static_cast<size_t>(p.open[k])].count;
      p.lasts[k] = BatchOf(uses[static_cast<size_t>(p.open[k])].last);
      if (columns > 0) {
        p.meta.insert(p.meta.end(), metadata.begin() + p.open[k] * columns,
                      metadata.begin() + (p.open[k] + 1) * columns);
      }
    }
    p.scores.assign(n, 0.0);
    SR_RETURN_IF_ERROR(p.policy->ScoreEntries(batch, n, p.counts, p.lasts, p.windows, p.meta, columns, p.scores)
                           .WithContext("row cache"));
    size_t worst = 0;
    for (size_t k = 0; k < n; ++k) {
      if (std::isnan(p.scores[k])) return InternalError("row cache: " + policy.Describe() + " scored a way NaN");
      if (p.scores[k] <= p.scores[worst]) worst = k;  // ties: the later way goes, as it would rank last
    }
    for (size_t k = 0; k < n && columns > 0; ++k) {  // the policy may update its columns
      Save(p.log, p.open[k]);
      std::copy_n(p.meta.begin() + static_cast<int64_t>(k) * columns, columns, metadata.begin() + p.open[k] * columns);
    }
    return p.open[worst];
  }

  // A part's misses, in batch order: a way of their set each, once per
  // distinct id. Stops at the first failure (the policy's), noting where.
  void Decide(Part& p, std::span<const int64_t> batch_ids, std::vector<int64_t>& slots) {
    constexpr size_t kAhead = 8;  // sets are scattered: bring each toward the cache early
    p.taken.Reset(p.misses.size());
    for (size_t k = 0; k < p.misses.size(); ++k) {
      if (k + kAhead < p.misses.size()) {
        const auto ahead = static_cast<size_t>(p.misses[k + kAhead].second * ways);
        __builtin_prefetch(&ids[ahead]);
        __builtin_prefetch(&uses[ahead]);
      }
      const auto [i, set] = p.misses[k];
      const int64_t id = batch_ids[i];
      if (const Taken* earlier = p.taken.Find(id)) {  // a repeat of a miss decided above
        if (earlier->slot == kWantsOverflow) {
          p.overflow_repeats.push_back(i);
        } else {
          slots[i] = earlier->slot;
        }
        continue;
      }
      auto victim = Victim(p, set);
      if (!victim.ok()) {
        p.failed = victim.status();
        p.failed_at = i;
        return;
      }
      const int64_t slot = *victim;
      if (slot < 0) {  // every way of the set holds this batch's ids
        p.overflow.push_back({i, id, kWantsOverflow});
        p.taken.Put(id, kWantsOverflow);
        continue;
      }
      if (ids[static_cast<size_t>(slot)] >= 0) {
        Empty(p.log, slot, i, p.write_backs, p.erased);
        ++p.evictions;
      }
      Fill(p.log, slot, id);
      p.taken.Put(id, slot);
      slots[i] = slot;
      p.loads.push_back({i, id, slot});
    }
  }
};

namespace {
// The parts' entries of some kinds, in batch order (each position made
// one): every list is in batch order already, so runs merge in pairs.
std::vector<Entry> InBatchOrder(const std::vector<Part>& parts, std::initializer_list<std::vector<Entry> Part::*> lists) {
  std::vector<Entry> out;
  std::vector<size_t> runs = {0};
  for (const Part& p : parts) {
    for (auto list : lists) {
      if ((p.*list).empty()) continue;
      out.insert(out.end(), (p.*list).begin(), (p.*list).end());
      runs.push_back(out.size());
    }
  }
  const auto before = [](const Entry& x, const Entry& y) { return x.at < y.at; };
  for (size_t width = 1; width + 1 < runs.size(); width *= 2) {
    for (size_t r = 0; r + width + 1 < runs.size(); r += 2 * width) {
      const size_t end = runs[std::min(r + 2 * width, runs.size() - 1)];
      std::inplace_merge(out.begin() + static_cast<std::ptrdiff_t>(runs[r]),
                         out.begin() + static_cast<std::ptrdiff_t>(runs[r + width]),
                         out.begin() + static_cast<std::ptrdiff_t>(end), before);
    }
  }
  return out;
}
}  // namespace

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
  if (config.parts < 1 || config.parts > 256 || config.parallel_from < 0) {
    return InvalidArgumentError(fmt::format("row cache: {} parts (1..256), parallel from {} misses (>= 0)",
                                            config.parts, config.parallel_from));
  }
  // Parts score on threads of their own, so only a policy that says it may
  // be called from several threads at once gets more than one (docs/abi.md:
  // otherwise the host serialises its calls).
  const bool concurrent = ref.BoolAttribute("thread_safe").value_or(false);
  s->parts.resize(static_cast<size_t>(concurrent ? config.parts : 1));
  s->parts[0].policy = &s->policy;
  for (size_t p = 1; p < s->parts.size(); ++p) {
    SR_ASSIGN_OR_RETURN(auto own, EvictionPolicy::Create(ref, policy_options));
    s->parts[p].own.emplace(std::move(own));
    s->parts[p].policy = &*s->parts[p].own;
  }
  s->parallel_from = static_cast<size_t>(config.parallel_from);
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
  s.log.Clear();
  s.inserted.clear();
  s.erased.clear();
  for (Part& p : s.parts) p.Clear();
  s.runs_used = 0;
  const int64_t batch_before = s.batch;
  const bool trained_before = s.batch_trained;
  std::vector<int64_t> overflow_before;
  const CacheCounters counters_before = s.counters;
  auto fail = [&](Status st) -> StatusOr<Plan> {
    s.Undo();
    s.batch = batch_before;
    s.batch_trained = trained_before;
    s.overflow_held = overflow_before;
    s.counters = counters_before;
    return st;
  };
  // Every change below is logged before it is made, so an exception (out
  // of memory, on this thread or a part's) is undone like a refusal.
  try {
    overflow_before = s.overflow_held;
    if (s.batch > 0) s.NoteTrained(s.batch, s.batch_trained);  // true whether or not this batch goes through
    ++s.batch;
    s.batch_trained = false;
    auto plan = s.DecideBatch(ids);
    if (!plan.ok()) return fail(plan.status());
    return plan;
  } catch (const std::bad_alloc&) {
    return fail(Status(SR_RESOURCE_EXHAUSTED,
                       fmt::format("row cache: out of memory deciding a batch of {} ids", ids.size())));
  } catch (const std::exception& e) {
    return fail(InternalError(fmt::format("row cache: deciding a batch of {} ids: {}", ids.size(), e.what())));
  }
}

// Assign's work after its checks; an error leaves the undo to Assign.
StatusOr<CacheDirectory::Plan> CacheDirectory::State::DecideBatch(std::span<const int64_t> ids) {
  State& s = *this;
  Plan plan;
  constexpr size_t kAhead = 16;  // scattered slots and index entries: each brought toward the cache early
  // Last batch's overflow ids leave first.
  std::vector<Entry> released;
  for (int64_t slot : s.overflow_held) {
    s.Empty(s.log, slot, 0, released, s.erased);
    s.Unindex(s.erased.back().first);  // the index changes only once the change is logged
  }
  for (const Entry& e : released) {
    plan.write_back.ids.push_back(e.id);
    plan.write_back.slots.push_back(e.slot);
  }
  s.overflow_held.clear();
  // Hits: one access each per batch (a repeat is no second access), found
  // and counted in runs of the batch on threads when it is large. A
  // repeated id's slot is claimed by whichever run sets its last access
  // first (compare-and-swap); only that run counts it.
  plan.slots.resize(ids.size());
  constexpr size_t kRun = 4096;
  const size_t runs = ids.size() >= 2 * kRun ? (ids.size() + kRun - 1) / kRun : 1;
  if (s.runs.size() < runs) s.runs.resize(runs);
  for (size_t r = 0; r < runs; ++r) {  // before any run starts: the undo reads every one
    s.runs[r].misses.clear();
    s.runs[r].hits_saved.clear();
  }
  s.runs_used = runs;
  auto count_hits = [&](size_t r) {
    State::Run& run = s.runs[r];
    const size_t from = r * ids.size() / runs, to = (r + 1) * ids.size() / runs;
    run.hits_saved.reserve(to - from);  // a hit is logged as it is counted, which must not throw
    int64_t* slots = plan.slots.data();
    s.FindMany(ids.subspan(from, to - from), slots + from);  // prefetched lookups, many misses in flight
    for (size_t i = from; i < to; ++i) {
      if (i + kAhead < to && slots[i + kAhead] >= 0) {
        __builtin_prefetch(&s.uses[static_cast<size_t>(slots[i + kAhead])], 1);
      }
      const int64_t slot = slots[i];
      if (slot < 0) {
        run.misses.push_back(i);
        continue;
      }
      Use& hit = s.uses[static_cast<size_t>(slot)];
      std::atomic_ref<int64_t> last(hit.last);
      int64_t before = last.load(std::memory_order_relaxed);
      if (BatchOf(before) == s.batch) continue;
      const int64_t now = s.ChangedSince(before) ? (s.batch | kCarried) : s.batch;
      if (!last.compare_exchange_strong(before, now, std::memory_order_relaxed)) continue;
      run.hits_saved.emplace_back(slot, before);
      ++hit.count;  // only the run whose swap took the slot gets here
    }
  };
  if (runs > 1 && s.parts.size() > 1 && ids.size() >= s.parallel_from) {
    tbb::parallel_for(size_t{0}, runs, count_hits);
  } else {
    for (size_t r = 0; r < runs; ++r) count_hits(r);
  }
  // Misses: each part decides its sets', on threads when they are many.
  const auto parts = s.parts.size();
  size_t misses = 0;
  for (size_t r = 0; r < runs; ++r) {
    for (size_t i : s.runs[r].misses) {
      const int64_t set = s.SetOf(ids[i]);
      s.parts[static_cast<size_t>(set) % parts].misses.emplace_back(i, set);
    }
    misses += s.runs[r].misses.size();
  }
  std::vector<int64_t>& slots = plan.slots;
  if (misses >= s.parallel_from && parts > 1) {
    tbb::parallel_for(size_t{0}, parts, [&](size_t p) { s.Decide(s.parts[p], ids, slots); });
  } else {
    for (Part& p : s.parts) s.Decide(p, ids, slots);
  }
  auto overflow_refused = [&] {
    return Status(SR_RESOURCE_EXHAUSTED, fmt::format(
        "row cache: a batch of {} ids fills a set of {} ways and all {} overflow slots; raise the cache's "
        "load factor or its overflow (cache_params overflow=N: slots for one batch's ids beyond full sets), "
        "or lower the batch",
        ids.size(), s.ways, s.overflow));
  };
  // The first failure in batch order, as one pass would meet it: a part's
  // policy, or an earlier first sight that finds the overflow slots taken
  // (every part decided every miss before its own failure).
  const Part* failed = nullptr;
  for (const Part& p : s.parts) {
    if (!p.failed.ok() && (failed == nullptr || p.failed_at < failed->failed_at)) failed = &p;
  }
  if (failed != nullptr) {
    const std::vector<Entry> wanted = InBatchOrder(s.parts, {&Part::overflow});
    const auto room = static_cast<size_t>(s.overflow);
    if (wanted.size() > room && wanted[room].at < failed->failed_at) return overflow_refused();
    return failed->failed;
  }
  // The parts' index changes and lists, in batch order (each logged first).
  for (const Part& p : s.parts) {
    for (const auto& [id, slot] : p.erased) {
      s.erased.emplace_back(id, slot);
      s.Unindex(id);
    }
  }
  for (const Entry& e : InBatchOrder(s.parts, {&Part::write_backs})) {
    plan.write_back.ids.push_back(e.id);
    plan.write_back.slots.push_back(e.slot);
  }
  std::vector<Entry> incoming = InBatchOrder(s.parts, {&Part::loads, &Part::overflow});
  // Overflow slots, in batch order: for first sights whose set this batch holds whole.
  int64_t next_overflow = s.sets * s.ways;
  for (size_t k = 0; k < incoming.size(); ++k) {
    if (k + kAhead < incoming.size()) s.PrefetchIndex(incoming[k + kAhead].id);
    Entry& e = incoming[k];
    if (e.slot == kWantsOverflow) {
      if (next_overflow == s.capacity()) return overflow_refused();
      e.slot = next_overflow++;
      s.Fill(s.log, e.slot, e.id);
      s.overflow_held.push_back(e.slot);
      ++s.counters.overflows;
      slots[e.at] = e.slot;
    }
    s.inserted.emplace_back(e.id, e.slot);
    s.Index(e.id, e.slot);
    plan.load.ids.push_back(e.id);
    plan.load.slots.push_back(e.slot);
  }
  for (const Part& p : s.parts) {
    for (size_t i : p.overflow_repeats) slots[i] = s.Find(ids[i]);
  }
  s.loaded.Reset(plan.load.ids.size());
  for (size_t k = 0; k < plan.load.ids.size(); ++k) s.loaded.Put(plan.load.ids[k], static_cast<int64_t>(k));
  for (size_t w = 0; w < plan.write_back.ids.size(); ++w) {
    if (const Taken* back = s.loaded.Find(plan.write_back.ids[w])) {
      plan.reloads.emplace_back(static_cast<size_t>(back->slot), w);
    }
  }
  const auto loads = static_cast<int64_t>(plan.load.ids.size());
  for (const Part& p : s.parts) s.counters.evictions += p.evictions;
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

void CacheDirectory::MarkBatchDirty() {
  State& s = *s_;
  if (s.batch == 0) return;
  s.batch_trained = true;
  s.clean_through = std::min(s.clean_through, s.batch - 1);  // changed again after a flush
}

CacheDirectory::Move CacheDirectory::TakeDirty() {
  State& s = *s_;
  Move out;
  for (size_t slot = 0; slot < s.ids.size(); ++slot) {
    if (!s.Dirty(slot)) continue;
    out.ids.push_back(s.ids[slot]);
    out.slots.push_back(static_cast<int64_t>(slot));
    s.rows[slot] = Row::kClean;
    s.uses[slot].last = BatchOf(s.uses[slot].last);
  }
  s.AllWritten();
  return out;
}

void CacheDirectory::Clear() {
  std::fill(s_->ids.begin(), s_->ids.end(), -1);
  std::fill(s_->uses.begin(), s_->uses.end(), Use{});
  std::fill(s_->rows.begin(), s_->rows.end(), Row::kFree);
  std::fill(s_->metadata.begin(), s_->metadata.end(), 0);
  s_->AllWritten();  // no row left to be dirty
  s_->index.Clear();
  s_->by_row.Clear();
  s_->overflow_held.clear();
}

}  // namespace shardrec
