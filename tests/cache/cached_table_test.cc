// CachedTable (core/include/shardrec/core/cache/cached_table.h) against the
// in-memory kernel on the same table: every step's pooled output, and at
// the end every row's weights and optimizer state, bit for bit, for the
// lru and lfu caches, every fused optimizer, fp32 and fp16 weights, sum and
// mean pooling; through mid-run flushes, a purge, and a reopen of the file
// by a new CachedTable. The cache holds a fifth of the rows, so most steps
// evict, write back and read rows from the file.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "shardrec/core/cache/cached_table.h"
#include "shardrec/core/host_services.h"
#include "temp_dir.h"

namespace shardrec {
namespace {

constexpr int64_t kRows = 600, kDim = 6, kBatch = 8;

class CachedTableTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* lib : {"libshardrec_eviction_builtin.so", "libshardrec_kernel_cpu.so"}) {
      ASSERT_TRUE(registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / lib).ok()) << lib;
    }
  }
  static EmbeddingTableConfig Table(DataType dtype, PoolingType pooling) {
    EmbeddingTableConfig t;
    t.name = "t0";
    t.num_embeddings = kRows;
    t.embedding_dim = kDim;
    t.feature_names = {"f0", "f1"};
    t.data_type = dtype;
    t.pooling = pooling;
    return t;
  }
  // Two features of kBatch bags, 0-5 ids each, skewed to small ids.
  static KeyedJaggedTensor Batch(int step) {
    std::mt19937_64 rng(static_cast<uint64_t>(step) * 7919u + 5u);
    std::vector<int64_t> values, lengths;
    for (int f = 0; f < 2; ++f) {
      for (int64_t b = 0; b < kBatch; ++b) {
        const int64_t n = static_cast<int64_t>(rng() % 6);
        lengths.push_back(n);
        for (int64_t i = 0; i < n; ++i) {
          values.push_back(static_cast<int64_t>(std::min(rng() % kRows, rng() % kRows)));
        }
      }
    }
    return KeyedJaggedTensor::FromLengths({"f0", "f1"}, values, lengths).value();
  }
  static Tensor Grad(int step) {
    Tensor g = Tensor::Zeros(dtype::kFloat32, {kBatch, 2 * kDim});
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::sin(0.37f * static_cast<float>(i) + step);
    return g;
  }
  static bool SameBytes(const Tensor& a, const Tensor& b) {
    return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
  }

  HostServices services_;
  PluginRegistry registry_{&services_};
};

