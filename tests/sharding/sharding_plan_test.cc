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
    for (const char* lib : {"libshardrec_sharder_builtin.so", "libshardrec_kernel_cpu.so"}) {
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

}  // namespace
}  // namespace shardrec
