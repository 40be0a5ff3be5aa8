// Cached tables inside EmbeddingTables (core/include/shardrec/core/cache/
// table_cache.h) against the same group all in memory: every step's
// output, and at the end every row's weights and optimizer state, bit for
// bit, for the lru and lfu caches, every fused optimizer, fp32 and fp16
// weights, sum and mean pooling, weighted bags. The group mixes a cached
// table (two features) with an in-memory one, so one kernel call serves
// both. Along the way: flushes, a purge, managed collision's row resets
// (cached rows and rows on the file), and a checkpoint's round trip (every
// row read out, then written straight into a new table's file). The cache
// holds a fifth of the rows, so most steps evict, write back (behind, on
// the cache's writer thread) and read rows from the file; overflow rows
// come back the batch after they leave. Two runs prefetch each next batch's rows on a thread
// while the current batch trains (prefetch_pipeline). Another test moves thousands of rows a
// step, through the pool of threads and through the mapping; another mixes evaluations, flushes
// between a forward and its backward, a batch trained twice and purges (the batch marked dirty whole).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <thread>

#include "shardrec/core/host_services.h"
#include "shardrec/core/modules/embedding_tables.h"
#include "temp_dir.h"

namespace shardrec {
namespace {

constexpr int64_t kRows = 600, kSmallRows = 40, kDim = 6, kBatch = 8;

class CachedTablesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* lib : {"libshardrec_eviction_builtin.so", "libshardrec_kernel_cpu.so"}) {
      ASSERT_TRUE(registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / lib).ok()) << lib;
    }
  }
  // t0 (cached in the runs under test): features f0, f1; t1: feature f2.
  static std::vector<EmbeddingTableConfig> Tables(DataType dtype, PoolingType pooling, bool weighted) {
    EmbeddingTableConfig t0;
    t0.name = "t0";
    t0.num_embeddings = kRows;
    t0.embedding_dim = kDim;
    t0.feature_names = {"f0", "f1"};
    t0.data_type = dtype;
    t0.pooling = pooling;
    t0.is_weighted = weighted;
    EmbeddingTableConfig t1 = t0;
    t1.name = "t1";
    t1.num_embeddings = kSmallRows;
    t1.feature_names = {"f2"};
    t1.is_weighted = false;
    return {t0, t1};
  }
  // kBatch bags per feature, 0-5 ids each, skewed to small ids.
  static KeyedJaggedTensor Batch(int step, bool weighted) {
    std::mt19937_64 rng(static_cast<uint64_t>(step) * 7919u + 5u);
    std::vector<int64_t> values, lengths;
    for (int f = 0; f < 3; ++f) {
      const int64_t rows = f < 2 ? kRows : kSmallRows;
      for (int64_t b = 0; b < kBatch; ++b) {
        const int64_t n = static_cast<int64_t>(rng() % 6);
        lengths.push_back(n);
        for (int64_t i = 0; i < n; ++i) values.push_back(static_cast<int64_t>(std::min(rng() % rows, rng() % rows)));
      }
    }
    std::optional<std::vector<float>> weights;
    if (weighted) {
      weights.emplace();
      for (size_t i = 0; i < values.size(); ++i) weights->push_back(0.5f + 0.1f * static_cast<float>(i % 7));
    }
    return KeyedJaggedTensor::FromLengths({"f0", "f1", "f2"}, values, lengths, weights).value();
  }
  static Tensor Grad(int step) {
    Tensor g = Tensor::Zeros(dtype::kFloat32, {kBatch, 3 * kDim});
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + step);
    return g;
  }
  // One table of `rows` x kDim read by one feature, f, one id a bag.
  static EmbeddingTableConfig OneFeatureTable(const std::string& name, int64_t rows, DataType dtype) {
    EmbeddingTableConfig t;
    t.name = name;
    t.num_embeddings = rows;
    t.embedding_dim = kDim;
    t.feature_names = {"f"};
    t.data_type = dtype;
    return t;
  }
  static EmbeddingModuleOptions Adagrad(uint64_t init_seed) {
    EmbeddingModuleOptions options;
    options.optimizer = OptimizerSpec::Parse("adagrad,lr=0.1").value();
    options.init_seed = init_seed;
    return options;
  }
  static bool SameBytes(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
  }
  StatusOr<EmbeddingTables> Cached(const std::vector<EmbeddingTableConfig>& tables, const EmbeddingModuleOptions& o,
                                   const CacheParams& params, const std::filesystem::path& file) {
    return EmbeddingTables::Create(registry_, tables, o, {}, {TableCacheSpec{params, file, {}}, std::nullopt});
  }

  HostServices services_;
  PluginRegistry registry_{&services_};
};

