// RunCacheBench (cache_bench.h). Each step: `batch` ids as one pooled
// feature of one id per bag, forward then backward with the fused
// optimizer: what training asks of a table. The cached table runs exactly
// the in-memory kernel's arithmetic (tested), so the difference is the
// cache's: finding slots, moving rows to and from the file. Each cached
// run is timed against an in-memory table trained beside it, the two
// taking turns every few steps (PairedSteps).
#include "cache_bench.h"

#include <chrono>
#include <functional>
#include <cmath>
#include <numeric>
#include <random>

#include <fmt/format.h>

#include "shardrec/core/cache/row_file.h"
#include "shardrec/core/modules/embedding_tables.h"

namespace shardrec::cli {
namespace {

EmbeddingTableConfig BenchTable(const CacheBenchConfig& c) {
  EmbeddingTableConfig t;
  t.name = "t0";
  t.num_embeddings = c.rows;
  t.embedding_dim = c.dim;
  t.feature_names = {"f"};
  return t;
}

// A table's step: forward, then backward with the fused optimizer; and
// what ends its turn: the cached table's write-behind finishes inside its
// own time, not in the other table's.
struct StepFns {
  std::function<Status(const KeyedJaggedTensor&, Tensor&)> forward;
  std::function<Status(const KeyedJaggedTensor&, const Tensor&, int64_t)> backward;
  std::function<void()> settle = [] {};
  std::function<Status()> prepare = [] { return Status::Ok(); };  // before each turn, off the clock
};

// Steps of the in-memory table and the cached one, alternating: on this
// kind of machine speed drifts by 20-40% within minutes, so a ratio of two
// runs a minute apart measured the drift as much as the cache. Blocks of
// kCacheBenchBlock steps take turns (each table's own caches warm within a
// block); per pass, each table's seconds. `between(p)` runs after pass p,
// off the clock.
template <class Between>
StatusOr<std::vector<std::pair<double, double>>> PairedSteps(const CacheBenchConfig& c, const StepFns& memory,
                                                             const StepFns& cached, Between between) {
  // Batches and gradients made before the clock starts: only the tables' work is timed.
  const auto n = static_cast<int64_t>(c.ids.size());
  std::vector<KeyedJaggedTensor> batches;
  for (int64_t at = 0; at < n; at += c.batch) {
    const int64_t b = std::min(c.batch, n - at);
    std::vector<int64_t> values(c.ids.begin() + at, c.ids.begin() + at + b);
    SR_ASSIGN_OR_RETURN(auto kjt, KeyedJaggedTensor::FromLengths({"f"}, std::move(values),
                                                                 std::vector<int64_t>(static_cast<size_t>(b), 1)));
    batches.push_back(std::move(kjt));
  }
  auto gradient = [&](int64_t b) {
    Tensor g = Tensor::Zeros(dtype::kFloat32, {b, c.dim});
    float* p = g.data<float>();
    for (int64_t i = 0; i < g.numel(); ++i) p[i] = 0.01f * static_cast<float>(i % 7 - 3);
    return g;
  };
  const Tensor full = gradient(c.batch), last = gradient(n - (static_cast<int64_t>(batches.size()) - 1) * c.batch);
  Tensor out = Tensor::Zeros(dtype::kFloat32, {c.batch, c.dim}), out_last = Tensor::Zeros(dtype::kFloat32, {last.size(0), c.dim});
  // Steps [from, to) of a pass through one table; its seconds.
  auto run = [&](const StepFns& t, size_t from, size_t to, int64_t step) -> StatusOr<double> {
    SR_RETURN_IF_ERROR(t.prepare());
    const auto start = std::chrono::steady_clock::now();
    for (size_t s = from; s < to; ++s) {
      const bool is_last = s + 1 == batches.size();
      SR_RETURN_IF_ERROR(t.forward(batches[s], is_last ? out_last : out));
      SR_RETURN_IF_ERROR(t.backward(batches[s], is_last ? last : full, ++step));
    }
    t.settle();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  std::vector<std::pair<double, double>> seconds;
  int64_t step = 0;
  for (int p = 0; p < c.passes; ++p) {
    double in_memory = 0, in_cache = 0;
    for (size_t from = 0; from < batches.size(); from += kCacheBenchBlock) {
      const size_t to = std::min(batches.size(), from + kCacheBenchBlock);
      SR_ASSIGN_OR_RETURN(double m, run(memory, from, to, step));
      SR_ASSIGN_OR_RETURN(double k, run(cached, from, to, step));
      in_memory += m;
      in_cache += k;
      step += static_cast<int64_t>(to - from);
    }
    seconds.emplace_back(in_memory, in_cache);
    between(p);
  }
  return seconds;
}

}  // namespace

StatusOr<CacheBenchResult> RunCacheBench(const PluginRegistry& registry, const CacheBenchConfig& c,
                                         const std::function<void(const CacheBenchRun&)>& done) {
  EmbeddingModuleOptions options;
  SR_ASSIGN_OR_RETURN(options.optimizer, OptimizerSpec::Parse(c.optimizer));
  const auto table = BenchTable(c);
  const std::vector<int64_t> rows = {0}, columns = {0};
  const double nan = std::nan("");
  CacheBenchResult result;
  {
    // The probe: a row file as large as the table's, every row written,
    // then random rows read in batches as a step's misses would be.
    const auto file = c.dir / "bench-probe.rows";
    std::error_code ec;
    std::filesystem::remove(file, ec);
    const int64_t row_bytes = c.dim * 4 * 2;  // weights and Adagrad-sized state
    auto probe = [&]() -> StatusOr<double> {
      SR_ASSIGN_OR_RETURN(auto f, RowFile::Create(file, {c.rows, row_bytes, "bench cache probe", c.io_threads, c.io}));
      result.io_backend = f.io_backend();
      constexpr int64_t kChunk = 1 << 14;
      std::vector<std::byte> buf(static_cast<size_t>(std::max(kChunk, c.batch) * row_bytes), std::byte{1});
      std::vector<int64_t> rows_of;
      for (int64_t at = 0; at < c.rows; at += kChunk) {
        rows_of.resize(static_cast<size_t>(std::min(kChunk, c.rows - at)));
        std::iota(rows_of.begin(), rows_of.end(), at);
        SR_RETURN_IF_ERROR(f.Write(rows_of, buf.data()));
      }
      SR_RETURN_IF_ERROR(f.Sync());
      std::mt19937_64 rng(7);
      const int64_t total = std::min<int64_t>(static_cast<int64_t>(c.ids.size()), 1 << 20);
      std::vector<std::vector<int64_t>> batches;
      for (int64_t at = 0; at < total; at += c.batch) {
        std::vector<int64_t> b(static_cast<size_t>(std::min(c.batch, total - at)));
        for (auto& r : b) r = static_cast<int64_t>(rng() % static_cast<uint64_t>(c.rows));
        batches.push_back(std::move(b));
      }
      double seconds = 0;
      for (const auto& b : batches) {
        if (c.drop_page_cache) SR_RETURN_IF_ERROR(f.DropPageCache());
        const auto start = std::chrono::steady_clock::now();
        SR_RETURN_IF_ERROR(f.Read(b, buf.data()));
        seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }
      return static_cast<double>(total) / seconds;
    };
    auto rate = probe();
    std::filesystem::remove(file, ec);
    if (!rate.ok()) return rate.status().WithContext("the random-read probe");
    result.probe_rows_per_s = *rate;
  }
  for (const auto& policy : c.policies) {
    for (double lf : c.load_factors) {
      CacheParams params;
      params.algorithm = policy.name;
      params.algorithm_options = policy.options;
      params.load_factor = lf;
      params.io_threads = c.io_threads;
      params.io = c.io;
      params.layout = c.layout;
      params.ways = c.ways;
      // One step's ids fit whatever the sets hold.
      params.overflow = c.batch;
      auto run = [&]() -> StatusOr<CacheBenchRun> {
        // A scratch row file: removed with the table.
        TableCacheSpec spec{params, c.dir / fmt::format("bench-{}-{}.rows", policy.name, lf), {}};
        SR_ASSIGN_OR_RETURN(auto cached, EmbeddingTables::Create(registry, {table}, options, {}, {std::move(spec)}));
        const TableCache& cache = *cached.cache(0);
        CacheBenchRun r;
        r.policy = policy.shown;
        r.load_factor = lf;
        r.cached_rows = cache.cached_rows();
        // Each pass's share of the counters, which run on across passes.
        CacheCounters seen;
        RowFileCounters moved;
        auto pass_done = [&](int) {
          const CacheCounters& now = cache.counters();
          const RowFileCounters& file = cache.file_counters();
          CacheBenchPass p;
          const int64_t lookups = now.lookups - seen.lookups;
          p.hit_rate = lookups > 0 ? static_cast<double>(now.hits - seen.hits) / static_cast<double>(lookups) : 0.0;
          p.misses = now.misses - seen.misses;
          p.rows_read = file.rows_read - moved.rows_read;
          p.rows_written = file.rows_written - moved.rows_written;
          p.rows_relocated = file.rows_relocated - moved.rows_relocated;
          auto resident = cache.FileResidentBytes();
          p.file_resident_bytes = resident.ok() ? *resident : -1;
          r.passes.push_back(p);
          seen = now;
          moved = file;
        };
        // The in-memory kernel on the same steps, a fresh table beside this one.
        SR_ASSIGN_OR_RETURN(auto memory, EmbeddingTables::Create(registry, {table}, options));
        const StepFns memory_steps{
            [&](const KeyedJaggedTensor& k, Tensor& out) { return memory.Forward(k, rows, columns, out); },
            [&](const KeyedJaggedTensor& k, const Tensor& g, int64_t step) {
              return memory.Backward(k, rows, columns, g, step, nan);
            }};
        const StepFns cached_steps{
            [&](const KeyedJaggedTensor& k, Tensor& out) { return cached.Forward(k, rows, columns, out); },
            [&](const KeyedJaggedTensor& k, const Tensor& g, int64_t step) {
              return cached.Backward(k, rows, columns, g, step, nan);
            },
            [&] { (void)cache.file_counters(); },  // waits for the write in flight
            [&] { return c.drop_page_cache ? cache.DropPageCache() : Status::Ok(); }};
        SR_ASSIGN_OR_RETURN(auto seconds, PairedSteps(c, memory_steps, cached_steps, pass_done));
        const auto ids = static_cast<double>(c.ids.size());
        for (size_t p = 0; p < seconds.size(); ++p) {
          r.passes[p].memory_ids_per_s = ids / seconds[p].first;
          r.passes[p].ids_per_s = ids / seconds[p].second;
        }
        return r;
      };
      auto r = run();
      if (!r.ok()) return r.status().WithContext(fmt::format("policy {}, load factor {}", policy.shown, lf));
      done(*r);
      result.runs.push_back(*r);
    }
  }
  return result;
}

}  // namespace shardrec::cli
