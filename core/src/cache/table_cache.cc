// TableCache (table_cache.h). A row on file is a slot's row as the kernel
// keeps it: the weights in the table's dtype, then the optimizer state as
// float32. Before a batch's lookup: the directory's plan, the dirty victims
// copied out of their slots, the misses read from the file (or drawn, when
// never written) and written into theirs, then the victims written to the
// file on the writer thread while the batch trains. Rows cross into and out
// of the kernel packed as they are on the file, through strided views of
// weights and state (MoveAsViews), not split into two tensors and copied
// again (issue 23's lru 0.9 warm pass: 0.47 -> 0.49 of the in-memory
// table, docs/benchmarks.md).
#include "shardrec/core/cache/table_cache.h"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <exception>
#include <new>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "shardrec/core/dl_view.h"
#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/sdk/init.hpp"

namespace shardrec {

struct TableCache::State {
  EmbeddingTableConfig config;
  CachedRowFormat format;
  TableCacheSpec spec;
  CacheDirectory dir;
  RowFile file;
  int64_t dim = 0, weight_bytes = 0, row_bytes = 0;
  // Prefetch's staging: row id -> its place in `staged_rows`.
  mutable std::mutex mu;  // Prefetch against everything else
  std::unordered_map<int64_t, size_t> staged;
  std::vector<std::byte> staged_rows;
  int64_t staged_limit = 0;  // rows; about one step's
  PrefetchCounters prefetch;
  // Gather's scratch, kept across batches.
  std::vector<std::byte> io_buf, drawn_weights;
  std::vector<int64_t> from_behind, file_ids, drawn_ids;
  std::vector<size_t> file_at, drawn_at;
  // The write-back in flight (WriteBehind), and what it returned. The
  // buffers are kept across batches (about a step's rows at most).
  std::thread writer;
  Status writer_status = Status::Ok();
  std::vector<int64_t> behind_ids;
  std::vector<std::byte> behind_rows;
  Status failed = Status::Ok();  // a write-back or load failed: every later call refuses
  // Whole rows go in and out of the kernel as strided views of the buffer
  // they are packed in (MoveAsViews), not split into two tensors and
  // copied again, until the kernel refuses them.
  bool packed_views = true;

  Status Usable() const {
    if (failed.ok()) return Status::Ok();
    return FailedPreconditionError("table '" + config.name + "': its cache stopped after an I/O error (" +
                                   failed.message() + "); its row file no longer matches it: start again from the "
                                   "last checkpoint");
  }

  // A row whose copy on the file changes: its staged copy is stale.
  void Unstage(std::span<const int64_t> ids) {
    if (staged.empty()) return;
    for (int64_t id : ids) staged.erase(id);
    if (staged.empty()) staged_rows.clear();
  }

  State(EmbeddingTableConfig c, CachedRowFormat f, TableCacheSpec s, CacheDirectory d, RowFile r)
      : config(std::move(c)), format(f), spec(std::move(s)), dir(std::move(d)), file(std::move(r)) {}
  // A failure of the last write-back is dropped here: the row file is
  // scratch, and its rows are not kept past the table.
  ~State() { Settle(); }

  // Waits for the write-back in flight; its failure stops the cache.
  void Settle() {
    if (!writer.joinable()) return;
    writer.join();
    if (!writer_status.ok() && failed.ok()) failed = writer_status;
    writer_status = Status::Ok();
  }
  // Writes `behind_ids` / `behind_rows` (Save's, `behind` true) on the
  // writer thread; synchronously when no thread can be made.
  void WriteBehind() {
    if (behind_ids.empty()) return;
    try {
      writer = std::thread([this] {
        try {
          writer_status = file.Write(behind_ids, behind_rows.data());
        } catch (const std::bad_alloc&) {
          writer_status = Status(SR_RESOURCE_EXHAUSTED, "out of memory writing back " +
                                                            std::to_string(behind_ids.size()) + " rows");
        } catch (const std::exception& e) {  // e.g. the I/O pool's std::system_error: an error, not std::terminate
          writer_status = InternalError("writing back " + std::to_string(behind_ids.size()) + " rows: " + e.what());
        }
      });
    } catch (const std::exception&) {  // no thread (std::system_error, bad_alloc): write now
      if (Status st = file.Write(behind_ids, behind_rows.data()); !st.ok() && failed.ok()) failed = st;
    }
  }

