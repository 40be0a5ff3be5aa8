// train_cache.h: the cache flags, stats and report of `shardrec train`.
#include "train_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "shardrec/core/resources/memory.h"
#include "shardrec/core/text/byte_size.h"

namespace shardrec::cli {

namespace po = boost::program_options;

std::string DefaultCacheDir() { return fmt::format("/var/tmp/shardrec-cache-{}", ::geteuid()); }

void AddCacheOptions(po::options_description& desc, CacheFlags& f, bool with_dir) {
  desc.add_options()
      ("memory-budget", po::value(&f.memory_budget),
       "bytes of weights + optimizer state each rank keeps in RAM (e.g. 2GiB). Tables that do not fit are kept "
       "larger than memory (fused_ssd_caching, docs/cache.md): every row in a file, a RAM cache of the hot ones, "
       "largest tables first, at the largest load factor the budget allows")
      ("cache-params", po::value(&f.cache_params),
       "the caches' settings, KEY=VALUE,... (algorithm=lru|lfu|a plugin's eviction policy, load_factor, ways, "
       "overflow, io_threads, io=threads|io_uring|mmap, layout=log|in_place, algorithm.OPTION=...): defaults for tables --memory-budget caches, and for plan "
       "entries with compute_kernel fused_ssd_caching and no cache_params");
  if (!with_dir) return;
  desc.add_options()
      ("cache-dir", po::value(&f.cache_dir)->default_value(f.cache_dir),
       "where cached tables' row files go (one per table piece, removed at the end; put it on a local SSD, not a "
       "tmpfs)");
}

Status ParseCacheFlags(CacheFlags& f) {
  if (!f.memory_budget.empty()) {
    auto bytes = ParseByteSize(f.memory_budget);
    if (!bytes.ok()) return bytes.status().WithContext("--memory-budget");
    if (bytes.value() <= 0) return InvalidArgumentError("--memory-budget must be positive");
    f.budget_bytes = bytes.value();
  }
  if (!f.cache_params.empty()) {
    SR_ASSIGN_OR_RETURN(f.defaults, ParseCacheParams(f.cache_params, "--cache-params"));
  }
  if (f.cache_dir.empty()) return InvalidArgumentError("--cache-dir must name a directory");
  return Status::Ok();
}

void ApplyCacheFlags(const CacheFlags& f, const std::map<std::string, int64_t>& step_ids, PlanRequest& req) {
  req.memory_budget_per_rank = f.budget_bytes;
  req.cache_defaults = f.defaults;
  // Overflow left 0 (not set by --cache-params nor a plan entry): MakePlan
  // sizes each table's from its own step.
  req.cache_overflow = step_ids;
}

std::map<std::string, int64_t> StepIdsBound(int world, int64_t batch, const std::vector<EmbeddingTableConfig>& tables,
                                            const std::vector<double>& pooling, bool one_id_per_feature) {
  std::map<std::string, int64_t> bound;
  size_t feature = 0;  // pooling factors go to features in order, the last repeating
  for (const auto& t : tables) {
    int64_t per_sample = 0;
    for (size_t k = 0; k < t.feature_names.size(); ++k, ++feature) {
      const double p = pooling.empty() ? 1.0 : pooling[std::min(feature, pooling.size() - 1)];
      per_sample += one_id_per_feature ? 1 : static_cast<int64_t>(std::ceil(2 * p));
    }
    bound[t.name] = static_cast<int64_t>(world) * batch * std::max<int64_t>(per_sample, 1);
  }
  return bound;
}

bool PlanCachesTables(const ShardingPlan& plan) {
  for (const auto& t : plan.tables) {
    if (IsCachedKernel(t.sharding.compute_kernel)) return true;
  }
  return false;
}

Status PrepareCacheDir(const std::string& dir) {
  std::error_code ec;
  const std::filesystem::path path(dir);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISDIR(st.st_mode)) return InvalidArgumentError("--cache-dir " + dir + " is not a directory");
    if (st.st_uid != ::geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
      return InvalidArgumentError(fmt::format("--cache-dir {} belongs to another user or others may write to it "
                                              "(owner {}, mode {:o}); row files hold the model's weights: give a "
                                              "directory of your own", dir, st.st_uid, st.st_mode & 07777));
    }
    return Status::Ok();
  }
  std::filesystem::create_directories(path, ec);
  if (ec) return InvalidArgumentError("--cache-dir " + dir + ": cannot create it: " + ec.message());
  ::chmod(path.c_str(), 0700);  // row files hold the model's weights
  return Status::Ok();
}