TEST_F(CachedTablesTest, EqualsTheInMemoryKernelBitForBit) {
  struct Case {
    std::string policy, optimizer;
    DataType dtype;
    PoolingType pooling;
    bool weighted;
    bool prefetch = false;  // each next batch prefetched on a thread while this one trains
    std::string io = "auto";  // how the row file moves rows (mmap: copies into a shared mapping)
    std::string layout = "in_place";  // where the row file keeps rows (log: appended to a ring)
  };
  std::vector<Case> cases;
  for (const std::string policy : {"lru", "lfu"}) {
    // (A non-zero initial accumulator: rows the cache draws start with the
    // kernel's fresh state, not zeros.)
    for (const std::string opt : {"sgd,lr=0.3", "adagrad,lr=0.2,initial_accumulator_value=0.1",
                                  "rowwise_adagrad,lr=0.2,initial_accumulator_value=0.05", "adam,lr=0.05"}) {
      cases.push_back({policy, opt, DataType::kFp32, PoolingType::kSum, false});
    }
  }
  cases.push_back({"lru", "adagrad,lr=0.2", DataType::kFp16, PoolingType::kSum, false});
  cases.push_back({"lfu", "rowwise_adagrad,lr=0.2", DataType::kFp32, PoolingType::kMean, false});
  cases.push_back({"lru", "adagrad,lr=0.2", DataType::kFp32, PoolingType::kSum, true});
  cases.push_back({"lru", "adagrad,lr=0.2", DataType::kFp32, PoolingType::kSum, false, true});
  cases.push_back({"lfu", "adam,lr=0.05", DataType::kFp16, PoolingType::kMean, true, true});
  cases.push_back({"lru", "adagrad,lr=0.2", DataType::kFp32, PoolingType::kSum, false, false, "mmap"});
  cases.push_back({"lfu", "adam,lr=0.05", DataType::kFp16, PoolingType::kMean, true, true, "mmap"});
  cases.push_back({"lru", "adagrad,lr=0.2", DataType::kFp32, PoolingType::kSum, false, false, "threads", "log"});
  cases.push_back({"lfu", "adam,lr=0.05", DataType::kFp16, PoolingType::kMean, true, true, "mmap", "log"});
  cases.push_back({"lfu", "rowwise_adagrad,lr=0.2", DataType::kFp32, PoolingType::kSum, false, true, "threads", "log"});
  const std::vector<int64_t> rows = {0, 0, 0}, columns = {0, kDim, 2 * kDim};
  int64_t reloads = 0;  // rows written back and loaded again in one batch, over every case
  std::vector<int64_t> all(kRows);
  for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.policy + " " + c.optimizer + " " + DataTypeName(c.dtype) + " " + PoolingName(c.pooling) +
                 (c.weighted ? " weighted" : "") + (c.prefetch ? " prefetch" : "") + " io " + c.io + " layout " + c.layout);
    testing::TempDir dir("cached");
    EmbeddingModuleOptions options;
    options.optimizer = OptimizerSpec::Parse(c.optimizer).value();
    options.init_seed = 17;
    const auto tables = Tables(c.dtype, c.pooling, c.weighted);
    auto ref = EmbeddingTables::Create(registry_, tables, options);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    // (A prefetching cache stages up to its overflow's rows: 100 keeps
    // staged rows across steps, so a stale one would be noticed.)
    const CacheParams params{.algorithm = c.policy, .load_factor = 0.2, .prefetch_pipeline = c.prefetch, .ways = 8,
                             .overflow = c.prefetch ? 100 : 0, .io = c.io, .layout = c.layout};
    auto cached = Cached(tables, options, params, dir.path() / "t0.rows");
    ASSERT_TRUE(cached.ok()) << cached.status().ToString();
    ASSERT_NE(cached->cache(0), nullptr);
    EXPECT_EQ(cached->cache(1), nullptr);
    EXPECT_EQ(cached->Info(0)->num_rows, kRows) << "the whole table's rows";
    int64_t looked_up = 0;  // of t0, since the last (re)creation
    for (int step = 0; step < 40; ++step) {
      if (step == 25) {  // a checkpoint's round trip into a new cached table
        Tensor w = Tensor::Empty(ToDLDataType(c.dtype), {kRows, kDim});
        Tensor st = Tensor::Empty(dtype::kFloat32, {kRows, cached->Info(0)->state_dim});
        ASSERT_TRUE(cached->Flush().ok());
        reloads += cached->cache(0)->counters().reloads;  // the new table counts afresh
        ASSERT_TRUE(cached->ReadRows(0, all, &w, &st).ok());
        Tensor small_w = cached->ReadWeights(1).value(), small_st = cached->ReadState(1).value();
        cached = Cached(tables, options, params, dir.path() / "t0-resumed.rows");
        ASSERT_TRUE(cached.ok()) << cached.status().ToString();
        ASSERT_TRUE(cached->WriteRows(0, all, &w, &st).ok());
        ASSERT_TRUE(cached->WriteWeights(1, small_w).ok() && cached->WriteState(1, small_st).ok());
        EXPECT_EQ(cached->cache(0)->file_counters().rows_written, kRows) << "loaded straight into the file";
        looked_up = 0;
      }
      if (step == 30) {  // managed collision resets rows: some cached, some only on the file
        const std::vector<int64_t> reset = {0, 1, 2, 3, 300, 599};
        ASSERT_TRUE(ref->ResetRows(0, reset).ok());
        ASSERT_TRUE(cached->ResetRows(0, reset).ok());
      }
      const auto batch = Batch(step, c.weighted);
      looked_up += batch.offset_per_key()[2];
      // The next batch's rows read ahead while this one trains, as a
      // pipeline's thread does.
      std::thread ahead;
      Status prefetched = Status::Ok();
      if (c.prefetch) ahead = std::thread([&] { prefetched = cached->Prefetch(Batch(step + 1, c.weighted)); });
      struct Join {
        std::thread& t;
        ~Join() {
          if (t.joinable()) t.join();
        }
      } join{ahead};
      Tensor want = Tensor::Zeros(dtype::kFloat32, {kBatch, 3 * kDim}), got = want.Clone();
      ASSERT_TRUE(ref->Forward(batch, rows, columns, want).ok());
      ASSERT_TRUE(cached->Forward(batch, rows, columns, got).ok());
      ASSERT_TRUE(SameBytes(got, want)) << "output of step " << step;
      if (c.weighted) {
        std::vector<float> want_g(batch.values().size()), got_g(batch.values().size());
        ASSERT_TRUE(ref->IdWeightGradient(batch, rows, columns, Grad(step), want_g).ok());
        ASSERT_TRUE(cached->IdWeightGradient(batch, rows, columns, Grad(step), got_g).ok());
        ASSERT_EQ(got_g, want_g) << "id weight gradient of step " << step;
      }
      ASSERT_TRUE(ref->Backward(batch, rows, columns, Grad(step), step + 1, std::nan("")).ok());
      ASSERT_TRUE(cached->Backward(batch, rows, columns, Grad(step), step + 1, std::nan("")).ok());
      if (ahead.joinable()) ahead.join();
      ASSERT_TRUE(prefetched.ok()) << prefetched.ToString();
      if (step == 10) {
        ASSERT_TRUE(cached->Flush().ok());
      }
      if (step == 18) {
        ASSERT_TRUE(cached->Purge().ok());
      }
    }
    const TableCache& cache = *cached->cache(0);
    EXPECT_EQ(cache.counters().lookups, looked_up);
    EXPECT_EQ(cache.counters().hits + cache.counters().misses, looked_up);
    EXPECT_GT(cache.counters().evictions, 0);
    EXPECT_GT(cache.file_counters().rows_read, 0) << "rows came back from the file";
    reloads += cache.counters().reloads;
    if (c.prefetch) {
      EXPECT_GT(cache.prefetch_counters().staged, 0);
      EXPECT_GT(cache.prefetch_counters().used, 0) << "batches took rows a prefetch read";
    } else {
      EXPECT_EQ(cache.prefetch_counters().staged, 0);
    }
    for (int32_t t : {0, 1}) {
      EXPECT_TRUE(SameBytes(cached->ReadWeights(t).value(), ref->ReadWeights(t).value())) << "weights of t" << t;
      EXPECT_TRUE(SameBytes(cached->ReadState(t).value(), ref->ReadState(t).value())) << "state of t" << t;
    }
  }
  // Overflow rows asked for again in the next batch came back from the
  // write-back itself (still on its way to the file), bit for bit.
  EXPECT_GT(reloads, 0);
}