  int64_t state_dim() const { return format.state_dim; }
  Tensor* StateOrNull(Tensor& st) const { return state_dim() > 0 ? &st : nullptr; }

  Status CheckRows(std::span<const int64_t> rows) const {
    for (int64_t r : rows) {
      if (r < 0 || r >= config.num_embeddings) {
        return InvalidArgumentError(fmt::format("table '{}': row {} is outside its {} rows", config.name, r,
                                                config.num_embeddings));
      }
    }
    return Status::Ok();
  }

  // Initial weights of `ids` at their global rows and columns, in the
  // table's dtype, into `out` (n x weight_bytes): drawn straight into it
  // when the table is float32, else drawn as float32 and converted.
  Status Draw(std::span<const int64_t> ids, std::byte* out) const {
    const auto n = static_cast<int64_t>(ids.size());
    const bool direct = SameDType(format.weight_dtype, dtype::kFloat32);
    Tensor f = direct ? Tensor() : Tensor::Empty(dtype::kFloat32, {n, dim});
    float* to = direct ? reinterpret_cast<float*>(out) : f.data<float>();
    // Each row drawn alone (a hash of seed, row and column), so rows split
    // over threads draw the same bytes; a cold pass draws a row per first sight.
    auto draw = [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        const auto id = ids[static_cast<size_t>(k)];
        const int64_t global = spec.global_rows.empty() ? format.row_origin + id
                                                        : spec.global_rows[static_cast<size_t>(id)];
        sdk::InitialRowWeights(format.init_seed, global, format.col_origin, dim, config.init_min(),
                               config.init_max(), to + k * dim);
      }
    };
    constexpr int64_t kRowsPerTask = 512;
    if (n < 2 * kRowsPerTask) {
      draw(0, n);
    } else {
      tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kRowsPerTask),
                        [&](const tbb::blocked_range<int64_t>& r) { draw(r.begin(), r.end()); });
    }
    if (direct) return Status::Ok();
    SR_ASSIGN_OR_RETURN(Tensor typed, FromFloat32(f, format.weight_dtype, "initial rows of " + config.name));
    std::memcpy(out, typed.raw_data(), typed.nbytes());
    return Status::Ok();
  }

  // Whole rows (weights then state) <-> the two tensors' row i.
  void Pack(const Tensor& w, const Tensor& st, std::byte* rows, int64_t n) const {
    for (int64_t i = 0; i < n; ++i) {
      std::byte* row = rows + i * row_bytes;
      std::memcpy(row, static_cast<const std::byte*>(w.raw_data()) + i * weight_bytes, static_cast<size_t>(weight_bytes));
      if (state_dim() > 0) {
        std::memcpy(row + weight_bytes, st.data<float>() + i * state_dim(), static_cast<size_t>(state_dim()) * 4);
      }
    }
  }
  void Unpack(const std::byte* row, Tensor* w, Tensor* st, int64_t i) const {
    if (w != nullptr) {
      std::memcpy(static_cast<std::byte*>(w->raw_data()) + i * weight_bytes, row, static_cast<size_t>(weight_bytes));
    }
    if (st != nullptr && state_dim() > 0) {
      std::memcpy(st->data<float>() + i * state_dim(), row + weight_bytes, static_cast<size_t>(state_dim()) * 4);
    }
  }

  // The whole rows (weights, then state) of `ids`, none of them in a slot,
  // each handed to `place(i, row)` for ids[i]: rows this batch wrote back
  // (`reloads`: (i, row of behind_rows), not on the file yet), rows a
  // prefetch staged, rows on the file, and rows never written, drawn with
  // the kernel's fresh optimizer state.
  template <class Place>
  Status Gather(std::span<const int64_t> ids, std::span<const std::pair<size_t, size_t>> reloads, Place place) {
    return Gather(ids, reloads, place, [&](std::span<const size_t> at, const std::byte* rows) {
      for (size_t k = 0; k < at.size(); ++k) place(at[k], rows + k * static_cast<size_t>(row_bytes));
      return Status::Ok();
    });
  }
  // The same, the rows read from the file and the rows drawn handed over
  // in blocks: place_block(at, rows), rows[k] (packed) for ids[at[k]].
  template <class Place, class PlaceBlock>
  Status Gather(std::span<const int64_t> ids, std::span<const std::pair<size_t, size_t>> reloads, Place place,
                PlaceBlock place_block) {
    const auto rb = static_cast<size_t>(row_bytes);
    from_behind.assign(ids.size(), -1);
    for (const auto& [i, back] : reloads) from_behind[i] = static_cast<int64_t>(back);
    file_ids.clear();
    file_at.clear();
    drawn_ids.clear();
    drawn_at.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
      if (from_behind[i] >= 0) {
        place(i, behind_rows.data() + static_cast<size_t>(from_behind[i]) * rb);
      } else if (!file.Written(ids[i])) {
        drawn_ids.push_back(ids[i]);
        drawn_at.push_back(i);
      } else if (const auto it = staged.find(ids[i]); it != staged.end()) {
        place(i, staged_rows.data() + it->second);
        ++prefetch.used;
        staged.erase(it);  // taken: the staging holds only rows still ahead
      } else {
        file_ids.push_back(ids[i]);
        file_at.push_back(i);
      }
    }
    if (staged.empty()) staged_rows.clear();
    if (!file_ids.empty()) {
      io_buf.resize(file_ids.size() * rb);
      SR_RETURN_IF_ERROR(file.Read(file_ids, io_buf.data()));
      SR_RETURN_IF_ERROR(place_block(file_at, io_buf.data()));
    }
    if (!drawn_ids.empty()) {
      io_buf.resize(drawn_ids.size() * rb);
      const auto wb = static_cast<size_t>(weight_bytes);
      drawn_weights.resize(drawn_ids.size() * wb);
      SR_RETURN_IF_ERROR(Draw(drawn_ids, drawn_weights.data()));
      for (size_t k = 0; k < drawn_ids.size(); ++k) {
        std::byte* row = io_buf.data() + k * rb;
        std::memcpy(row, drawn_weights.data() + k * wb, wb);
        if (state_dim() > 0) std::memcpy(row + wb, format.initial_state.data(), static_cast<size_t>(state_dim()) * 4);
      }
      SR_RETURN_IF_ERROR(place_block(drawn_at, io_buf.data()));
    }
    return Status::Ok();
  }

  // Rows `ids` not in a slot, as whole rows (n x row_bytes).
  Status Fetch(std::span<const int64_t> ids, std::vector<std::byte>& rows) {
    rows.resize(ids.size() * static_cast<size_t>(row_bytes));
    return Gather(ids, {}, [&](size_t i, const std::byte* row) {
      std::memcpy(rows.data() + i * static_cast<size_t>(row_bytes), row, static_cast<size_t>(row_bytes));
    });
  }

  // Rows of `m.slots` out of the kernel, onto the file as `m.ids`: now,
  // or (`behind`) copied into behind_ids / behind_rows for WriteBehind.
  Status Save(const CacheDirectory::Move& m, const CacheSlots& slots, bool behind) {
    behind_ids.clear();
    if (m.ids.empty()) return Status::Ok();
    const auto n = static_cast<int64_t>(m.ids.size());
    behind_rows.resize(static_cast<size_t>(n * row_bytes));
    SR_RETURN_IF_ERROR(ReadPacked(slots, m.slots, behind_rows.data()));
    Unstage(m.ids);
    if (behind) {
      behind_ids = m.ids;
      return Status::Ok();
    }
    return file.Write(m.ids, behind_rows.data());
  }

  // Rows `m.ids` into the kernel at `m.slots`, packed as they come: the
  // file's rows and the drawn ones as the blocks they are read or drawn
  // in, the few others (written back this batch, staged) gathered into one
  // more block. `reloads`: (index in m, row of behind_rows) for rows this
  // batch wrote back.
  Status Load(const CacheDirectory::Move& m, const CacheSlots& slots,
              std::span<const std::pair<size_t, size_t>> reloads = {}) {
    if (m.ids.empty()) return Status::Ok();
    std::vector<std::byte> others;
    std::vector<int64_t> others_slots, block_slots;
    SR_RETURN_IF_ERROR(Gather(
        m.ids, reloads,
        [&](size_t i, const std::byte* row) {
          others.insert(others.end(), row, row + row_bytes);
          others_slots.push_back(m.slots[i]);
        },
        [&](std::span<const size_t> at, const std::byte* rows) {
          block_slots.resize(at.size());
          for (size_t k = 0; k < at.size(); ++k) block_slots[k] = m.slots[at[k]];
          return WritePacked(slots, block_slots, rows);
        }));
    return others_slots.empty() ? Status::Ok() : WritePacked(slots, others_slots, others.data());
  }
  // Rows of `slot_list` out of the kernel into `rows`, packed (weights,
  // then state, row_bytes apart), and back in.
  Status ReadPacked(const CacheSlots& slots, std::span<const int64_t> slot_list, std::byte* rows) {
    SR_ASSIGN_OR_RETURN(const bool viewed, MoveAsViews(slots, slot_list, rows, /*reading=*/true));
    if (viewed) return Status::Ok();
    const auto n = static_cast<int64_t>(slot_list.size());
    Tensor w = Tensor::Empty(format.weight_dtype, {n, dim}), st = Tensor::Empty(dtype::kFloat32, {n, state_dim()});
    SR_RETURN_IF_ERROR(slots.Read(slot_list, &w, StateOrNull(st)));
    Pack(w, st, rows, n);
    return Status::Ok();
  }
  Status WritePacked(const CacheSlots& slots, std::span<const int64_t> slot_list, const std::byte* rows) {
    SR_ASSIGN_OR_RETURN(const bool viewed,
                        MoveAsViews(slots, slot_list, const_cast<std::byte*>(rows), /*reading=*/false));
    if (viewed) return Status::Ok();
    const auto n = static_cast<int64_t>(slot_list.size());
    Tensor w = Tensor::Empty(format.weight_dtype, {n, dim}), st = Tensor::Empty(dtype::kFloat32, {n, state_dim()});
    for (int64_t i = 0; i < n; ++i) Unpack(rows + i * row_bytes, &w, &st, i);
    return slots.Write(slot_list, &w, StateOrNull(st));
  }
  // Packed rows through two strided views, weights and state (write_rows
  // only reads through them). false: not moved, because the layout puts a
  // view off its element's alignment (fp16 weights of an odd width), or
  // the kernel refused strided views (SR_INVALID_ARGUMENT, which writes
  // nothing; not asked again); the caller splits the rows into tensors.
  StatusOr<bool> MoveAsViews(const CacheSlots& slots, std::span<const int64_t> slot_list, std::byte* rows,
                             bool reading) {
    const auto elem = static_cast<int64_t>(DTypeSize(format.weight_dtype));
    const bool aligned = elem > 0 && row_bytes % elem == 0 &&
                         (state_dim() == 0 || (weight_bytes % 4 == 0 && row_bytes % 4 == 0));
    if (!packed_views || !aligned) return false;
    const auto n = static_cast<int64_t>(slot_list.size());
    DLView w(rows, format.weight_dtype, n, dim, row_bytes / elem);
    DLView st(rows + weight_bytes, dtype::kFloat32, n, state_dim(), row_bytes / 4);
    DLTensor* state_view = state_dim() > 0 ? st.get() : nullptr;
    const Status moved = reading ? slots.ReadViews(slot_list, w.get(), state_view)
                                 : slots.WriteViews(slot_list, w.get(), state_view);
    if (moved.code() == SR_INVALID_ARGUMENT) {
      packed_views = false;
      return false;
    }
    if (!moved.ok()) return moved;
    return true;
  }

  // `rows` split by where they are: (position, slot) of the cached ones,
  // (position, row) of the others.
  struct Split {
    std::vector<size_t> cached_at, other_at;
    std::vector<int64_t> cached_slots, other_rows;
  };
  Split SplitRows(std::span<const int64_t> rows) const {
    Split s;
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t slot = dir.SlotOf(rows[i]);
      if (slot >= 0) {
        s.cached_at.push_back(i);
        s.cached_slots.push_back(slot);
      } else {
        s.other_at.push_back(i);
        s.other_rows.push_back(rows[i]);
      }
    }
    return s;
  }
};

