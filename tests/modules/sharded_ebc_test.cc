// ShardedEmbeddingBagCollection against the unsharded module on the same
// global batch: outputs at every step, then every table row and optimizer
// state after the last (fp32, 1e-5), for each built-in sharder x world
// sizes 1-4 x {sum, mean} x {weighted, unweighted}, over the comm backend
// of the test parameter; a mixed plan; tables with fewer rows than ranks;
// the fast paths against the generic output dist; for weighted tables, the
// gradient with respect to every id's weight (PositionWeightedModule's
// input) at every step; bit-identical
// data-parallel replicas; and the errors a user meets.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <limits>
#include <mutex>

#include "sharded_fixture.h"
#include "temp_dir.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"

namespace shardrec {
namespace {

constexpr float kTol = 1e-5f;
constexpr int kSteps = 3;

struct Case {
  std::string sharder;  // "" with plan_json: the plan file
  int world = 2;
  PoolingType pooling = PoolingType::kSum;
  bool weighted = false;
  std::string optimizer = "adagrad,lr=0.1";
  std::string plan_json;
  bool fast_paths = true;
  int ranks_per_host = 0;  // 0: the world
  std::filesystem::path cache_dir;  // for plans that cache tables (fused_ssd_caching)
  // Ids outside their tables in every rank's batch, dropped by the bounds
  // check (SR_BOUNDS_CHECK_IGNORE) on both sides.
  bool bad_ids = false;
};

std::string Describe(const Case& c) {
  return fmt::format("sharder={} world={} pooling={} weighted={} optimizer={} fast_paths={}",
                     c.sharder.empty() ? "plan" : c.sharder, c.world, PoolingName(c.pooling), c.weighted, c.optimizer,
                     c.fast_paths);
}

class ShardedEbc : public ShardedTest {
 protected:
  // t0 has two features; t2 has fewer rows than a world of 4 has ranks.
  static std::vector<EmbeddingTableConfig> Tables(const Case& c) {
    return {Table("t0", 50, 8, {"f0", "f1"}, c.pooling, c.weighted), Table("t1", 23, 5, {"f2"}, c.pooling, c.weighted),
            Table("t2", 3, 12, {"f3"}, c.pooling, c.weighted)};
  }
  static int64_t BatchOf(int rank) { return 3 + rank % 2; }  // unequal on purpose

  // A global batch's per-id values (ranks' samples concatenated per
  // feature) split back into each rank's, in its own order.
  static std::vector<std::vector<float>> SplitByRank(const std::vector<KeyedJaggedTensor>& per_rank,
                                                     const std::vector<float>& global) {
    std::vector<std::vector<float>> out;
    for (const auto& kjt : per_rank) out.emplace_back(kjt.values().size());
    size_t at = 0;
    for (int k = 0; k < per_rank[0].num_keys(); ++k) {
      for (size_t r = 0; r < per_rank.size(); ++r) {
        const auto from = per_rank[r].offset_per_key();
        const auto n = static_cast<size_t>(from[static_cast<size_t>(k) + 1] - from[static_cast<size_t>(k)]);
        std::copy_n(global.begin() + static_cast<int64_t>(at), n, out[r].begin() + from[static_cast<size_t>(k)]);
        at += n;
      }
    }
    return out;
  }