// A cold cache draws each first sight's initial weights itself, thousands
// a batch on threads: the rows the in-memory kernel made at creation, bit
// for bit, through a batch's misses and through reads of rows never loaded.
TEST_F(CachedTablesTest, ThousandsOfFirstSightsDrawTheKernelsInitialRows) {
  constexpr int64_t kMany = 5000;
  for (const DataType dtype : {DataType::kFp32, DataType::kFp16}) {
    SCOPED_TRACE(DataTypeName(dtype));
    testing::TempDir dir("drawn");
    const EmbeddingTableConfig t = OneFeatureTable("big", kMany, dtype);
    const EmbeddingModuleOptions options = Adagrad(23);
    auto ref = EmbeddingTables::Create(registry_, {t}, options);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const CacheParams params{.algorithm = "lru", .load_factor = 0.5, .overflow = kMany};
    auto cached = EmbeddingTables::Create(registry_, {t}, options, {}, {TableCacheSpec{params, dir.path() / "big.rows", {}}});
    ASSERT_TRUE(cached.ok()) << cached.status().ToString();
    // One batch of the first 3000 rows, one id a bag: 3000 first sights.
    std::vector<int64_t> ids(3000);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
    const auto batch = KeyedJaggedTensor::FromLengths({"f"}, ids, std::vector<int64_t>(ids.size(), 1)).value();
    Tensor want = Tensor::Zeros(dtype::kFloat32, {3000, kDim}), got = want.Clone();
    ASSERT_TRUE(ref->Forward(batch, {0}, {0}, want).ok());
    ASSERT_TRUE(cached->Forward(batch, {0}, {0}, got).ok());
    EXPECT_TRUE(SameBytes(got, want)) << "the first sights' pooled rows";
    // Every row, most of them never loaded: drawn on the way out.
    EXPECT_TRUE(SameBytes(cached->ReadWeights(0).value(), ref->ReadWeights(0).value()));
    EXPECT_TRUE(SameBytes(cached->ReadState(0).value(), ref->ReadState(0).value()));
  }
}