TableCache::TableCache(std::unique_ptr<State> state) : s_(std::move(state)) {}
TableCache::TableCache(TableCache&&) noexcept = default;
TableCache& TableCache::operator=(TableCache&&) noexcept = default;
TableCache::~TableCache() = default;

StatusOr<CacheDirectory> TableCache::MakeDirectory(const PluginRegistry& registry, const EmbeddingTableConfig& table,
                                                   const CacheParams& params) {
  SR_RETURN_IF_ERROR(ValidateCacheParams(params, table));
  if (!(params.load_factor > 0)) {
    return InvalidArgumentError("table '" + table.name + "': a cached table needs a load factor in (0, 1]");
  }
  const int64_t want = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(params.load_factor * static_cast<double>(table.num_embeddings))));
  auto dir = CacheDirectory::Create(registry, params.algorithm, params.algorithm_options,
                                    {.slots = std::min(want, table.num_embeddings), .ways = params.ways,
                                     .overflow = params.overflow, .rows = table.num_embeddings});
  if (!dir.ok()) return dir.status().WithContext("table '" + table.name + "': its cache");
  return dir;
}

StatusOr<TableCache> TableCache::Create(CacheDirectory directory, const EmbeddingTableConfig& table,
                                        const CachedRowFormat& format, TableCacheSpec spec) {
  if (static_cast<int64_t>(format.initial_state.size()) != format.state_dim) {
    return InternalError(fmt::format("table '{}': an initial state of {} values for {} per row", table.name,
                                     format.initial_state.size(), format.state_dim));
  }
  if (!spec.global_rows.empty() && static_cast<int64_t>(spec.global_rows.size()) != table.num_embeddings) {
    return InternalError(fmt::format("table '{}': {} global rows for {} rows", table.name, spec.global_rows.size(),
                                     table.num_embeddings));
  }
  const int64_t weight_bytes = table.embedding_dim * static_cast<int64_t>(DTypeSize(format.weight_dtype));
  const RowFileSpec file_spec{table.num_embeddings, weight_bytes + format.state_dim * 4,
                              fmt::format("table '{}': {} x {} weights + {} x float32 optimizer state", table.name,
                                          table.embedding_dim, DTypeName(format.weight_dtype), format.state_dim),
                              spec.params.io_threads, spec.params.io, spec.params.layout};
  auto file = RowFile::CreateScratch(spec.file, file_spec);
  if (!file.ok()) return file.status().WithContext("table '" + table.name + "': its row file");
  auto s = std::make_unique<State>(table, format, std::move(spec), std::move(directory), std::move(file).value());
  s->dim = table.embedding_dim;
  s->weight_bytes = weight_bytes;
  s->row_bytes = file_spec.row_bytes;
  s->staged_limit = s->dir.capacity() - s->dir.set_slots();  // the overflow: one step's ids
  return TableCache(std::move(s));
}