  // Runs the case; returns the output dist the sharded module chose.
  std::string Run(const Case& c) {
    SCOPED_TRACE(Describe(c));
    const auto tables = Tables(c);
    PlanRequest req;
    req.tables = tables;
    req.world_size = c.world;
    req.ranks_per_host = c.ranks_per_host > 0 ? c.ranks_per_host : c.world;
    req.sharder = c.plan_json.empty() ? c.sharder : "";
    if (!c.plan_json.empty()) req.spec = ParsePlanJson(c.plan_json, "test plan").value();
    auto plan = MakePlan(registry_, req);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    if (!plan.ok()) return "";
    if (c.sharder == "column_wise" || c.plan_json.find("column_wise") != std::string::npos) {
      EXPECT_GT(plan->tables[0].placement.shards.size() + plan->tables[2].placement.shards.size(), 2u)
          << "the column-wise case must split a table";
    }
    EmbeddingModuleOptions options;
    options.optimizer = OptimizerSpec::Parse(c.optimizer).value();
    options.init_seed = 7;
    options.cache_dir = c.cache_dir;
    if (c.bad_ids) options.bounds_check = SR_BOUNDS_CHECK_IGNORE;
    // A rank's batch; with bad_ids its first id of f2 and last of f0 lie
    // past their tables (one feature of a two-feature table, one whole table).
    auto local = [&](int rank, int step) {
      KeyedJaggedTensor kjt = LocalBatch(tables, rank, step, BatchOf(rank));
      if (!c.bad_ids) return kjt;
      std::vector<int64_t> values = kjt.values().ToVector();
      const auto at = kjt.offset_per_key();
      if (at[3] > at[2]) values[static_cast<size_t>(at[2])] = 23 + rank;
      if (at[1] > at[0]) values[static_cast<size_t>(at[1] - 1)] = -1 - step;
      EXPECT_TRUE(kjt.ReplaceValues(std::move(values)).ok());
      return kjt;
    };

    // The unsharded reference on the global batch.
    auto ref = EmbeddingBagCollection::Create(registry_, tables, options);
    EXPECT_TRUE(ref.ok()) << ref.status().ToString();
    if (!ref.ok()) return "";
    std::vector<int64_t> first(static_cast<size_t>(c.world) + 1, 0);
    for (int r = 0; r < c.world; ++r) first[static_cast<size_t>(r) + 1] = first[static_cast<size_t>(r)] + BatchOf(r);
    const int64_t global = first.back();
    int64_t width = 0;
    for (const auto& t : tables) width += t.embedding_dim * static_cast<int64_t>(t.feature_names.size());
    std::vector<Tensor> expected;
    int64_t want_invalid = 0, got_invalid = 0;  // ids dropped, over all steps (and ranks)
    // Weighted: the per-id weight gradient, per step, split into each rank's ids.
    std::vector<std::vector<std::vector<float>>> expected_weight_grad(kSteps);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<KeyedJaggedTensor> per_rank;
      for (int r = 0; r < c.world; ++r) per_rank.push_back(local(r, step));
      const auto batch = GlobalBatch(per_rank);
      int64_t invalid = 0;
      auto out = ref->Forward(batch, &invalid);
      want_invalid += invalid;
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      if (!out.ok()) return "";
      expected.push_back(out->values().Clone());
      std::vector<float> weight_grad;
      EXPECT_TRUE(ref->Backward(batch, PooledGrad(0, global, width, step), step + 1,
                                std::numeric_limits<double>::quiet_NaN(), c.weighted ? &weight_grad : nullptr)
                      .ok());
      if (c.weighted) expected_weight_grad[static_cast<size_t>(step)] = SplitByRank(per_rank, weight_grad);
    }

    std::mutex mu;
    std::string path;
    Replicas replicas;
    OnRanks(c.world, [&](const ProcessGroup& group) {
      SCOPED_TRACE(Describe(c));  // traces are per thread
      const int me = group.rank();
      ShardedModuleOptions so;
      so.fast_paths = c.fast_paths;
      auto sebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan.value(), options, so);
      ASSERT_TRUE(sebc.ok()) << sebc.status().ToString();
      for (int step = 0; step < kSteps; ++step) {
        int64_t invalid = 0;
        auto out = sebc->Forward(local(me, step), &invalid);
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        {
          std::lock_guard<std::mutex> lock(mu);
          got_invalid += invalid;
        }
        EXPECT_LE(MaxAbsDiff(out->values(), Rows(expected[static_cast<size_t>(step)], first[static_cast<size_t>(me)], BatchOf(me))), kTol)
            << "output, rank " << me << ", step " << step;
        std::vector<float> weight_grad;
        auto st = sebc->Backward(PooledGrad(first[static_cast<size_t>(me)], BatchOf(me), width, step), step + 1,
                                 std::numeric_limits<double>::quiet_NaN(), c.weighted ? &weight_grad : nullptr);
        ASSERT_TRUE(st.ok()) << st.ToString();
        if (c.weighted) {
          const auto& want = expected_weight_grad[static_cast<size_t>(step)][static_cast<size_t>(me)];
          ASSERT_EQ(weight_grad.size(), want.size()) << "id weight gradient, rank " << me << ", step " << step;
          float worst = 0;
          for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(weight_grad[i] - want[i]));
          EXPECT_LE(worst, kTol) << "id weight gradient, rank " << me << ", step " << step;
        }
      }
      // A cached table's pieces looked their ids up through their caches.
      for (size_t p = 0; p < sebc->tables().shards().size(); ++p) {
        const TableCache* cache = sebc->tables().shards().cache(p);
        const bool planned = IsCachedKernel(plan->tables[0].sharding.compute_kernel) &&
                             sebc->tables().shards().piece(p).config.name.starts_with("t0@");
        EXPECT_EQ(cache != nullptr, planned) << sebc->tables().shards().piece(p).config.name;
        if (cache != nullptr) {
          EXPECT_GT(cache->counters().lookups, 0);
        }
      }
      ExpectTablesMatch(*sebc, ref->tables(), tables, plan.value(), me, kTol, mu, replicas);
      std::lock_guard<std::mutex> lock(mu);
      path = sebc->output_dist();
    });
    ExpectIdenticalReplicas(replicas);
    EXPECT_EQ(got_invalid, want_invalid) << "ids dropped as outside their tables";
    if (c.bad_ids) {
      EXPECT_GT(want_invalid, 0);
    }
    return path;
  }

  void Matrix(const std::string& sharder) {
    for (int world = 1; world <= 4; ++world) {
      for (PoolingType pooling : {PoolingType::kSum, PoolingType::kMean}) {
        for (bool weighted : {false, true}) {
          Case c;
          c.sharder = sharder;
          c.world = world;
          c.pooling = pooling;
          c.weighted = weighted;
          // Table-row-wise over two hosts where the world allows.
          if (sharder == "table_row_wise" && world % 2 == 0) c.ranks_per_host = world / 2;
          // Column-wise's default block (TorchRec's: >= 128 columns) would
          // keep these narrow tables whole: split them, unevenly for t1, t2.
          if (sharder == "column_wise") {
            c.plan_json = R"({"plan": {
                "t0": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "4"}},
                "t1": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "2"}},
                "t2": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "5"}}}})";
          }
          Run(c);
        }
      }
    }
  }
};

