// CachedTable: one embedding table larger than memory (docs/cache.md).
// Every row lives in a RowFile; `load_factor x rows` of them live in a RAM
// cache, which is one table of an ordinary kernel plugin indexed by cache
// slot (so any kernel, optimizer and dtype work unchanged); a
// CacheDirectory with an eviction-policy plugin decides which. A Forward
// first makes every id of the batch resident (dirty victims written back,
// misses read from the file, rows never written drawn as the kernel draws
// initial rows), then looks up by slot; Backward applies the fused
// optimizer in the cache and marks the rows dirty. The numbers are exactly
// the in-memory kernel's (tested bit for bit).
//
//   auto t = CachedTable::Create(registry, config, options, {.load_factor = 0.1}, "t0.rows");
//   t->Forward(kjt, {0}, {0}, out);  t->Backward(kjt, {0}, {0}, grad, step, lr);
//   t->Flush();  // every changed row on disk, the file marked clean
//
// Not thread-safe.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/core/cache/cache_directory.h"
#include "shardrec/core/cache/row_file.h"
#include "shardrec/core/modules/embedding_tables.h"

namespace shardrec {

// The seeds' CacheParams, for a cache in RAM over a file.
struct CacheParams {
  std::string algorithm = "lru";  // an eviction policy: lru, lfu, or a plugin's component
  OptionList algorithm_options;
  double load_factor = 0.2;  // cached rows / rows, in (0, 1]
  int64_t ways = 32;
  int64_t overflow = 0;  // CacheDirectoryConfig::overflow
  int io_threads = 8;
};

class CachedTable {
 public:
  // `file`: created when missing; an existing one must be a clean row file
  // of this table (RowFile::Open), and its rows are the table's.
  static StatusOr<CachedTable> Create(const PluginRegistry& registry, const EmbeddingTableConfig& config,
                                      const EmbeddingModuleOptions& options, const CacheParams& params,
                                      const std::filesystem::path& file);
  CachedTable(CachedTable&&) noexcept;
  CachedTable& operator=(CachedTable&&) noexcept;
  ~CachedTable();

  const EmbeddingTableConfig& config() const;
  int64_t cached_rows() const;    // rows the cache keeps from batch to batch (load_factor x rows, whole sets)
  int64_t overflow_rows() const;  // more slots, for one batch's ids beyond a full set
  // Per id looked up: an id repeated within a batch is a hit after its
  // first; misses are the rows brought in (from the file or drawn).
  const CacheCounters& counters() const;
  const RowFileCounters& file_counters() const;

  // As EmbeddingTables::Forward / Backward over this one table: `features`
  // holds its features (ids are rows of the whole table).
  Status Forward(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                 const std::vector<int64_t>& columns, Tensor& output, int64_t* invalid = nullptr);
  // For the batch of the last Forward (its rows are still cached).
  Status Backward(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                  const std::vector<int64_t>& columns, const Tensor& grad, int64_t iteration, double learning_rate);
  // TorchRec's flush(): every changed row written back, the file synced.
  Status Flush();
  // TorchRec's purge(): flush, then empty the cache.
  Status Purge();
  // Rows of the whole table (flushes first): weights in the table's dtype
  // [n, dim], state float32 [n, state_dim]; null: skipped.
  Status ReadRows(std::span<const int64_t> rows, Tensor* weights, Tensor* state);

 private:
  struct State;
  explicit CachedTable(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

}  // namespace shardrec