int64_t TableCache::capacity() const { return s_->dir.capacity(); }
int64_t TableCache::cached_rows() const { return s_->dir.set_slots(); }
int64_t TableCache::ram_bytes() const {
  return capacity() * s_->row_bytes + s_->dir.bytes() + s_->file.memory_bytes();
}
const CacheParams& TableCache::params() const { return s_->spec.params; }
const std::filesystem::path& TableCache::file() const { return s_->file.path(); }
const std::string& TableCache::io_backend() const { return s_->file.io_backend(); }
const CacheCounters& TableCache::counters() const { return s_->dir.counters(); }
RowFileCounters TableCache::file_counters() const {
  std::lock_guard lock(s_->mu);
  s_->Settle();
  return s_->file.counters();
}
Status TableCache::DropPageCache() const {
  std::lock_guard lock(s_->mu);
  s_->Settle();
  SR_RETURN_IF_ERROR(s_->Usable());
  // A failed write-back of the file's pages is reported once (the kernel
  // forgets it): the rows it held may be lost, so the cache stops, as after
  // any failed write.
  if (Status dropped = s_->file.DropPageCache(); !dropped.ok()) {
    s_->failed = dropped;
    return s_->Usable();
  }
  return Status::Ok();
}
StatusOr<int64_t> TableCache::FileResidentBytes() const {
  std::lock_guard lock(s_->mu);
  return s_->file.ResidentBytes();
}
TableCache::PrefetchCounters TableCache::prefetch_counters() const {
  std::lock_guard lock(s_->mu);
  return s_->prefetch;
}