TEST_P(ShardedEbc, TableWiseEqualsUnsharded) { Matrix("table_wise"); }
TEST_P(ShardedEbc, RowWiseEqualsUnsharded) { Matrix("row_wise"); }
TEST_P(ShardedEbc, ColumnWiseEqualsUnsharded) { Matrix("column_wise"); }
TEST_P(ShardedEbc, TableRowWiseEqualsUnsharded) { Matrix("table_row_wise"); }
TEST_P(ShardedEbc, DataParallelEqualsUnshardedWithIdenticalReplicas) { Matrix("data_parallel"); }
// A sharder with its own route_ids: local rows stand for global rows g with
// g % world == block, so initial weights, routing and ReadTable go through
// the learned local-to-global row map.
TEST_P(ShardedEbc, SelfRoutingCyclicEqualsUnsharded) { Matrix("row_cyclic"); }

// Ids past their tables are dropped where they are routed, as the unsharded
// module drops them; the one-block fast route (table- and column-wise) and
// the per-id one (row-wise) alike.
TEST_P(ShardedEbc, IdsOutsideTheirTablesAreDroppedAsUnsharded) {
  for (const std::string sharder : {"table_wise", "row_wise", "column_wise"}) {
    for (int world : {1, 2, 3}) {
      Case c;
      c.sharder = sharder;
      c.world = world;
      c.bad_ids = true;
      c.weighted = world == 2;
      if (sharder == "column_wise") {
        c.plan_json = R"({"plan": {"t0": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "4"}},
                                   "t1": {"sharding_type": "column_wise"}, "t2": {"sharding_type": "column_wise"}}})";
      }
      Run(c);
    }
  }
}

TEST_P(ShardedEbc, MixedPlanEqualsUnsharded) {
  Case c;
  c.world = 3;
  c.weighted = true;
  c.plan_json = R"({"plan": {
      "t0": {"sharding_type": "row_wise"},
      "t1": {"sharding_type": "data_parallel"},
      "t2": {"sharding_type": "column_wise", "ranks": [2, 0], "sharder_options": {"block_cols": "6"}}}})";
  EXPECT_EQ(Run(c), "generic");
  c.pooling = PoolingType::kMean;
  c.plan_json = R"({"plan": {
      "t0": {"sharding_type": "table_wise", "ranks": [1]},
      "t1": {"sharding_type": "row_wise"},
      "t2": {"sharding_type": "row_wise", "shards": [{"rows": [0, 2], "cols": [0, 7], "rank": 2},
                                                    {"rows": [0, 2], "cols": [7, 5], "rank": 0},
                                                    {"rows": [2, 1], "cols": [0, 12], "rank": 1}]}}})";
  EXPECT_EQ(Run(c), "generic");
}