TEST_F(CachedTableTest, EqualsTheInMemoryKernelBitForBit) {
  struct Case {
    std::string policy, optimizer;
    DataType dtype;
    PoolingType pooling;
  };
  std::vector<Case> cases;
  for (const std::string policy : {"lru", "lfu"}) {
    for (const std::string opt : {"sgd,lr=0.3", "adagrad,lr=0.2", "rowwise_adagrad,lr=0.2", "adam,lr=0.05"}) {
      cases.push_back({policy, opt, DataType::kFp32, PoolingType::kSum});
    }
  }
  cases.push_back({"lru", "adagrad,lr=0.2", DataType::kFp16, PoolingType::kSum});
  cases.push_back({"lfu", "rowwise_adagrad,lr=0.2", DataType::kFp32, PoolingType::kMean});
  const std::vector<int64_t> rows = {0, 0}, columns = {0, kDim};
  std::vector<int64_t> all(kRows);
  for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.policy + " " + c.optimizer + " " + DataTypeName(c.dtype) + " " + PoolingName(c.pooling));
    testing::TempDir dir("cached");
    const auto file = dir.path() / "t0.rows";
    EmbeddingModuleOptions options;
    options.optimizer = OptimizerSpec::Parse(c.optimizer).value();
    options.init_seed = 17;
    const auto config = Table(c.dtype, c.pooling);
    auto ref = EmbeddingTables::Create(registry_, {config}, options);
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    const CacheParams params{.algorithm = c.policy, .load_factor = 0.2, .ways = 8};
    auto cached = CachedTable::Create(registry_, config, options, params, file);
    ASSERT_TRUE(cached.ok()) << cached.status().ToString();
    int64_t looked_up = 0;  // since the last (re)open
    for (int step = 0; step < 40; ++step) {
      if (step == 25) {  // a new CachedTable over the flushed file
        ASSERT_TRUE(cached->Flush().ok());
        cached = CachedTable::Create(registry_, config, options, params, file);
        ASSERT_TRUE(cached.ok()) << cached.status().ToString();
        looked_up = 0;
      }
      const auto batch = Batch(step);
      looked_up += static_cast<int64_t>(batch.values().size());
      Tensor want = Tensor::Zeros(dtype::kFloat32, {kBatch, 2 * kDim}), got = want.Clone();
      ASSERT_TRUE(ref->Forward(batch, rows, columns, want).ok());
      ASSERT_TRUE(cached->Forward(batch, rows, columns, got).ok());
      ASSERT_TRUE(SameBytes(got, want)) << "output of step " << step;
      ASSERT_TRUE(ref->Backward(batch, rows, columns, Grad(step), step + 1, std::nan("")).ok());
      ASSERT_TRUE(cached->Backward(batch, rows, columns, Grad(step), step + 1, std::nan("")).ok());
      if (step == 10) {
        ASSERT_TRUE(cached->Flush().ok());
      }
      if (step == 18) {
        ASSERT_TRUE(cached->Purge().ok());
      }
    }
    EXPECT_EQ(cached->counters().lookups, looked_up);
    EXPECT_EQ(cached->counters().hits + cached->counters().misses, looked_up);
    EXPECT_GT(cached->counters().evictions, 0);
    EXPECT_GT(cached->file_counters().rows_read, 0) << "rows came back from the file";
    Tensor weights, state;
    ASSERT_TRUE(cached->ReadRows(all, &weights, &state).ok());
    EXPECT_TRUE(SameBytes(weights, ref->ReadWeights(0).value())) << "weights";
    EXPECT_TRUE(SameBytes(state, ref->ReadState(0).value())) << "optimizer state";
  }
}

TEST_F(CachedTableTest, BadSettingsAndForeignFilesAreRefusedByName) {
  testing::TempDir dir("cached");
  EmbeddingModuleOptions options;
  options.optimizer = OptimizerSpec::Parse("adagrad").value();
  const auto config = Table(DataType::kFp32, PoolingType::kSum);
  for (double lf : {0.0, -1.0, 1.5}) {
    auto made = CachedTable::Create(registry_, config, options, {.load_factor = lf}, dir.path() / "x.rows");
    ASSERT_FALSE(made.ok());
    EXPECT_NE(made.status().message().find("load factor"), std::string::npos) << made.status().message();
  }
  auto made = CachedTable::Create(registry_, config, options, {.algorithm = "clairvoyant"}, dir.path() / "y.rows");
  EXPECT_FALSE(made.ok());
  // A file of another table (other row size: sgd keeps no state).
  {
    auto first = CachedTable::Create(registry_, config, options, {}, dir.path() / "t0.rows");
    ASSERT_TRUE(first.ok() && first->Flush().ok());
  }
  EmbeddingModuleOptions sgd = options;
  sgd.optimizer = OptimizerSpec::Parse("sgd").value();
  auto other = CachedTable::Create(registry_, config, sgd, {}, dir.path() / "t0.rows");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("table 't0'"), std::string::npos) << other.status().message();
  // An out-of-range id: fatal names it; the cache is unchanged.
  auto t = CachedTable::Create(registry_, config, options, {}, dir.path() / "t0.rows");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto bad = KeyedJaggedTensor::FromLengths({"f0", "f1"}, {3, kRows}, {1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0})
                 .value();
  Tensor out = Tensor::Zeros(dtype::kFloat32, {kBatch, 2 * kDim});
  auto st = t->Forward(bad, {0, 0}, {0, kDim}, out);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("id 600 is outside"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace shardrec