Status TableCache::Prefetch(std::span<const int64_t> ids) {
  std::lock_guard lock(s_->mu);
  State& s = *s_;
  s.Settle();
  SR_RETURN_IF_ERROR(s.Usable());
  // At most about two steps of rows: older staged rows make room.
  if (static_cast<int64_t>(s.staged_rows.size()) > 2 * s.staged_limit * s.row_bytes) {
    s.staged.clear();
    s.staged_rows.clear();
  }
  std::vector<int64_t> wanted;
  for (int64_t id : ids) {
    if (id < 0 || id >= s.config.num_embeddings || !s.file.Written(id) || s.staged.count(id) != 0) continue;
    if (s.dir.SlotOf(id) >= 0) continue;  // cached: its slot is the truth
    s.staged.emplace(id, 0);  // placed below
    wanted.push_back(id);
  }
  if (wanted.empty()) return Status::Ok();
  const size_t at = s.staged_rows.size(), rb = static_cast<size_t>(s.row_bytes);
  s.staged_rows.resize(at + wanted.size() * rb);
  if (Status read = s.file.Read(wanted, s.staged_rows.data() + at); !read.ok()) {
    s.Unstage(wanted);
    return read;
  }
  for (size_t k = 0; k < wanted.size(); ++k) s.staged[wanted[k]] = at + k * rb;
  s.prefetch.staged += static_cast<int64_t>(wanted.size());
  return Status::Ok();
}