// A backward reuses its forward's slots only for the forward's batch. An
// array the batch owns cannot change, so the same array is that batch; ids
// borrowed from the caller's memory may have changed between the two
// calls, so they are compared with the forward's copy: here they name rows
// the forward never brought in, and the backward says so instead of
// training the forward's rows.
TEST_F(CachedTablesTest, ABackwardOfBorrowedIdsThatChangedIsNotTheForwardsBatch) {
  testing::TempDir dir("borrowed");
  const EmbeddingTableConfig t = OneFeatureTable("b", 1000, DataType::kFp32);
  const CacheParams params{.algorithm = "lru", .load_factor = 0.1, .ways = 4, .overflow = 16};
  auto cached = EmbeddingTables::Create(registry_, {t}, Adagrad(5), {}, {TableCacheSpec{params, dir.path() / "b.rows", {}}});
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  auto ids = std::make_shared<std::vector<int64_t>>(std::vector<int64_t>{1, 2, 3, 4});
  const auto borrowed = SharedArray<int64_t>::Borrow(ids->data(), ids->size(), ids);
  const auto batch = KeyedJaggedTensor::FromLengths({"f"}, borrowed, {1, 1, 1, 1}).value();
  Tensor out = Tensor::Zeros(dtype::kFloat32, {4, kDim}), grad = Tensor::Zeros(dtype::kFloat32, {4, kDim});
  ASSERT_TRUE(cached->Forward(batch, {0}, {0}, out).ok());
  ASSERT_TRUE(cached->Backward(batch, {0}, {0}, grad, 1, std::nan("")).ok()) << "the same ids: the forward's batch";
  ASSERT_TRUE(cached->Forward(batch, {0}, {0}, out).ok());
  *ids = {901, 902, 903, 904};  // the caller's memory changes under the borrowed batch
  const Status changed = cached->Backward(batch, {0}, {0}, grad, 2, std::nan(""));
  EXPECT_FALSE(changed.ok());
  EXPECT_NE(changed.message().find("not cached"), std::string::npos) << changed.ToString();
}

