// Tables larger than memory in `shardrec train` (docs/cache.md): the
// flags (--memory-budget, --cache-dir, --cache-params), what they set in
// the plan request and the module options, and what the run reports about
// each cached table and the process's resident memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <boost/program_options.hpp>
#include <nlohmann/json.hpp>

#include "shardrec/core/modules/sharded_tables.h"
#include "shardrec/core/sharding/sharding_plan.h"

namespace shardrec::cli {

// /var/tmp/shardrec-cache-UID: on disk (not a tmpfs), one per user.
std::string DefaultCacheDir();

struct CacheFlags {
  std::string memory_budget;                     // --memory-budget, as given
  std::string cache_dir = DefaultCacheDir();     // --cache-dir
  std::string cache_params;                      // --cache-params, as given
  int64_t budget_bytes = 0;                      // parsed
  CacheParams defaults;                          // parsed
};

// --memory-budget and --cache-params, then (`with_dir`: a command that
// makes the row files) --cache-dir.
void AddCacheOptions(boost::program_options::options_description& desc, CacheFlags& f, bool with_dir = true);
// Parses the flags; an error names the flag.
Status ParseCacheFlags(CacheFlags& f);
// Into a plan request: the budget and the defaults of the caches it makes.
// `step_ids`: per table, the most ids one step may send a piece of it
// (every rank's batch), which its caches' overflow slots cover unless
// --cache-params sets `overflow` (or a plan entry's cache_params do): a
// cache must hold a whole step.
void ApplyCacheFlags(const CacheFlags& f, const std::map<std::string, int64_t>& step_ids, PlanRequest& req);
// That bound per table: world x batch x the ids a sample may have in the
// table's features (a synthetic bag holds at most twice its pooling
// factor; a click log's, one id).
std::map<std::string, int64_t> StepIdsBound(int world, int64_t batch, const std::vector<EmbeddingTableConfig>& tables,
                                            const std::vector<double>& pooling, bool one_id_per_feature);
bool PlanCachesTables(const ShardingPlan& plan);
// Makes --cache-dir (0700 when new). An existing one must be a directory
// of this user that no one else may write to (row files hold the model's
// weights, and a shared path is someone else's to fill); an error names it.
Status PrepareCacheDir(const std::string& dir);

// One cached table, every rank's pieces together.
struct CachedTableStats {
  std::string table, params;
  int64_t lookups = 0, hits = 0, misses = 0, evictions = 0, write_backs = 0;
  int64_t rows_read = 0, rows_written = 0;  // the row files'
  int64_t rows_relocated = 0;               // a log's cleaning: current rows written again (layout log)
  int64_t ram_bytes = 0;                    // the caches' slots and directories
  int64_t rows = 0, cached_rows = 0;
  int64_t prefetched = 0, prefetch_used = 0;  // rows read ahead (prefetch_pipeline), and taken
  double hit_rate() const { return lookups ? static_cast<double>(hits) / static_cast<double>(lookups) : 0.0; }
};
// Collective: every rank's cached pieces, summed per table (plan order).
StatusOr<std::vector<CachedTableStats>> GatherCacheStats(const ProcessGroup& group, const ShardedTables& tables);
// What moves this rank's cached pieces' rows ("8 threads", "io_uring"), or "".
std::string CacheIoBackend(const ShardedTables& tables);

// The process's resident memory, sampled every `period_ms` on a thread of
// its own from Start() to Stop(): the largest sample, and how many.
class RssSampler {
 public:
  explicit RssSampler(int period_ms = 50) : period_ms_(period_ms) {}
  ~RssSampler() { Stop(); }
  void Start();
  void Stop();
  int64_t max_bytes() const { return max_.load(); }
  // The largest sample of resident memory less its mapped files' pages
  // (RssSample::files: a row file mapped by io mmap counts in RSS as its
  // pages are touched).
  int64_t max_without_files_bytes() const { return max_without_files_.load(); }
  int64_t samples() const { return samples_.load(); }

 private:
  int period_ms_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> max_{0}, max_without_files_{0}, samples_{0};
  std::thread thread_;
};

// Per rank: its process's largest RSS sample in the steps, and the largest
// less the file-backed pages (RssSampler).
struct RssMax {
  std::vector<int64_t> all, without_files;
};

// The report's lines (text) and object (--json).
std::string FormatCacheReport(const std::vector<CachedTableStats>& stats, const RssMax& rss, int64_t budget_bytes,
                              const std::string& cache_dir, const std::string& io);
nlohmann::json CacheReportJson(const std::vector<CachedTableStats>& stats, const RssMax& rss, int64_t budget_bytes,
                               const std::string& cache_dir, const std::string& io);

}  // namespace shardrec::cli
