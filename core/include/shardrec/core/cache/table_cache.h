// TableCache: what makes one table of an EmbeddingTables larger than
// memory (docs/cache.md). The table's kernel table holds only cache slots
// (`capacity()` rows); every row lives in a scratch RowFile; a
// CacheDirectory with an eviction-policy plugin decides which rows hold
// slots. EmbeddingTables turns a batch's ids into slots (Assign) before
// its one kernel call, and sends row I/O here, so any kernel plugin,
// optimizer and dtype work unchanged and a group mixing cached and
// in-memory tables still costs one kernel call. Rows never written are
// drawn as the kernel draws initial rows (sdk/init.hpp), so a new table
// needs no pass over the disk; the numbers are the in-memory kernel's,
// bit for bit (tests/cache/cached_tables_test.cc).
//
// The file is scratch: created fresh (an earlier run's, no longer in use,
// is replaced) and removed with the table. What a run keeps is its
// checkpoint, which flushes the cache and streams rows out, and loads
// rows straight into a new table's file.
//
// Prefetch (cache_params prefetch_pipeline): a pipeline's thread reads the
// next batch's rows that are on the file and not cached into a staging
// area while this batch trains; that batch's Assign then takes them from
// there instead of the file. A staged row is dropped when its row on the
// file changes (a write-back, a write, a reset), so what Assign takes is
// always the file's row.
//
// Write-behind: a batch's dirty victims are copied out of their slots
// before its misses overwrite them, then written to the file on a thread
// of their own while the batch trains; the next call waits for that write
// first (the file has one user at a time), so every call sees the file as
// if the write had been synchronous.
//
// A failed write-back or load leaves the cache and its file out of step,
// so the cache refuses every later call, naming the first error (the
// trusted copy is the last checkpoint). A failed Flush keeps its rows dirty.
// Thread-safety: Prefetch may run on another thread than the other calls
// (they share a lock); the other calls must not overlap each other.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <vector>

#include "shardrec/core/cache/cache_directory.h"
#include "shardrec/core/cache/cache_params.h"
#include "shardrec/core/cache/row_file.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

// A table kept larger than memory, as its module is asked to.
struct TableCacheSpec {
  CacheParams params;          // load_factor must be set (> 0)
  std::filesystem::path file;  // the scratch row file
  // When a sharder chose the table's rows: local row i stands for global
  // row global_rows[i] (its initial weights are drawn there).
  std::vector<int64_t> global_rows;
};

// What a TableCache needs of the kernel table that holds its slots:
// weights [n, dim] in the table's dtype, state float32 [n, state_dim];
// a null tensor is skipped.
class CacheSlots {
 public:
  virtual ~CacheSlots() = default;
  // Through DLTensor views, which may be strided (the kernel ABI honours
  // strides or refuses with SR_INVALID_ARGUMENT, writing nothing): a
  // cache moves whole rows packed in one buffer this way, without
  // splitting them into two tensors first.
  virtual Status ReadViews(std::span<const int64_t> slots, DLTensor* weights, DLTensor* state) const = 0;
  virtual Status WriteViews(std::span<const int64_t> slots, const DLTensor* weights, const DLTensor* state) const = 0;
  Status Read(std::span<const int64_t> slots, Tensor* weights, Tensor* state) const {
    return ReadViews(slots, weights ? weights->mutable_dl() : nullptr, state ? state->mutable_dl() : nullptr);
  }
  Status Write(std::span<const int64_t> slots, const Tensor* weights, const Tensor* state) const {
    return WriteViews(slots, weights ? &weights->dl() : nullptr, state ? &state->dl() : nullptr);
  }
};

// How rows look, once the kernel table exists.
struct CachedRowFormat {
  DLDataType weight_dtype{};
  int64_t state_dim = 0;    // float32 optimizer state per row
  std::vector<float> initial_state;  // a fresh (or reset) row's state, as the kernel makes it
  uint64_t init_seed = 0;   // initial weights: sdk::InitialWeight(seed, global row, global column)
  int64_t row_origin = 0;   // global row of local row 0 (unless global_rows)
  int64_t col_origin = 0;   // global column of column 0
};

class TableCache {
 public:
  // The directory (so the kernel table's size is known), then the cache.
  static StatusOr<CacheDirectory> MakeDirectory(const PluginRegistry& registry, const EmbeddingTableConfig& table,
                                                const CacheParams& params);
  static StatusOr<TableCache> Create(CacheDirectory directory, const EmbeddingTableConfig& table,
                                     const CachedRowFormat& format, TableCacheSpec spec);
  TableCache(TableCache&&) noexcept;
  TableCache& operator=(TableCache&&) noexcept;
  ~TableCache();

  int64_t capacity() const;       // slots in all (the kernel table's rows)
  int64_t cached_rows() const;    // slots kept from batch to batch
  int64_t ram_bytes() const;      // the slots' rows and the directory
  const CacheParams& params() const;
  const std::filesystem::path& file() const;
  const std::string& io_backend() const;  // RowFile::io_backend
  // Per id looked up: an id repeated within a batch is a hit after its first.
  const CacheCounters& counters() const;
  RowFileCounters file_counters() const;  // after the write-back in flight
  // Its row file's pages out of the page cache (RowFile::DropPageCache),
  // after the write-back in flight: the next misses read the device. No
  // row changes, hence const.
  Status DropPageCache() const;
  StatusOr<int64_t> FileResidentBytes() const;
  // Rows a Prefetch read from the file, and how many an Assign then took.
  struct PrefetchCounters {
    int64_t staged = 0, used = 0;
  };
  PrefetchCounters prefetch_counters() const;

  // The next batch's ids of this table (out-of-range ids are skipped):
  // those on the file and not cached are read into the staging area, which
  // holds at most about one step of rows (older staged rows are dropped).
  Status Prefetch(std::span<const int64_t> ids);

  // One batch's ids of this table (each in range), in place into slots:
  // dirty victims written back, misses loaded (read, or drawn).
  Status Assign(std::span<int64_t> ids, const CacheSlots& slots);
  // In place into the slots they hold now; an id not cached is an error.
  Status Find(std::span<int64_t> ids) const;
  // Slots whose rows changed (a backward): written back when they leave.
  void MarkDirty(std::span<const int64_t> slots);
  // Every row of the last Assign's batch changed (its backward): one write.
  void MarkBatchDirty();
  // TorchRec's flush(): every changed row on the file, made durable.
  Status Flush(const CacheSlots& slots);
  // TorchRec's purge(): flush, then empty the cache.
  Status Purge(const CacheSlots& slots);

  // Rows of the table (each checked in range), wherever they are now.
  Status ReadRows(std::span<const int64_t> rows, Tensor* weights, Tensor* state, const CacheSlots& slots);
  // A cached row is changed in its slot, any other on the file.
  Status WriteRows(std::span<const int64_t> rows, const Tensor* weights, const Tensor* state,
                   const CacheSlots& slots);
  // Weights as at creation, the kernel's initial optimizer state (managed
  // collision's evictions).
  Status ResetRows(std::span<const int64_t> rows, const CacheSlots& slots);

 private:
  struct State;
  explicit TableCache(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace shardrec
