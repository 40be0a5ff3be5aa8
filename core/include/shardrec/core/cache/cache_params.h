// CacheParams: how a table larger than memory is cached (docs/cache.md),
// in the seeds' vocabulary (torchrec.distributed.types.CacheParams), per
// table in plans ("cache_params" beside "compute_kernel":
// "fused_ssd_caching") and in flags (`--cache-params load_factor=0.1,...`).
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/plugin_options.h"
#include "shardrec/core/status.h"

namespace shardrec {

// The compute kernels of plans beside a kernel plugin's name: "fused" is
// the run's kernel with every row in memory (TorchRec's FUSED); this one is
// the run's kernel over a RAM cache of rows kept on a local file.
inline constexpr const char* kSsdCachingKernel = "fused_ssd_caching";
inline constexpr const char* kFusedKernel = "fused";

struct CacheParams {
  std::string algorithm = "lru";  // an eviction policy: lru, lfu, or a plugin's component
  OptionList algorithm_options;   // that policy's options
  // Cached rows / rows, in (0, 1]; 0 in a plan: the largest that its
  // memory budget allows (PlanRequest::memory_budget_per_rank).
  double load_factor = 0;
  // Bytes of a rank's budget kept for other things when the load factor
  // is derived from it.
  int64_t reserved_memory = 0;
  // The cache's weight type: "" or the table's own (fp32, fp16, ...). The
  // cache keeps rows exactly as the table does, so no other is accepted.
  std::string precision;
  // Batch i+1's rows fetched while batch i trains (the train pipeline);
  // otherwise each batch fetches its own before its lookup.
  bool prefetch_pipeline = false;
  int64_t ways = 32;     // slots per set of the directory (cache_directory.h)
  int64_t overflow = 0;  // slots for one batch's ids beyond a full set (0: 2 x ways)
  // `overflow` was sized from this run's step (PlanRequest::cache_overflow),
  // not given: a plan file leaves it out, so a run replaying the plan
  // sizes it from its own step (a larger batch must not inherit a smaller
  // overflow).
  bool overflow_from_step = false;
  int io_threads = 8;    // row-file reads and writes in flight (the pool of threads)
  std::string io = "auto";  // auto (io_uring, else threads) | threads | io_uring | mmap (RowFileSpec::io)
  // log | in_place: where the row file keeps rows (RowFileSpec::layout).
  // log, the default, turns a step's scattered write-backs into one
  // sequential write (docs/cache.md: 1.4x through the page cache, 2-6x
  // from the disk), for 4 bytes of RAM a row and a file twice the rows.
  std::string layout = "log";
};

// "algorithm=lfu,load_factor=0.1,ways=16": the fields above by name;
// `where` prefixes errors (a flag or a plan entry).
StatusOr<CacheParams> ParseCacheParams(const std::string& text, const std::string& where);
// Sets one field from its text; an unknown key or a bad value names both.
Status SetCacheParam(CacheParams& p, const std::string& key, const std::string& value, const std::string& where);
// The fields that differ from the defaults, as "key=value,..." (plans
// written back out, reports).
std::string CacheParamsToString(const CacheParams& p);
// Checks the fields against the table they cache.
Status ValidateCacheParams(const CacheParams& p, const EmbeddingTableConfig& table);

// RAM a cache of `slots` rows takes: the rows themselves (`row_bytes`
// each, weights and optimizer state) and the directory's bookkeeping, at
// most 120 bytes a slot for policies of up to two metadata columns (25 the
// slot's state: its id, accesses and row flag; 16 the policy's; up to 64
// the id index's: half full at most, rounded up to a power of two).
// CacheDirectory::bytes() is exact.
inline constexpr int64_t kCacheDirectoryBytesPerSlot = 120;
inline int64_t CacheBytes(int64_t slots, int64_t row_bytes) { return slots * (row_bytes + kCacheDirectoryBytesPerSlot); }
// RAM a cached table's row file keeps for each of its `rows` (all of them,
// not only the cached ones): a log's map of rows to records (row_log.h).
inline constexpr int64_t kRowLogBytesPerRow = 4;
inline int64_t RowFileBytes(int64_t rows, const CacheParams& c) { return c.layout == "log" ? rows * kRowLogBytesPerRow : 0; }

}  // namespace shardrec