Status TableCache::Assign(std::span<int64_t> ids, const CacheSlots& slots) {
  std::lock_guard lock(s_->mu);
  s_->Settle();
  SR_RETURN_IF_ERROR(s_->Usable());
  auto assigned = s_->dir.Assign(ids);  // refused: nothing changed
  if (!assigned.ok()) return assigned.status().WithContext("table '" + s_->config.name + "'");
  auto& plan = assigned.value();
  // The victims' rows are copied out before the misses' rows overwrite
  // their slots; the victims then go to the file behind, while the batch
  // trains. The directory has moved on: a failure here leaves rows in no
  // place it knows.
  Status moved = s_->Save(plan.write_back, slots, /*behind=*/true);
  if (moved.ok()) moved = s_->Load(plan.load, slots, plan.reloads);
  if (!moved.ok()) {
    s_->failed = moved;
    return s_->Usable();
  }
  s_->WriteBehind();
  std::copy(plan.slots.begin(), plan.slots.end(), ids.begin());
  return Status::Ok();
}

Status TableCache::Find(std::span<int64_t> ids) const {
  std::lock_guard lock(s_->mu);
  SR_RETURN_IF_ERROR(s_->Usable());
  for (int64_t& id : ids) {
    const int64_t slot = s_->dir.SlotOf(id);
    if (slot < 0) {
      return InternalError(fmt::format("table '{}': row {} is not cached (a backward without its forward?)",
                                       s_->config.name, id));
    }
    id = slot;
  }
  return Status::Ok();
}