// Steps of thousands of rows moved, as a training table larger than memory
// meets them (the test above moves a handful a step): each step's misses
// read or drawn and written into the kernel, thousands of victims written
// back behind, tens of thousands of slots decided on threads and marked
// dirty, through the pool of threads and through the mapping, with the
// row file in place and as a log that comes round its ring. Every output
// and, at the end, every row and optimizer state equal the in-memory
// kernel's, bit for bit.
TEST_F(CachedTablesTest, StepsMovingThousandsOfRowsEqualTheInMemoryKernel) {
  constexpr int64_t kTableRows = 20000, kIds = 8192, kSteps = 20;
  for (const auto& [io, layout] : std::vector<std::pair<std::string, std::string>>{
           {"threads", "in_place"}, {"mmap", "in_place"}, {"threads", "log"}, {"mmap", "log"}}) {
    SCOPED_TRACE(io + " " + layout);
    testing::TempDir dir("parts");
    const EmbeddingTableConfig t = OneFeatureTable("wide", kTableRows, DataType::kFp32);
    const EmbeddingModuleOptions options = Adagrad(29);
    auto ref = EmbeddingTables::Create(registry_, {t}, options);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const CacheParams params{.algorithm = "lfu", .load_factor = 0.25, .overflow = kIds, .io = io, .layout = layout};
    auto cached = EmbeddingTables::Create(registry_, {t}, options, {}, {TableCacheSpec{params, dir.path() / "wide.rows", {}}});
    ASSERT_TRUE(cached.ok()) << cached.status().ToString();
    std::mt19937_64 rng(31);
    for (int step = 0; step < kSteps; ++step) {
      // Half the ids from a hot tenth of the rows, half from all of them:
      // thousands of misses and write-backs a step once the cache is full.
      std::vector<int64_t> ids(kIds);
      for (size_t i = 0; i < ids.size(); ++i) {
        const auto range = static_cast<uint64_t>(i % 2 == 0 ? kTableRows / 10 : kTableRows);
        ids[i] = static_cast<int64_t>(rng() % range);
      }
      const auto batch = KeyedJaggedTensor::FromLengths({"f"}, ids, std::vector<int64_t>(ids.size(), 1)).value();
      Tensor want = Tensor::Zeros(dtype::kFloat32, {kIds, kDim}), got = want.Clone();
      ASSERT_TRUE(ref->Forward(batch, {0}, {0}, want).ok());
      ASSERT_TRUE(cached->Forward(batch, {0}, {0}, got).ok());
      ASSERT_TRUE(SameBytes(got, want)) << "output of step " << step;
      Tensor g = Tensor::Zeros(dtype::kFloat32, {kIds, kDim});
      for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::cos(0.11f * static_cast<float>(i) + step);
      ASSERT_TRUE(ref->Backward(batch, {0}, {0}, g, step + 1, std::nan("")).ok());
      ASSERT_TRUE(cached->Backward(batch, {0}, {0}, g, step + 1, std::nan("")).ok());
    }
    const TableCache& cache = *cached->cache(0);
    const RowFileCounters moved = cache.file_counters();
    EXPECT_GE(moved.rows_read, 4 * 1024) << "misses read back from the file";
    EXPECT_GE(moved.rows_written, 4 * 1024) << "victims written back";
    if (layout == "log") {  // the ring (about 2 x 20,000 records) came round, moving rows still current
      EXPECT_GT(moved.rows_written, 2 * kTableRows);
      EXPECT_GT(moved.rows_relocated, 0);
    }
    EXPECT_TRUE(SameBytes(cached->ReadWeights(0).value(), ref->ReadWeights(0).value())) << "weights";
    EXPECT_TRUE(SameBytes(cached->ReadState(0).value(), ref->ReadState(0).value())) << "optimizer state";
  }
}