StatusOr<std::vector<CachedTableStats>> GatherCacheStats(const ProcessGroup& group, const ShardedTables& tables) {
  const auto& plan = tables.layout().plan();
  constexpr size_t kFields = 13;
  std::vector<int64_t> mine(plan.tables.size() * kFields, 0);
  const RankTables& shards = tables.shards();
  for (size_t p = 0; p < shards.size(); ++p) {
    const TableCache* cache = shards.cache(p);
    if (cache == nullptr) continue;
    const std::string& piece = shards.piece(p).config.name;
    const std::string table = piece.substr(0, piece.rfind('@'));
    for (size_t t = 0; t < plan.tables.size(); ++t) {
      if (plan.tables[t].config.name != table) continue;
      int64_t* f = mine.data() + t * kFields;
      const CacheCounters& c = cache->counters();
      const RowFileCounters& io = cache->file_counters();
      const auto ahead = cache->prefetch_counters();
      const int64_t add[kFields] = {c.lookups, c.hits, c.misses, c.evictions, c.write_backs, io.rows_read,
                                    io.rows_written, cache->ram_bytes(), shards.piece(p).config.num_embeddings,
                                    cache->cached_rows(), ahead.staged, ahead.used, io.rows_relocated};
      for (size_t k = 0; k < kFields; ++k) f[k] += add[k];
    }
  }
  const auto world = static_cast<size_t>(group.world_size());
  Tensor all = Tensor::Empty(dtype::kInt64, {static_cast<int64_t>(mine.size() * world)});
  SR_RETURN_IF_ERROR(group.AllGatherV(Tensor::FromVector(mine), &all,
                                      std::vector<int64_t>(world, static_cast<int64_t>(mine.size()))));
  std::vector<CachedTableStats> out;
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const auto& table = plan.tables[t];
    if (!IsCachedKernel(table.sharding.compute_kernel)) continue;
    CachedTableStats s;
    s.table = table.config.name;
    s.params = table.sharding.cache_params ? CacheParamsToString(*table.sharding.cache_params) : "";
    int64_t* fields[kFields] = {&s.lookups, &s.hits,  &s.misses,      &s.evictions,  &s.write_backs,
                                &s.rows_read, &s.rows_written, &s.ram_bytes, &s.rows, &s.cached_rows,
                                &s.prefetched, &s.prefetch_used, &s.rows_relocated};
    for (size_t r = 0; r < world; ++r) {
      const int64_t* f = all.data<int64_t>() + r * mine.size() + t * kFields;
      for (size_t k = 0; k < kFields; ++k) *fields[k] += f[k];
    }
    out.push_back(std::move(s));
  }
  return out;
}

std::string CacheIoBackend(const ShardedTables& tables) {
  std::vector<std::string> seen;  // each backend once, in the pieces' order (plans may mix them)
  for (size_t p = 0; p < tables.shards().size(); ++p) {
    const TableCache* cache = tables.shards().cache(p);
    if (cache != nullptr && std::find(seen.begin(), seen.end(), cache->io_backend()) == seen.end()) {
      seen.push_back(cache->io_backend());
    }
  }
  return fmt::format("{}", fmt::join(seen, ", "));
}

void RssSampler::Start() {
  Stop();
  stop_ = false;
  const RssSample first = CurrentRssSample();
  max_ = first.total;
  max_without_files_ = first.total - first.files;
  samples_ = 1;
  thread_ = std::thread([this] {
    const auto raise = [](std::atomic<int64_t>& most, int64_t now) {
      int64_t seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
    };
    while (!stop_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(period_ms_));
      const RssSample now = CurrentRssSample();
      raise(max_, now.total);
      raise(max_without_files_, now.total - now.files);
      ++samples_;
    }
  });
}

void RssSampler::Stop() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::string FormatCacheReport(const std::vector<CachedTableStats>& stats, const RssMax& rss, int64_t budget_bytes,
                              const std::string& cache_dir, const std::string& io) {
  if (stats.empty()) return "";
  std::string out = fmt::format("cached tables (rows on files in {}{}):\n", cache_dir,
                                io.empty() ? "" : ", moved by " + io);
  for (const auto& s : stats) {
    out += fmt::format("  {}: hit rate {:.1f}% ({} lookups, {} misses), {} of {} rows in RAM ({}), evictions {} "
                       "(rows written back {}), file rows read {}, written {}{}{}; {}\n",
                       s.table, 100 * s.hit_rate(), s.lookups, s.misses, s.cached_rows, s.rows,
                       FormatByteSize(s.ram_bytes), s.evictions, s.write_backs, s.rows_read, s.rows_written,
                       s.rows_relocated > 0 ? fmt::format(" (and {} moved by the log's cleaning)", s.rows_relocated) : "",
                       s.prefetched > 0 ? fmt::format(" ({} read ahead by the pipeline, {} of them taken)", s.prefetched,
                                                      s.prefetch_used)
                                        : "",
                       s.params);
  }
  int64_t worst = 0, worst_without_files = 0;
  for (int64_t b : rss.all) worst = std::max(worst, b);
  for (int64_t b : rss.without_files) worst_without_files = std::max(worst_without_files, b);
  out += fmt::format("  resident memory, largest sample during the steps: {}{}\n", FormatByteSize(worst),
                     budget_bytes > 0 ? fmt::format(" (memory budget {} per rank)", FormatByteSize(budget_bytes)) : "");
  if (io.find("mmap") != std::string::npos) {  // the mapped row files' pages count in RSS as they are touched
    out += fmt::format("  without mapped files' pages (the row files io mmap maps, the binary and its libraries; the "
                       "kernel may drop them): {}\n",
                       FormatByteSize(worst_without_files));
  }
  return out;
}

nlohmann::json CacheReportJson(const std::vector<CachedTableStats>& stats, const RssMax& rss, int64_t budget_bytes,
                               const std::string& cache_dir, const std::string& io) {
  nlohmann::json j = {{"dir", cache_dir},
                      {"io", io},
                      {"memory_budget_per_rank", budget_bytes},
                      {"rss_max_bytes_per_rank", rss.all},
                      {"rss_max_without_files_bytes_per_rank", rss.without_files},
                      {"tables", nlohmann::json::object()}};
  for (const auto& s : stats) {
    j["tables"][s.table] = {{"lookups", s.lookups},         {"hits", s.hits},
                            {"hit_rate", s.hit_rate()},     {"misses", s.misses},
                            {"evictions", s.evictions},     {"write_backs", s.write_backs},
                            {"file_rows_read", s.rows_read}, {"file_rows_written", s.rows_written},
                            {"file_rows_relocated", s.rows_relocated},
                            {"ram_bytes", s.ram_bytes},     {"rows", s.rows},
                            {"cached_rows", s.cached_rows}, {"params", s.params},
                            {"prefetched_rows", s.prefetched}, {"prefetched_rows_taken", s.prefetch_used}};
  }
  return j;
}

}  // namespace shardrec::cli
