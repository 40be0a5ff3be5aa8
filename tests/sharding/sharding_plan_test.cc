// Sharding plans: the balanced table-wise default, one sharder for every
// table, a mixed plan file in the seeds' vocabulary (ranks per type,
// sharder options, explicit shards), the printed and JSON forms, and every
// bad plan refused before any work with the table named.
#include <gtest/gtest.h>

#include <filesystem>

#include "shardrec/core/host_services.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/sharding/sharding_plan.h"

namespace shardrec {
namespace {

EmbeddingTableConfig Table(std::string name, int64_t rows, int64_t dim) {
  EmbeddingTableConfig t;
  t.feature_names = {"f_" + name};
  t.name = std::move(name);
  t.num_embeddings = rows;
  t.embedding_dim = dim;
  return t;
}

class Plans : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* lib : {"libshardrec_sharder_builtin.so", "libshardrec_kernel_cpu.so", "libshardrec_eviction_builtin.so"}) {
      const auto path = std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / lib;
      ASSERT_TRUE(registry_.LoadLibrary(path).ok()) << path;
    }
  }
  PlanRequest Request(int world, int per_host = 0) const {
    PlanRequest r;
    r.tables = {Table("big", 1000, 16), Table("mid", 600, 16), Table("small", 100, 8), Table("wide", 50, 12)};
    r.world_size = world;
    r.ranks_per_host = per_host ? per_host : world;
    return r;
  }
  StatusOr<ShardingPlan> WithPlan(PlanRequest r, const std::string& json) const {
    auto spec = ParsePlanJson(json, "test plan");
    if (!spec.ok()) return spec.status();
    r.spec = spec.value();
    return MakePlan(registry_, r);
  }
  HostServices services_;
  PluginRegistry registry_{&services_};
};

TEST_F(Plans, DefaultIsTableWiseBalancedLargestFirst) {
  auto plan = MakePlan(registry_, Request(2));
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  // big (64000 B) -> 0; mid (38400) -> 1; small (3200) -> 1; wide (2400) -> 1.
  std::vector<int> ranks;
  for (const auto& t : plan->tables) {
    EXPECT_EQ(t.sharding.sharding_type, "table_wise");
    EXPECT_EQ(t.sharding.compute_kernel, "cpu");
    ASSERT_EQ(t.placement.shards.size(), 1u);
    ranks.push_back(t.placement.shards[0].rank);
  }
  EXPECT_EQ(ranks, (std::vector<int>{0, 1, 1, 1}));
  EXPECT_EQ(plan->bytes_per_rank, (std::vector<int64_t>{64000, 38400 + 3200 + 2400}));
}

TEST_F(Plans, OneSharderForEveryTable) {
  PlanRequest r = Request(3);
  r.sharder = "row_wise";
  auto plan = MakePlan(registry_, r);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  for (const auto& t : plan->tables) {
    ASSERT_EQ(t.placement.shards.size(), 3u) << t.config.name;
    EXPECT_EQ(t.placement.shards[0].num_rows, (t.config.num_embeddings + 2) / 3);
  }
}

TEST_F(Plans, MixedPlanFileInTheSeedsVocabulary) {
  auto plan = WithPlan(Request(4, 2), R"({"plan": {
      "big":   {"sharding_type": "table_row_wise", "ranks": [2]},
      "mid":   {"sharding_type": "column_wise", "ranks": [3, 0], "sharder_options": {"block_cols": "8"}},
      "small": {"sharding_type": "data_parallel"},
      "wide":  {"sharding_type": "row_wise", "compute_kernel": "cpu",
                "shards": [{"rows": [0, 20], "cols": [0, 12], "rank": 1}, {"rows": [20, 30], "cols": [0, 12], "rank": 0}]}}})");
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const auto& big = plan->tables[0].placement.shards;
  ASSERT_EQ(big.size(), 2u);
  EXPECT_EQ(big[0].rank, 2);
  EXPECT_EQ(big[1].rank, 3);
  const auto& mid = plan->tables[1].placement.shards;
  ASSERT_EQ(mid.size(), 2u);
  EXPECT_EQ(mid[0].rank, 3);
  EXPECT_EQ(mid[0].num_cols, 8);
  EXPECT_EQ(mid[1].rank, 0);
  EXPECT_TRUE(plan->tables[2].placement.replicated);
  EXPECT_EQ(plan->tables[3].placement.shards[0].rank, 1);

  const std::string text = FormatPlan(plan.value());
  EXPECT_NE(text.find("big"), std::string::npos);
  EXPECT_NE(text.find("500x16 @2, 500x16 @3"), std::string::npos) << text;
  EXPECT_NE(text.find("bytes per rank"), std::string::npos);

  // The JSON form replays to the same grids.
  auto again = WithPlan(Request(4, 2), PlanToJson(plan.value()));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (size_t i = 0; i < plan->tables.size(); ++i) {
    ASSERT_EQ(again->tables[i].placement.shards.size(), plan->tables[i].placement.shards.size());
    for (size_t j = 0; j < plan->tables[i].placement.shards.size(); ++j) {
      EXPECT_EQ(again->tables[i].placement.shards[j].rank, plan->tables[i].placement.shards[j].rank);
      EXPECT_EQ(again->tables[i].placement.shards[j].num_rows, plan->tables[i].placement.shards[j].num_rows);
    }
  }
  EXPECT_EQ(again->bytes_per_rank, plan->bytes_per_rank);
}