// A backward marks its batch dirty whole (MarkBatchDirty). Steps that
// evaluate (a forward alone), flush between a forward and its backward,
// train a batch twice, flush or purge after it, all with thousands of rows
// moving: outputs, weights and optimizer state stay the in-memory kernel's.
TEST_F(CachedTablesTest, EvaluationsFlushesAndPurgesBetweenStepsLoseNoChangedRow) {
  constexpr int64_t kTableRows = 20000, kIds = 4096, kSteps = 60;
  testing::TempDir dir("turns");
  const EmbeddingTableConfig t = OneFeatureTable("wide", kTableRows, DataType::kFp32);
  const EmbeddingModuleOptions options = Adagrad(37);
  auto ref = EmbeddingTables::Create(registry_, {t}, options);
  ASSERT_TRUE(ref.ok()) << ref.status().ToString();
  const CacheParams params{.algorithm = "lru", .load_factor = 0.2, .overflow = kIds, .io = "mmap", .layout = "log"};
  auto cached = EmbeddingTables::Create(registry_, {t}, options, {}, {TableCacheSpec{params, dir.path() / "wide.rows", {}}});
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  std::mt19937_64 rng(41);
  std::map<int, int> modes;
  int64_t iteration = 0;
  for (int step = 0; step < kSteps; ++step) {
    std::vector<int64_t> ids(kIds);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int64_t>(rng() % static_cast<uint64_t>(i % 2 == 0 ? kTableRows / 10 : kTableRows));
    }
    const auto batch = KeyedJaggedTensor::FromLengths({"f"}, ids, std::vector<int64_t>(ids.size(), 1)).value();
    Tensor want = Tensor::Zeros(dtype::kFloat32, {kIds, kDim}), got = want.Clone();
    ASSERT_TRUE(ref->Forward(batch, {0}, {0}, want).ok());
    ASSERT_TRUE(cached->Forward(batch, {0}, {0}, got).ok());
    ASSERT_TRUE(SameBytes(got, want)) << "output of step " << step;
    const int mode = static_cast<int>(rng() % 6);
    ++modes[mode];
    if (mode == 0) continue;  // an evaluation: no backward
    if (mode == 1) {  // flushed between the forward and its backward
      ASSERT_TRUE(cached->Flush().ok());
    }
    Tensor g = Tensor::Zeros(dtype::kFloat32, {kIds, kDim});
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::cos(0.11f * static_cast<float>(i) + step);
    for (int times = mode == 2 ? 2 : 1; times > 0; --times) {  // mode 2: the batch trained twice
      ++iteration;
      ASSERT_TRUE(ref->Backward(batch, {0}, {0}, g, iteration, std::nan("")).ok());
      ASSERT_TRUE(cached->Backward(batch, {0}, {0}, g, iteration, std::nan("")).ok());
    }
    if (mode == 3) {
      ASSERT_TRUE(cached->Flush().ok());
    } else if (mode == 4) {
      ASSERT_TRUE(cached->Purge().ok());
    }
  }
  for (int mode = 0; mode < 5; ++mode) EXPECT_GT(modes[mode], 0) << "mode " << mode << " never ran";
  EXPECT_GE(cached->cache(0)->file_counters().rows_written, 4 * 1024) << "victims written back";
  EXPECT_TRUE(SameBytes(cached->ReadWeights(0).value(), ref->ReadWeights(0).value())) << "weights";
  EXPECT_TRUE(SameBytes(cached->ReadState(0).value(), ref->ReadState(0).value())) << "optimizer state";
}