void TableCache::MarkDirty(std::span<const int64_t> slots) {
  std::lock_guard lock(s_->mu);
  s_->dir.MarkDirty(slots);
}

void TableCache::MarkBatchDirty() {
  std::lock_guard lock(s_->mu);
  s_->dir.MarkBatchDirty();
}

Status TableCache::Flush(const CacheSlots& slots) {
  std::lock_guard lock(s_->mu);
  s_->Settle();
  SR_RETURN_IF_ERROR(s_->Usable());
  const CacheDirectory::Move dirty = s_->dir.TakeDirty();
  if (Status saved = s_->Save(dirty, slots, /*behind=*/false); !saved.ok()) {
    s_->dir.MarkDirty(dirty.slots);  // still to be written: nothing is lost
    return saved;
  }
  return s_->file.Sync();
}

Status TableCache::Purge(const CacheSlots& slots) {
  SR_RETURN_IF_ERROR(Flush(slots));
  std::lock_guard lock(s_->mu);
  s_->dir.Clear();
  return Status::Ok();
}

Status TableCache::ReadRows(std::span<const int64_t> rows, Tensor* weights, Tensor* state, const CacheSlots& slots) {
  std::lock_guard lock(s_->mu);
  s_->Settle();
  SR_RETURN_IF_ERROR(s_->Usable());
  SR_RETURN_IF_ERROR(s_->CheckRows(rows));
  if (s_->state_dim() == 0) state = nullptr;
  if (weights == nullptr && state == nullptr) return Status::Ok();
  const auto split = s_->SplitRows(rows);
  if (!split.cached_slots.empty()) {
    const auto n = static_cast<int64_t>(split.cached_slots.size());
    Tensor w = Tensor::Empty(s_->format.weight_dtype, {n, s_->dim}), st = Tensor::Empty(dtype::kFloat32, {n, s_->state_dim()});
    SR_RETURN_IF_ERROR(slots.Read(split.cached_slots, weights ? &w : nullptr, state ? &st : nullptr));
    std::vector<std::byte> buf(static_cast<size_t>(n * s_->row_bytes));
    s_->Pack(w, st, buf.data(), n);
    for (int64_t k = 0; k < n; ++k) {
      s_->Unpack(buf.data() + k * s_->row_bytes, weights, state, static_cast<int64_t>(split.cached_at[static_cast<size_t>(k)]));
    }
  }
  if (!split.other_rows.empty()) {
    std::vector<std::byte> buf;
    SR_RETURN_IF_ERROR(s_->Fetch(split.other_rows, buf));
    for (size_t k = 0; k < split.other_rows.size(); ++k) {
      s_->Unpack(buf.data() + k * static_cast<size_t>(s_->row_bytes), weights, state, static_cast<int64_t>(split.other_at[k]));
    }
  }
  return Status::Ok();
}