TEST_F(Plans, BadPlansAreRefusedNamingTheTable) {
  const std::string tw_rest = R"(, "mid": {"sharding_type": "table_wise"}, "small": {"sharding_type": "table_wise"},
                                   "wide": {"sharding_type": "table_wise"}}})";
  auto expect = [&](const StatusOr<ShardingPlan>& p, const std::string& needle) {
    ASSERT_FALSE(p.ok()) << needle;
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
  };
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "table_wise", "ranks": [5]})" + tw_rest),
         "table 'big': rank 5 is outside the world of 2 ranks");
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "row_wise",
           "shards": [{"rows": [0, 400], "cols": [0, 16], "rank": 0}, {"rows": [500, 500], "cols": [0, 16], "rank": 1}]})" +
                                  tw_rest),
         "table 'big': rows [400, 500) x cols [0, 16) are owned by 0 shards");
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "diagonal_wise"})" + tw_rest), "table 'big'");
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "diagonal_wise"})" + tw_rest), "diagonal_wise");
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "table_wise", "compute_kernel": "tpu"})" + tw_rest),
         "tpu");
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "table_wise"}}})"), "table 'mid' has no entry");
  expect(WithPlan(Request(2), R"({"plan": {"bigg": {"sharding_type": "table_wise"})" + tw_rest),
         "table 'bigg' is not one of the tables");
  expect(WithPlan(Request(4, 2), R"({"plan": {"big": {"sharding_type": "table_row_wise", "ranks": [1]})" + tw_rest),
         "table 'big': table_row_wise's rank 1 is not the first rank of a host");
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "column_wise", "ranks": [0, 1, 0],
           "sharder_options": {"block_cols": "8"}})" + tw_rest),
         "3 ranks for 2 column blocks");
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "table_wise", "rank": 1})" + tw_rest),
         "unknown or mistyped key 'rank'");

  PlanRequest tight = Request(2);
  tight.memory_bytes_per_rank = {50000, 50000};
  expect(MakePlan(registry_, tight), "table 'big' does not fit: rank 0 would hold 64000 bytes, its budget is 50000");
}