// Tables kept larger than memory (fused_ssd_caching) under every sharder:
// each piece's rows on its own file, a few of them cached (two ways per
// set, so batches evict; overflow slots for a batch's ids beyond full
// sets), and the numbers are the unsharded module's.
TEST_P(ShardedEbc, CachedTablesEqualUnshardedUnderEverySharder) {
  testing::TempDir dir("sharded-cache");
  for (const char* sharder : {"table_wise", "row_wise", "column_wise", "table_row_wise", "row_cyclic"}) {
    for (int world : {2, 3}) {
      Case c;
      c.sharder = sharder;  // shown: the plan below is what runs
      c.world = world;
      c.weighted = world == 3;
      // (Column blocks keep row-wise Adagrad's accumulator per block, as
      // TorchRec does, so column_wise is compared with Adagrad.)
      const bool column_wise = std::string(sharder) == "column_wise";
      c.optimizer = world == 3 ? "adam,lr=0.01" : column_wise ? "adagrad,lr=0.2" : "rowwise_adagrad,lr=0.2";
      c.cache_dir = dir.path();
      if (std::string(sharder) == "table_row_wise" && world == 2) c.ranks_per_host = 1;
      const std::string opts = column_wise ? R"(, "sharder_options": {"block_cols": "3"})" : "";
      c.plan_json = fmt::format(R"({{"plan": {{
          "t0": {{"sharding_type": "{0}", "compute_kernel": "fused_ssd_caching"{1},
                  "cache_params": {{"algorithm": "lru", "load_factor": 0.2, "ways": 2, "overflow": 40}}}},
          "t1": {{"sharding_type": "{0}"{1}}},
          "t2": {{"sharding_type": "{0}"{1}}}}}}})",
                                sharder, opts);
      Run(c);
      EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << "the row files go with their tables";
    }
  }
}

TEST_P(ShardedEbc, OtherOptimizersEqualUnsharded) {
  for (const char* sharder : {"row_wise", "table_row_wise", "table_wise"}) {
    for (const char* opt : {"sgd,lr=0.5", "rowwise_adagrad,lr=0.2", "adam,lr=0.01"}) {
      Case c;
      c.sharder = sharder;
      c.world = 3;
      c.optimizer = opt;
      Run(c);
    }
  }
  Case c;
  c.sharder = "column_wise";
  c.world = 2;
  c.optimizer = "adam,lr=0.01";
  c.plan_json = R"({"plan": {
      "t0": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "3"}},
      "t1": {"sharding_type": "table_wise"},
      "t2": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "5"}}}})";
  Run(c);
}

TEST_P(ShardedEbc, FastPathsGiveTheGenericNumbers) {
  for (const char* sharder : {"table_wise", "row_wise"}) {
    for (PoolingType pooling : {PoolingType::kSum, PoolingType::kMean}) {
      Case c;
      c.sharder = sharder;
      c.world = 3;
      c.pooling = pooling;
      c.weighted = true;
      EXPECT_EQ(Run(c), sharder);  // the fast path was taken, and matched
      c.fast_paths = false;
      EXPECT_EQ(Run(c), "generic");
    }
  }
}

TEST_P(ShardedEbc, RefusesWhatNoTableServesAndMissingWeights) {
  Case c;
  c.sharder = "row_wise";
  c.weighted = true;
  const auto tables = Tables(c);
  PlanRequest req;
  req.tables = tables;
  req.world_size = 2;
  req.ranks_per_host = 2;
  req.sharder = "row_wise";
  auto plan = MakePlan(registry_, req);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  OnRanks(2, [&](const ProcessGroup& group) {
    auto sebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan.value(), {});
    ASSERT_TRUE(sebc.ok()) << sebc.status().ToString();
    const auto good = LocalBatch(tables, group.rank(), 0, 2);
    // A key no table serves: refused on every rank before any exchange.
    auto extra = KeyedJaggedTensor::Concat({good, KeyedJaggedTensor::FromLengths({"stray"}, {1}, {1, 0}, std::vector<float>{1}).value()});
    ASSERT_TRUE(extra.ok());
    auto out = sebc->Forward(extra.value());
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.status().message().find("feature 'stray' has no table"), std::string::npos) << out.status().ToString();
    auto no_weights = KeyedJaggedTensor::FromLengths(good.keys(), good.values(), good.lengths());
    out = sebc->Forward(no_weights.value());
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.status().message().find("is weighted but the input has no weights"), std::string::npos);
    EXPECT_FALSE(sebc->Backward(Tensor::Zeros(dtype::kFloat32, {2, 38}), 1).ok());  // no Forward yet
    // An id outside its table (fatal bounds check) names feature, sample and table.
    std::vector<int64_t> values = good.values().ToVector();
    values[0] = 1000;
    out = sebc->Forward(KeyedJaggedTensor::FromLengths(good.keys(), values, good.lengths(), *good.weights()).value());
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.status().message().find("is outside table"), std::string::npos) << out.status().ToString();
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, ShardedEbc, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