TEST_F(CachedTablesTest, BadSettingsAndForeignFilesAreRefusedByName) {
  testing::TempDir dir("cached");
  EmbeddingModuleOptions options;
  options.optimizer = OptimizerSpec::Parse("adagrad").value();
  const auto tables = Tables(DataType::kFp32, PoolingType::kSum, false);
  auto refused = [&](const CacheParams& p, const std::filesystem::path& file, const std::string& says) {
    auto made = Cached(tables, options, p, file);
    ASSERT_FALSE(made.ok()) << says;
    EXPECT_NE(made.status().message().find(says), std::string::npos) << made.status().message();
    EXPECT_NE(made.status().message().find("t0"), std::string::npos) << made.status().message();
  };
  refused({.load_factor = 0}, dir.path() / "a.rows", "load factor");
  refused({.load_factor = -1}, dir.path() / "a.rows", "load factor");
  refused({.load_factor = 1.5}, dir.path() / "a.rows", "load factor");
  refused({.algorithm = "clairvoyant", .load_factor = 0.2}, dir.path() / "a.rows", "clairvoyant");
  refused({.load_factor = 0.2, .precision = "fp16"}, dir.path() / "a.rows", "precision fp16");
  // Someone's file at the path is left alone.
  const auto foreign = dir.path() / "notes.rows";
  std::ofstream(foreign) << "keep me";
  refused({.load_factor = 0.2}, foreign, "not a row file");
  std::ifstream in(foreign);
  std::string kept;
  std::getline(in, kept);
  EXPECT_EQ(kept, "keep me");
  // A row file in use by another table is refused; an earlier run's,
  // no longer in use, is replaced; the file goes with its table.
  const auto file = dir.path() / "t0.rows";
  {
    auto first = Cached(tables, options, {.load_factor = 0.2}, file);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    refused({.load_factor = 0.2}, file, "in use");
    EXPECT_TRUE(std::filesystem::exists(file));
  }
  EXPECT_FALSE(std::filesystem::exists(file)) << "the scratch file is removed with its table";
  {
    auto old = RowFile::Create(file, {kRows, 8, "an earlier run", 1});
    ASSERT_TRUE(old.ok());
  }
  auto t = Cached(tables, options, {.load_factor = 0.2}, file);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // An out-of-range id: fatal names it and its feature.
  std::vector<int64_t> lengths(3 * kBatch, 0);
  lengths[0] = 1;
  lengths[kBatch] = 1;
  auto bad = KeyedJaggedTensor::FromLengths({"f0", "f1", "f2"}, {3, kRows}, lengths).value();
  Tensor out = Tensor::Zeros(dtype::kFloat32, {kBatch, 3 * kDim});
  auto st = t->Forward(bad, {0, 0, 0}, {0, kDim, 2 * kDim}, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("id 600 of feature 'f1' is outside"), std::string::npos) << st.message();
  // Under "ignore" the id is dropped and counted, as the in-memory kernel does.
  EmbeddingModuleOptions ignore = options;
  ignore.bounds_check = SR_BOUNDS_CHECK_IGNORE;
  auto lenient = Cached(tables, ignore, {.load_factor = 0.2}, dir.path() / "lenient.rows");
  auto memory = EmbeddingTables::Create(registry_, tables, ignore);
  ASSERT_TRUE(lenient.ok() && memory.ok());
  Tensor want = out.Clone(), got = out.Clone();
  int64_t want_invalid = 0, got_invalid = 0;
  ASSERT_TRUE(memory->Forward(bad, {0, 0, 0}, {0, kDim, 2 * kDim}, want, &want_invalid).ok());
  ASSERT_TRUE(lenient->Forward(bad, {0, 0, 0}, {0, kDim, 2 * kDim}, got, &got_invalid).ok());
  EXPECT_EQ(got_invalid, 1);
  EXPECT_EQ(got_invalid, want_invalid);
  EXPECT_TRUE(SameBytes(got, want));
}