// fused_ssd_caching (docs/cache.md) in plan files, in the bytes a rank
// holds, in the plan written back out; and a memory budget that caches
// the tables that do not fit, largest first.
TEST_F(Plans, CachedTablesInPlansAndTheMemoryBudget) {
  const std::string rest = R"(, "mid": {"sharding_type": "table_wise", "ranks": [1]},
                               "small": {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [1]},
                               "wide": {"sharding_type": "table_wise", "ranks": [1]}}})";
  auto whole = WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "table_wise", "ranks": [0]})" + rest);
  ASSERT_TRUE(whole.ok()) << whole.status().ToString();
  EXPECT_EQ(whole->tables[2].sharding.compute_kernel, "cpu") << "fused is the run's kernel";
  auto cached = WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "table_wise", "ranks": [0],
      "compute_kernel": "fused_ssd_caching", "cache_params": {"algorithm": "lfu", "load_factor": 0.1, "ways": 8}})" + rest);
  ASSERT_TRUE(cached.ok()) << cached.status().ToString();
  // 100 rows of 64 bytes, one set of 8 ways and 16 overflow slots, each
  // slot with the directory's bookkeeping, and the row file's log's map of
  // all 1000 rows; instead of 1000 rows.
  EXPECT_EQ(whole->bytes_per_rank[0], 64000);
  EXPECT_EQ(cached->bytes_per_rank[0], (100 + 8 + 16) * (64 + kCacheDirectoryBytesPerSlot) + 1000 * kRowLogBytesPerRow);
  EXPECT_EQ(cached->bytes_per_rank[1], whole->bytes_per_rank[1]);
  EXPECT_NE(FormatPlan(*cached).find("cached big: algorithm=lfu,load_factor=0.1,ways=8"), std::string::npos)
      << FormatPlan(*cached);
  auto again = WithPlan(Request(2), PlanToJson(*cached));
  ASSERT_TRUE(again.ok()) << again.status().ToString() << "\n" << PlanToJson(*cached);
  EXPECT_EQ(again->tables[0].sharding.compute_kernel, "fused_ssd_caching");
  EXPECT_EQ(CacheParamsToString(*again->tables[0].sharding.cache_params), "algorithm=lfu,load_factor=0.1,ways=8");
  EXPECT_EQ(again->bytes_per_rank, cached->bytes_per_rank);
  // A row file with its rows in place keeps no map of them; the layout
  // goes out with the plan and comes back.
  auto in_place = WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "table_wise", "ranks": [0],
      "compute_kernel": "fused_ssd_caching", "cache_params": {"algorithm": "lfu", "load_factor": 0.1, "ways": 8,
      "layout": "in_place"}})" + rest);
  ASSERT_TRUE(in_place.ok()) << in_place.status().ToString();
  EXPECT_EQ(in_place->bytes_per_rank[0], cached->bytes_per_rank[0] - 1000 * kRowLogBytesPerRow);
  auto in_place_again = WithPlan(Request(2), PlanToJson(*in_place));
  ASSERT_TRUE(in_place_again.ok()) << in_place_again.status().ToString();
  EXPECT_EQ(CacheParamsToString(*in_place_again->tables[0].sharding.cache_params),
            "algorithm=lfu,load_factor=0.1,ways=8,layout=in_place");

  auto expect = [&](const StatusOr<ShardingPlan>& p, const std::string& needle) {
    ASSERT_FALSE(p.ok()) << needle;
    EXPECT_NE(p.status().message().find(needle), std::string::npos) << p.status().message();
  };
  const std::string big = R"({"plan": {"big": {"sharding_type": "table_wise", "ranks": [0], )";
  expect(WithPlan(Request(2), big + R"("cache_params": {"load_factor": 0.1}})" + rest),
         "cache_params are for compute_kernel \"fused_ssd_caching\"");
  expect(WithPlan(Request(2), big + R"("compute_kernel": "fused_ssd_caching", "cache_params": {"load_factor": 2}})" + rest),
         "load_factor '2': expected a number in (0, 1]");
  expect(WithPlan(Request(2), big + R"("compute_kernel": "fused_ssd_caching", "cache_params": {"lf": 0.1}})" + rest),
         "unknown cache parameter 'lf'");
  expect(WithPlan(Request(2), big + R"("compute_kernel": "fused_ssd_caching", "cache_params": {"layout": "tree", "load_factor": 0.1}})" + rest),
         "layout 'tree': expected in_place or log");
  expect(WithPlan(Request(2), big + R"("compute_kernel": "fused_ssd_caching", "cache_params": {"algorithm": "mru", "load_factor": 0.1}})" + rest),
         "mru");
  expect(WithPlan(Request(2), big + R"("compute_kernel": "fused_ssd_caching", "cache_params": {"precision": "fp16", "load_factor": 0.1}})" + rest),
         "precision fp16 differs from the table's fp32");
  expect(WithPlan(Request(2), big + R"("compute_kernel": "fused_ssd_caching"})" + rest),
         "table 'big': fused_ssd_caching without a load_factor needs a memory budget");
  expect(WithPlan(Request(2), R"({"plan": {"big": {"sharding_type": "data_parallel", "compute_kernel": "fused_ssd_caching",
      "cache_params": {"load_factor": 0.5}})" + rest),
         "a cached table (fused_ssd_caching) must be sharded");

  // A budget of 40000 bytes a rank: big (64000) alone on rank 0 must be
  // cached; rank 1 holds mid (38400), small and wide (44000), so mid is
  // cached too, the largest there; small and wide stay in memory. One
  // load factor, the largest that fits both.
  PlanRequest budget = Request(2);
  budget.memory_budget_per_rank = 40000;
  budget.cache_defaults.algorithm = "lfu";
  auto fitted = MakePlan(registry_, budget);
  ASSERT_TRUE(fitted.ok()) << fitted.status().ToString();
  std::vector<std::string> kernels;
  for (const auto& t : fitted->tables) kernels.push_back(t.config.name + ":" + t.sharding.compute_kernel);
  EXPECT_EQ(kernels, (std::vector<std::string>{"big:fused_ssd_caching", "mid:fused_ssd_caching", "small:cpu", "wide:cpu"}));
  const double lf = fitted->tables[0].sharding.cache_params->load_factor;
  EXPECT_GT(lf, 0.05);
  EXPECT_LT(lf, 0.2);
  EXPECT_EQ(fitted->tables[1].sharding.cache_params->load_factor, lf);
  EXPECT_EQ(fitted->tables[0].sharding.cache_params->algorithm, "lfu");
  for (int64_t b : fitted->bytes_per_rank) EXPECT_LE(b, 40000);
  // Written out, the plan repeats without the budget.
  auto repeated = WithPlan(Request(2), PlanToJson(*fitted));
  ASSERT_TRUE(repeated.ok()) << repeated.status().ToString();
  EXPECT_EQ(repeated->bytes_per_rank, fitted->bytes_per_rank);
  // Room for everything: nothing is cached.
  budget.memory_budget_per_rank = 1 << 20;
  auto roomy = MakePlan(registry_, budget);
  ASSERT_TRUE(roomy.ok());
  for (const auto& t : roomy->tables) EXPECT_EQ(t.sharding.compute_kernel, "cpu") << t.config.name;
  // Too small even for the caches' fixed slots.
  budget.memory_budget_per_rank = 5000;
  expect(MakePlan(registry_, budget), "do not fit a memory budget of");
  // Each table's overflow sized to its own step's ids (train's bound per
  // table), not one figure for all: big's 20, clamped up to twice its 32
  // ways, mid's 100; the bytes count them.
  budget.memory_budget_per_rank = 40000;
  budget.cache_overflow = {{"big", 20}, {"mid", 100}, {"small", 9000}};
  auto sized = MakePlan(registry_, budget);
  ASSERT_TRUE(sized.ok()) << sized.status().ToString();
  ASSERT_EQ(sized->tables[0].sharding.compute_kernel, "fused_ssd_caching");
  ASSERT_EQ(sized->tables[1].sharding.compute_kernel, "fused_ssd_caching");
  EXPECT_EQ(sized->tables[0].sharding.cache_params->overflow, 64) << "2 x 32 ways at least";
  EXPECT_EQ(sized->tables[1].sharding.cache_params->overflow, 100);
  for (int64_t b : sized->bytes_per_rank) EXPECT_LE(b, 40000);
  // A plan entry's own overflow is kept; one left 0 gets its table's.
  // (Rows in place: no log's map of rows, which this small budget lacks room for.)
  auto entries = WithPlan(budget, R"({"plan": {
      "big": {"sharding_type": "table_wise", "compute_kernel": "fused_ssd_caching", "ranks": [0],
              "cache_params": {"load_factor": 0.1, "overflow": 50, "layout": "in_place"}},
      "mid": {"sharding_type": "table_wise", "compute_kernel": "fused_ssd_caching", "ranks": [1],
              "cache_params": {"load_factor": 0.1, "layout": "in_place"}},
      "small": {"sharding_type": "table_wise", "ranks": [1]}, "wide": {"sharding_type": "table_wise", "ranks": [0]}}})");
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  EXPECT_EQ(entries->tables[0].sharding.cache_params->overflow, 50);
  EXPECT_EQ(entries->tables[1].sharding.cache_params->overflow, 100);
  // Written out, a given overflow stays; one sized from the step does
  // not, so a run with a larger step sizes its own.
  const std::string written = PlanToJson(*entries);
  EXPECT_NE(written.find("\"overflow\": 50"), std::string::npos) << written;
  EXPECT_EQ(written.find("\"overflow\": 100"), std::string::npos) << written;
  PlanRequest bigger_step = Request(2);
  bigger_step.cache_overflow = {{"mid", 400}};
  auto replayed = WithPlan(bigger_step, written);
  ASSERT_TRUE(replayed.ok()) << replayed.status().ToString();
  EXPECT_EQ(replayed->tables[1].sharding.cache_params->overflow, 400);
  bigger_step.cache_overflow = {{"mid", 100000}};
  replayed = WithPlan(bigger_step, written);
  ASSERT_TRUE(replayed.ok()) << replayed.status().ToString();
  EXPECT_EQ(replayed->tables[1].sharding.cache_params->overflow, 600) << "no more than the table's rows";
  budget.memory_budget_per_rank = 5000;
  expect(MakePlan(registry_, budget), "overflow slots big 64, mid 100");
}

}  // namespace
}  // namespace shardrec
