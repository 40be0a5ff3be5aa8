// `shardrec bench cache`: a recorded id stream trained through a cached
// table (EmbeddingTables over a TableCache, core/include/shardrec/core/cache/table_cache.h) per eviction
// policy and load factor, beside the in-memory kernel on the same batches.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "shardrec/core/cache/cache_params.h"
#include "shardrec/core/plugin_options.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/status.h"

namespace shardrec::cli {

// Steps each table takes in its turn when the cached and the in-memory
// table are timed side by side.
inline constexpr size_t kCacheBenchBlock = 8;

struct CacheBenchConfig {
  std::vector<int64_t> ids;  // the stream, each in [0, rows)
  int64_t rows = 0;
  int64_t dim = 32;
  int64_t batch = 4096;  // ids per training step (one id per bag)
  std::vector<double> load_factors;
  struct Policy {
    std::string shown;  // as given on the command line
    std::string name;   // the eviction component
    OptionList options;
  };
  std::vector<Policy> policies;
  std::string optimizer = "adagrad";
  std::filesystem::path dir;  // where the row files go (each removed after its run)
  int io_threads = 8;
  std::string io = "auto";  // the row files' way to move rows (RowFileSpec::io)
  std::string layout = CacheParams{}.layout;  // where the cached tables' row files keep rows (RowFileSpec::layout)
  int64_t ways = 32;  // slots per set of the cache
  // Times the stream is trained through each table, each pass timed: the
  // first meets an empty cache (every row's first sight a miss), later
  // ones the cache as the pass before left it (the steady state).
  int passes = 2;
  // A disk the page cache does not hold: the row file's pages are dropped
  // from the page cache (RowFile::DropPageCache) before each block of the
  // cached table's steps and before each batch of the probe, off the clock.
  bool drop_page_cache = false;
};

// One pass of the stream through a cached table, and through an in-memory
// table beside it (the two take turns every few steps).
struct CacheBenchPass {
  double hit_rate = 0, ids_per_s = 0;
  double memory_ids_per_s = 0;  // the in-memory kernel's, on the same steps, at the same time
  int64_t misses = 0;  // rows brought in (each batch's distinct ids that were not cached)
  int64_t rows_read = 0, rows_written = 0;
  int64_t rows_relocated = 0;  // rows the row file's log moved again (layout log)
  int64_t file_resident_bytes = 0;  // the row file's bytes in the page cache at the pass's end
  double over_memory() const { return ids_per_s / memory_ids_per_s; }  // the cached table against the in-memory one
};

struct CacheBenchRun {
  std::string policy;
  double load_factor = 0;
  int64_t cached_rows = 0;
  std::vector<CacheBenchPass> passes;  // the first: cold
};

struct CacheBenchResult {
  // The disk's limit for misses: random rows of a full row file of the
  // same size, read in batches of the steps' distinct ids, rows/s.
  double probe_rows_per_s = 0;
  std::string io_backend;  // what moved the rows: io_uring, or threads (and why)
  std::vector<CacheBenchRun> runs;
};

// `done` runs after each cached run.
StatusOr<CacheBenchResult> RunCacheBench(const PluginRegistry& registry, const CacheBenchConfig& c,
                                         const std::function<void(const CacheBenchRun&)>& done);

}  // namespace shardrec::cli