// A write-back that fails on the writer thread (the file may not grow past
// a size limit: EFBIG) stops the cache at its next call, which names the
// table and the error; every later call refuses the same way, and the
// file's rows are no longer trusted.
TEST_F(CachedTablesTest, AWriteBackThatFailsStopsTheCacheNamingTheError) {
  testing::TempDir dir("cached");
  EmbeddingModuleOptions options;
  options.optimizer = OptimizerSpec::Parse("adagrad,lr=0.2").value();
  const auto tables = Tables(DataType::kFp32, PoolingType::kSum, false);
  auto cached = Cached(tables, options, {.load_factor = 0.2, .ways = 8}, dir.path() / "t0.rows");
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  // Header and bitmap (8 KiB) and the first 40 rows may be written; rows
  // past them fail. SIGXFSZ is ignored so the write returns EFBIG.
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = before;
  small.rlim_cur = 8192 + 40 * 2 * kDim * 4;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  struct Restore {
    rlimit limit;
    void (*handler)(int);
    ~Restore() {
      setrlimit(RLIMIT_FSIZE, &limit);
      std::signal(SIGXFSZ, handler);
    }
  } restore{before, old_handler};
  const std::vector<int64_t> rows = {0, 0, 0}, columns = {0, kDim, 2 * kDim};
  Status failed = Status::Ok();
  int step = 0;
  for (; step < 40 && failed.ok(); ++step) {
    const auto batch = Batch(step, false);
    Tensor out = Tensor::Zeros(dtype::kFloat32, {kBatch, 3 * kDim});
    failed = cached->Forward(batch, rows, columns, out);
    if (failed.ok()) failed = cached->Backward(batch, rows, columns, Grad(step), step + 1, std::nan(""));
  }
  ASSERT_FALSE(failed.ok()) << "40 steps evicting rows past the limit all succeeded";
  EXPECT_GT(step, 1) << "the first write-backs come after a batch has trained";
  EXPECT_NE(failed.message().find("File too large"), std::string::npos) << failed.message();
  EXPECT_NE(failed.message().find("table 't0'"), std::string::npos) << failed.message();
  EXPECT_NE(failed.message().find("stopped after an I/O error"), std::string::npos) << failed.message();
  // Every later call refuses, naming the same error.
  Tensor out = Tensor::Zeros(dtype::kFloat32, {kBatch, 3 * kDim});
  const Status again = cached->Forward(Batch(99, false), rows, columns, out);
  EXPECT_EQ(again.message(), failed.message());
  EXPECT_FALSE(cached->Flush().ok());
  EXPECT_FALSE(cached->ReadWeights(0).ok());
}

}  // namespace
}  // namespace shardrec