namespace {
// Rows `at` of `t` (null stays null).
Tensor* Gather(const Tensor* t, const std::vector<size_t>& at, Tensor& out) {
  if (t == nullptr) return nullptr;
  const size_t row = t->ndim() == 2 ? static_cast<size_t>(t->size(1)) * DTypeSize(t->dtype()) : 0;
  out = Tensor::Empty(t->dtype(), {static_cast<int64_t>(at.size()), t->ndim() == 2 ? t->size(1) : 0});
  for (size_t k = 0; k < at.size(); ++k) {
    std::memcpy(static_cast<std::byte*>(out.raw_data()) + k * row, static_cast<const std::byte*>(t->raw_data()) + at[k] * row, row);
  }
  return &out;
}
}  // namespace

Status TableCache::WriteRows(std::span<const int64_t> rows, const Tensor* weights, const Tensor* state,
                             const CacheSlots& slots) {
  std::lock_guard lock(s_->mu);
  s_->Settle();
  SR_RETURN_IF_ERROR(s_->Usable());
  SR_RETURN_IF_ERROR(s_->CheckRows(rows));
  if (s_->state_dim() == 0) state = nullptr;
  if (weights == nullptr && state == nullptr) return Status::Ok();
  const auto split = s_->SplitRows(rows);
  if (!split.cached_slots.empty()) {
    Tensor w, st;
    SR_RETURN_IF_ERROR(slots.Write(split.cached_slots, Gather(weights, split.cached_at, w), Gather(state, split.cached_at, st)));
    s_->dir.MarkDirty(split.cached_slots);
  }
  if (split.other_rows.empty()) return Status::Ok();
  // Whole rows onto the file: the part not given is the row's as it is.
  std::vector<std::byte> buf;
  if (weights == nullptr || state == nullptr) {
    SR_RETURN_IF_ERROR(s_->Fetch(split.other_rows, buf));
  } else {
    buf.resize(split.other_rows.size() * static_cast<size_t>(s_->row_bytes));
  }
  for (size_t k = 0; k < split.other_rows.size(); ++k) {
    std::byte* row = buf.data() + k * static_cast<size_t>(s_->row_bytes);
    const size_t i = split.other_at[k];
    if (weights != nullptr) {
      std::memcpy(row, static_cast<const std::byte*>(weights->raw_data()) + i * static_cast<size_t>(s_->weight_bytes),
                  static_cast<size_t>(s_->weight_bytes));
    }
    if (state != nullptr) {
      std::memcpy(row + s_->weight_bytes, state->data<float>() + i * static_cast<size_t>(s_->state_dim()),
                  static_cast<size_t>(s_->state_dim()) * 4);
    }
  }
  s_->Unstage(split.other_rows);
  return s_->file.Write(split.other_rows, buf.data());
}

Status TableCache::ResetRows(std::span<const int64_t> rows, const CacheSlots& slots) {
  std::lock_guard lock(s_->mu);
  s_->Settle();
  SR_RETURN_IF_ERROR(s_->Usable());
  SR_RETURN_IF_ERROR(s_->CheckRows(rows));
  const auto split = s_->SplitRows(rows);
  if (!split.cached_slots.empty()) {
    const auto n = static_cast<int64_t>(split.cached_slots.size());
    std::vector<int64_t> ids(split.cached_at.size());
    for (size_t k = 0; k < ids.size(); ++k) ids[k] = rows[split.cached_at[k]];
    Tensor w = Tensor::Empty(s_->format.weight_dtype, {n, s_->dim});
    Tensor st = Tensor::Empty(dtype::kFloat32, {n, s_->state_dim()});
    for (int64_t k = 0; k < n; ++k) {
      std::copy(s_->format.initial_state.begin(), s_->format.initial_state.end(), st.data<float>() + k * s_->state_dim());
    }
    SR_RETURN_IF_ERROR(s_->Draw(ids, static_cast<std::byte*>(w.raw_data())));
    SR_RETURN_IF_ERROR(slots.Write(split.cached_slots, &w, s_->StateOrNull(st)));
    s_->dir.MarkDirty(split.cached_slots);
  }
  // The others read as never written: drawn afresh when next fetched.
  s_->Unstage(split.other_rows);
  return s_->file.Forget(split.other_rows);
}

}  // namespace shardrec
