// What the planner reads and how it scores: the topology and constraints
// files (good ones round-trip, bad ones are refused by name), the traffic
// measured from batches, and the cost model against figures worked out by
// hand from its documented formulas (docs/planner.md, "Cost model").
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "shardrec/core/planner/cost_model.h"
#include "shardrec/core/planner/planner_constraints.h"
#include "shardrec/core/planner/planner_topology.h"
#include "shardrec/core/planner/table_workload.h"

namespace shardrec {
namespace {

constexpr const char* kTopology = R"({"format": "shardrec-topology", "version": 1, "ranks_per_host": 4,
  "memory_bytes_per_rank": 1000000,
  "kernels": {"cpu": {"forward": {"seconds_per_lookup": 1e-8, "seconds_per_byte": 2e-10},
                      "backward": {"seconds_per_lookup": 3e-8, "seconds_per_byte": 4e-10}}},
  "intra_host": {"bytes_per_s": 5e9, "latency_s": 2e-5},
  "inter_host": {"bytes_per_s": 1e9, "latency_s": 1e-4},
  "measured": {"by": "hand"}})";

TEST(Topology, ParsesAndRoundTrips) {
  auto t = ParseTopologyJson(kTopology, "topo.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->ranks_per_host, 4);
  EXPECT_EQ(t->memory_bytes_per_rank, 1000000);
  ASSERT_EQ(t->kernels.count("cpu"), 1u);
  EXPECT_DOUBLE_EQ(t->kernels["cpu"].backward.seconds_per_byte, 4e-10);
  EXPECT_DOUBLE_EQ(t->inter_host.latency_s, 1e-4);
  auto again = ParseTopologyJson(TopologyToJson(t.value()), "again");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(TopologyToJson(again.value()), TopologyToJson(t.value()));
  // The built-in figures are themselves a valid file.
  EXPECT_TRUE(ParseTopologyJson(TopologyToJson(DefaultTopology()), "defaults").ok());
}

TEST(Topology, RefusesBadFilesByName) {
  const std::string good = kTopology;
  auto with = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    s.replace(at, from.size(), to);
    return ParseTopologyJson(s, "topo.json");
  };
  struct Case {
    std::string from, to, says;
  };
  const std::vector<Case> cases = {
      {"\"version\": 1", "\"version\": 2", "version 2 is newer"},
      {"\"format\": \"shardrec-topology\"", "\"format\": \"other\"", "\"format\" must be"},
      {"\"ranks_per_host\": 4", "\"ranks_per_host\": 0", "ranks_per_host"},
      {"\"ranks_per_host\": 4", "\"ranks_per_hosts\": 4", "unknown key 'ranks_per_hosts'"},
      {"\"seconds_per_lookup\": 1e-8", "\"seconds_per_lookup\": -1e-8", "seconds_per_lookup\" must be a number >= 0"},
      {"\"seconds_per_lookup\": 1e-8, \"seconds_per_byte\": 2e-10", "\"seconds_per_lookup\": 0, \"seconds_per_byte\": 0",
       "takes no time"},
      {"\"bytes_per_s\": 5e9", "\"bytes_per_s\": 0", "intra_host: \"bytes_per_s\" must be > 0"},
      {"\"latency_s\": 1e-4", "\"latency_s\": \"fast\"", "inter_host: \"latency_s\" must be a number"},
      {"\"memory_bytes_per_rank\": 1000000", "\"memory_bytes_per_rank\": -5", "memory_bytes_per_rank"},
      {"\"inter_host\"", "\"other_host\"", "unknown key 'other_host'"},
  };
  for (const Case& c : cases) {
    auto t = with(c.from, c.to);
    ASSERT_FALSE(t.ok()) << c.to;
    EXPECT_NE(t.status().message().find(c.says), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("topo.json"), std::string::npos) << t.status().message();
  }
  EXPECT_FALSE(ParseTopologyJson("{", "x").ok());
  EXPECT_FALSE(ParseTopologyJson("[]", "x").ok());
  auto no_kernels = ParseTopologyJson(R"({"kernels": {}, "intra_host": {"bytes_per_s": 1, "latency_s": 0},
      "inter_host": {"bytes_per_s": 1, "latency_s": 0}})", "x");
  ASSERT_FALSE(no_kernels.ok());
  EXPECT_NE(no_kernels.status().message().find("at least one kernel"), std::string::npos);
  auto missing = LoadTopologyFile("/nonexistent/topo.json");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("/nonexistent/topo.json"), std::string::npos);
}

TEST(Constraints, ParsesEveryKey) {
  auto c = ParseConstraintsJson(R"({"constraints": {
      "a": {"sharding_types": ["row_wise", "table_wise"], "compute_kernels": ["cpu"], "ranks": [3, 1]},
      "b": {"sharder_options": {"block_cols": "8", "n": 2}}}})", "c.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->size(), 2u);
  EXPECT_EQ(c->at("a").sharding_types, (std::vector<std::string>{"row_wise", "table_wise"}));
  EXPECT_EQ(c->at("a").compute_kernels, (std::vector<std::string>{"cpu"}));
  EXPECT_EQ(c->at("a").ranks, (std::vector<int>{3, 1}));
  ASSERT_EQ(c->at("b").sharder_options.size(), 2u);
  EXPECT_EQ(c->at("b").sharder_options[0], (std::pair<std::string, std::string>{"block_cols", "8"}));
  EXPECT_EQ(c->at("b").sharder_options[1].second, "2");
}

TEST(Constraints, RefusesBadFilesByName) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"plan": {}})", "expected {\"constraints\""},
      {R"({"constraints": {"a": {"ranks": []}}})", "table 'a': \"ranks\" must be a non-empty list"},
      {R"({"constraints": {"a": {"ranks": [1, 1]}}})", "lists rank 1 twice"},
      {R"({"constraints": {"a": {"ranks": [-1]}}})", "table 'a': \"ranks\" entry"},
      {R"({"constraints": {"a": {"ranks": [1.5]}}})", "table 'a': \"ranks\" entry"},
      {R"({"constraints": {"a": {"sharding_types": []}}})", "is empty: leave it out"},
      {R"({"constraints": {"a": {"sharding_types": [""]}}})", "non-empty name"},
      {R"({"constraints": {"a": {"compute_kernels": "cpu"}}})", "must be a list of names"},
      {R"({"constraints": {"a": {"shard_types": ["row_wise"]}}})", "unknown or mistyped key 'shard_types'"},
      {R"({"constraints": {"a": {"sharder_options": "x"}}})", "unknown or mistyped key 'sharder_options'"},
      {R"({"constraints": {"a": 3}})", "table 'a': expected an object"},
      {"not json", "not valid JSON"},
  };
  for (const auto& [text, says] : cases) {
    auto c = ParseConstraintsJson(text, "c.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_NE(c.status().message().find(says), std::string::npos) << text << " -> " << c.status().message();
    EXPECT_EQ(c.status().message().rfind("c.json", 0), 0u) << c.status().message();
  }
}

TEST(Workload, MeasuredFromBatches) {
  EmbeddingTableConfig a, b, unused;
  a.name = "a";
  a.num_embeddings = 64;
  a.embedding_dim = 4;
  a.feature_names = {"f0", "f1"};
  b = a;
  b.name = "b";
  b.num_embeddings = 1000;
  b.feature_names = {"g"};
  unused = a;
  unused.name = "unused";
  unused.feature_names = {"u0", "u1"};
  // Two samples. a: f0 [0, 0], [63]; f1 [], [1]: 4 ids over 2 samples.
  // b: g [999], [] plus an id outside the table (ignored). "x" is no table's.
  auto kjt = KeyedJaggedTensor::FromLengths({"f0", "f1", "g", "x"}, {0, 0, 63, 1, 999, 5000, 7},
                                            {2, 1, 0, 1, 2, 0, 1, 0});
  ASSERT_TRUE(kjt.ok()) << kjt.status().ToString();
  auto w = MeasureWorkload({a, b, unused}, {kjt.value(), kjt.value()}, 3);
  ASSERT_EQ(w.size(), 3u);
  EXPECT_DOUBLE_EQ(w[0].pooling_factor, 2.0);
  ASSERT_EQ(w[0].row_histogram.size(), size_t{kRowHistogramBuckets});
  EXPECT_DOUBLE_EQ(w[0].row_histogram[0], 0.5);   // ids 0, 0
  EXPECT_DOUBLE_EQ(w[0].row_histogram[1], 0.25);  // id 1
  EXPECT_DOUBLE_EQ(w[0].row_histogram[63], 0.25);
  EXPECT_DOUBLE_EQ(w[0].ShareOfRows(0, 32, 64), 0.75);
  EXPECT_DOUBLE_EQ(w[0].Skew(), 0.5 * kRowHistogramBuckets);
  EXPECT_DOUBLE_EQ(w[1].pooling_factor, 0.5);  // the out-of-range id is not counted
  EXPECT_DOUBLE_EQ(w[1].row_histogram[63], 1.0);
  // Not in any batch: the fallback per feature, uniform rows.
  EXPECT_DOUBLE_EQ(w[2].pooling_factor, 6.0);
  EXPECT_TRUE(w[2].row_histogram.empty());
  EXPECT_DOUBLE_EQ(w[2].ShareOfRows(10, 16, 64), 0.25);
  EXPECT_DOUBLE_EQ(w[2].Skew(), 1.0);
}

TEST(Workload, HugeTablesDoNotOverflowTheHistogram) {
  EmbeddingTableConfig t;
  t.name = "huge";
  t.num_embeddings = int64_t{1} << 62;
  t.embedding_dim = 4;
  t.feature_names = {"f"};
  auto kjt = KeyedJaggedTensor::FromLengths({"f"}, {(int64_t{1} << 62) - 1, 0}, {2});
  ASSERT_TRUE(kjt.ok());
  auto w = MeasureWorkload({t}, {kjt.value()});
  EXPECT_DOUBLE_EQ(w[0].row_histogram[63], 0.5);
  EXPECT_DOUBLE_EQ(w[0].row_histogram[0], 0.5);
}

// The documented formulas, worked by hand: 2 ranks on one host, batch 10 per
// rank, a 4-column fp32 table with 3 ids per sample.
class Model : public ::testing::Test {
 protected:
  void SetUp() override {
    topo_.kernels["k"] = KernelCost{{1e-8, 0}, {2e-8, 0}};
    topo_.intra_host = {1e9, 1e-4};
    topo_.inter_host = {1e8, 1e-3};
  }
  static sr_shard Shard(int64_t rows, int64_t row_offset, int64_t cols, int rank) {
    sr_shard s{};
    s.num_rows = rows;
    s.row_offset = row_offset;
    s.num_cols = cols;
    s.rank = rank;
    return s;
  }
  PlannerTopology topo_;
};

TEST_F(Model, TableWiseByHand) {
  CostModel m(topo_, 2, 2, 10);
  const TableEffect e = m.Effect(topo_.kernels["k"], 4, 4, 3, {Shard(100, 0, 4, 0)}, {1.0}, {1600}, false);
  std::vector<RankLoad> loads(2);
  m.Apply(e, loads);
  // Lookups: 10 samples x 2 ranks x 3 ids = 60; forward 1e-8 + backward 2e-8 each.
  EXPECT_NEAR(loads[0].compute_s, 60 * 3e-8, 1e-15);
  EXPECT_EQ(loads[0].bytes, 1600);
  // Rank 0 sends rank 1's pooled rows (10 x 4 floats = 160 B) and receives
  // its ids (10 x 3 x 8), lengths (10 x 4) and gradients (160): 440 B.
  EXPECT_DOUBLE_EQ(loads[0].send_intra, 160);
  EXPECT_DOUBLE_EQ(loads[0].recv_intra, 440);
  EXPECT_DOUBLE_EQ(loads[1].send_intra, 440);
  EXPECT_DOUBLE_EQ(loads[1].recv_intra, 160);
  EXPECT_EQ(loads[1].compute_s, 0);
  EXPECT_NEAR(m.RankSeconds(loads[0]), 1.8e-6 + 440 / 1e9, 1e-15);
  EXPECT_NEAR(m.RankSeconds(loads[1]), 440 / 1e9, 1e-15);
  EXPECT_DOUBLE_EQ(m.LatencySeconds(true, false), 4e-4);
  EXPECT_DOUBLE_EQ(m.LatencySeconds(true, true), 7e-4);
  // Removing it leaves nothing behind.
  m.Apply(e, loads, -1);
  for (const RankLoad& l : loads) {
    EXPECT_NEAR(l.compute_s, 0, 1e-18);
    EXPECT_NEAR(l.send_intra + l.recv_intra, 0, 1e-9);
    EXPECT_EQ(l.bytes, 0);
  }
}

TEST_F(Model, RowSharesAndReplicasByHand) {
  CostModel m(topo_, 2, 2, 10);
  // Two row blocks, 3/4 of the lookups on rank 0's.
  const TableEffect rw = m.Effect(topo_.kernels["k"], 4, 4, 3, {Shard(50, 0, 4, 0), Shard(50, 50, 4, 1)},
                                  {0.75, 0.25}, {800, 800}, false);
  std::vector<RankLoad> loads(2);
  m.Apply(rw, loads);
  EXPECT_NEAR(loads[0].compute_s, 45 * 3e-8, 1e-15);
  EXPECT_NEAR(loads[1].compute_s, 15 * 3e-8, 1e-15);
  // Rank 0 receives rank 1's ids for its rows (10 x 3 x 0.75 x 8 = 180),
  // lengths (40) and gradients (160), and rank 1's shard's pooled rows (160).
  EXPECT_DOUBLE_EQ(loads[0].recv_intra, 180 + 40 + 160 + 160);
  EXPECT_DOUBLE_EQ(loads[1].recv_intra, 60 + 40 + 160 + 160);
  // A replica: forward on its own 30 ids, backward on all 60, and an
  // exchange of gradients, ids and lengths (160 + 240 + 40) each way.
  const TableEffect dp = m.Effect(topo_.kernels["k"], 4, 4, 3, {Shard(100, 0, 4, 0), Shard(100, 0, 4, 1)}, {1, 1},
                                  {1600, 1600}, true);
  std::vector<RankLoad> rep(2);
  m.Apply(dp, rep);
  for (const RankLoad& l : rep) {
    EXPECT_NEAR(l.compute_s, 30 * 1e-8 + 60 * 2e-8, 1e-15);
    EXPECT_DOUBLE_EQ(l.send_intra, 440);
    EXPECT_DOUBLE_EQ(l.recv_intra, 440);
    EXPECT_EQ(l.bytes, 1600);
  }
}

TEST_F(Model, InputDistWorkPerIdByHand) {
  // 1 ns per id sent and received, half on each side.
  topo_.input_dist_seconds_per_id = 1e-9;
  CostModel m(topo_, 2, 2, 10);
  // Table-wise on rank 0: every rank routes its 30 ids (15 ns), rank 0
  // unpacks all 60 (30 ns) beside its 60 lookups.
  const TableEffect tw = m.Effect(topo_.kernels["k"], 4, 4, 3, {Shard(100, 0, 4, 0)}, {1.0}, {1600}, false);
  std::vector<RankLoad> loads(2);
  m.Apply(tw, loads);
  EXPECT_NEAR(loads[0].compute_s, 60 * 3e-8 + 15e-9 + 30e-9, 1e-15);
  EXPECT_NEAR(loads[1].compute_s, 15e-9, 1e-15);
  m.Apply(tw, loads, -1);
  EXPECT_NEAR(loads[0].compute_s, 0, 1e-18);
  EXPECT_NEAR(loads[1].compute_s, 0, 1e-18);
  // A replica sends its 30 ids to both ranks and unpacks all 60: 60 ns.
  const TableEffect dp = m.Effect(topo_.kernels["k"], 4, 4, 3, {Shard(100, 0, 4, 0), Shard(100, 0, 4, 1)}, {1, 1},
                                  {1600, 1600}, true);
  std::vector<RankLoad> rep(2);
  m.Apply(dp, rep);
  for (const RankLoad& l : rep) EXPECT_NEAR(l.compute_s, 30 * 1e-8 + 60 * 2e-8 + 60e-9, 1e-15);
  // The file carries it; bad figures are refused by name.
  const std::string base = R"({"kernels": {"cpu": {"forward": {"seconds_per_lookup": 1e-8, "seconds_per_byte": 0},
      "backward": {"seconds_per_lookup": 1e-8, "seconds_per_byte": 0}}},
      "intra_host": {"bytes_per_s": 1, "latency_s": 0}, "inter_host": {"bytes_per_s": 1, "latency_s": 0})";
  auto t = ParseTopologyJson(base + R"(, "input_dist": {"seconds_per_id": 2e-8}})", "t");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_DOUBLE_EQ(t->input_dist_seconds_per_id, 2e-8);
  auto again = ParseTopologyJson(TopologyToJson(t.value()), "again");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_DOUBLE_EQ(again->input_dist_seconds_per_id, 2e-8);
  EXPECT_EQ(ParseTopologyJson(base + "}", "t")->input_dist_seconds_per_id, 0);
  auto negative = ParseTopologyJson(base + R"(, "input_dist": {"seconds_per_id": -1}})", "t");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("input_dist"), std::string::npos) << negative.status().ToString();
  auto unknown = ParseTopologyJson(base + R"(, "input_dist": {"seconds_per_ids": 1e-8}})", "t");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("seconds_per_ids"), std::string::npos) << unknown.status().ToString();
}

TEST_F(Model, CachedSpeedsAndPerTableWorkByHand) {
  // Shards of at most 1000 bytes look up at the cached speeds (forward 1 ns,
  // backward 2 ns a lookup); every shard costs 5 us of host work a step.
  KernelCost& k = topo_.kernels["k"];
  k.cached_max_shard_bytes = 1000;
  k.cached_forward = {1e-9, 0};
  k.cached_backward = {2e-9, 0};
  topo_.seconds_per_table = 5e-6;
  CostModel m(topo_, 2, 2, 10);
  // 100 rows x 4 fp32 columns = 1600 bytes: in memory, 60 lookups at 3e-8.
  const TableEffect big = m.Effect(k, 4, 4, 3, {Shard(100, 0, 4, 0)}, {1.0}, {1600}, false);
  std::vector<RankLoad> loads(2);
  m.Apply(big, loads);
  EXPECT_NEAR(loads[0].compute_s, 60 * 3e-8 + 5e-6, 1e-15);
  EXPECT_NEAR(loads[1].compute_s, 0, 1e-18);
  // Row-wise in two shards of 50 rows (800 bytes each): both cached, 30
  // lookups each at 3e-9, and each shard pays the per-table work.
  const TableEffect rw =
      m.Effect(k, 4, 4, 3, {Shard(50, 0, 4, 0), Shard(50, 50, 4, 1)}, {0.5, 0.5}, {800, 800}, false);
  std::vector<RankLoad> split(2);
  m.Apply(rw, split);
  for (const RankLoad& l : split) EXPECT_NEAR(l.compute_s, 30 * 3e-9 + 5e-6, 1e-15);
  // A replica of the 1600-byte table: in memory; forward on the rank's 30
  // ids, backward on all 60, and its per-table work on every rank.
  const TableEffect dp =
      m.Effect(k, 4, 4, 3, {Shard(100, 0, 4, 0), Shard(100, 0, 4, 1)}, {1, 1}, {1600, 1600}, true);
  std::vector<RankLoad> rep(2);
  m.Apply(dp, rep);
  for (const RankLoad& l : rep) EXPECT_NEAR(l.compute_s, 30 * 1e-8 + 60 * 2e-8 + 5e-6, 1e-15);

  // The file carries both, they survive a round trip, and older files
  // without them still load (0: not counted).
  const std::string base = R"({"kernels": {"cpu": {"forward": {"seconds_per_lookup": 1e-8, "seconds_per_byte": 0},
      "backward": {"seconds_per_lookup": 1e-8, "seconds_per_byte": 0})";
  const std::string links = R"(}}, "intra_host": {"bytes_per_s": 1, "latency_s": 0},
      "inter_host": {"bytes_per_s": 1, "latency_s": 0})";
  const std::string cached = R"(, "cached": {"max_shard_bytes": 4096,
      "forward": {"seconds_per_lookup": 1e-9, "seconds_per_byte": 0},
      "backward": {"seconds_per_lookup": 3e-9, "seconds_per_byte": 1e-12}})";
  auto t = ParseTopologyJson(base + cached + links + R"(, "per_table": {"seconds": 3e-5}})", "t");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  auto again = ParseTopologyJson(TopologyToJson(t.value()), "again");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  for (const PlannerTopology* x : {&t.value(), &again.value()}) {
    const KernelCost& c = x->kernels.at("cpu");
    EXPECT_EQ(c.cached_max_shard_bytes, 4096);
    EXPECT_DOUBLE_EQ(c.cached_backward.seconds_per_lookup, 3e-9);
    EXPECT_DOUBLE_EQ(c.cached_backward.seconds_per_byte, 1e-12);
    EXPECT_DOUBLE_EQ(x->seconds_per_table, 3e-5);
    EXPECT_TRUE(c.Cached(4096));
    EXPECT_FALSE(c.Cached(4097));
  }
  auto older = ParseTopologyJson(base + links + "}", "t");
  ASSERT_TRUE(older.ok()) << older.status().ToString();
  EXPECT_EQ(older->kernels.at("cpu").cached_max_shard_bytes, 0);
  EXPECT_FALSE(older->kernels.at("cpu").Cached(1));
  EXPECT_EQ(older->seconds_per_table, 0);
  // Bad figures are refused by name.
  auto expect_refused = [&](const std::string& text, const std::string& needle) {
    auto bad = ParseTopologyJson(text, "t");
    ASSERT_FALSE(bad.ok()) << text;
    EXPECT_NE(bad.status().message().find(needle), std::string::npos) << bad.status().ToString();
  };
  expect_refused(base + links + R"(, "per_table": {"seconds": -1}})", "per_table");
  expect_refused(base + links + R"(, "per_table": {"second": 1e-5}})", "second");
  expect_refused(base + R"(, "cached": {"max_shard_bytes": 1})" + links + "}", "needs \"max_shard_bytes\"");
  expect_refused(base + R"(, "cached": {"max_shard_bytes": -5, "forward": {"seconds_per_lookup": 1e-9,
      "seconds_per_byte": 0}, "backward": {"seconds_per_lookup": 1e-9, "seconds_per_byte": 0}})" + links + "}",
                 "max_shard_bytes");
  expect_refused(base + R"(, "cached": {"max_shard_bytes": 8, "forward": {"seconds_per_lookup": 0,
      "seconds_per_byte": 0}, "backward": {"seconds_per_lookup": 1e-9, "seconds_per_byte": 0}})" + links + "}",
                 "cached forward");
}

TEST_F(Model, HostsSplitIntraAndInter) {
  // 4 ranks, 2 per host: a table on rank 0 talks to rank 1 inside its host
  // and to ranks 2 and 3 across.
  CostModel m(topo_, 4, 2, 10);
  EXPECT_EQ(m.hosts(), 2);
  const TableEffect e = m.Effect(topo_.kernels["k"], 4, 4, 3, {Shard(100, 0, 4, 0)}, {1.0}, {1600}, false);
  std::vector<RankLoad> loads(4);
  m.Apply(e, loads);
  EXPECT_DOUBLE_EQ(loads[0].recv_intra, 440);
  EXPECT_DOUBLE_EQ(loads[0].recv_inter, 2 * 440);
  EXPECT_DOUBLE_EQ(loads[1].send_intra, 440);
  EXPECT_DOUBLE_EQ(loads[1].send_inter, 0);
  EXPECT_DOUBLE_EQ(loads[2].send_inter, 440);
  EXPECT_DOUBLE_EQ(loads[2].recv_inter, 160);
  EXPECT_NEAR(m.RankSeconds(loads[0]), 120 * 3e-8 + 440 / 1e9 + 880 / 1e8, 1e-12);
  EXPECT_DOUBLE_EQ(m.LatencySeconds(true, false), 4e-3);  // across hosts: the inter-host latency
  EXPECT_EQ(CostModel(topo_, 1, 1, 10).LatencySeconds(true, true), 0);
}

TEST_F(Model, RanksThatShareCoresAreBoundByTheHost) {
  // 4 ranks on one host of 2 cores take turns on them: the cores are shared
  // evenly among the ranks still working, at most a core each, and the
  // step ends with the last.
  topo_.cores_per_host = 2;
  CostModel m(topo_, 4, 4, 10);
  EXPECT_TRUE(m.SharesCores());
  std::vector<RankLoad> lopsided(4), even(4), one_heavy(4);
  lopsided[0].compute_s = 3;
  lopsided[1].compute_s = 1;
  for (RankLoad& l : even) l.compute_s = 1;
  for (RankLoad& l : one_heavy) l.compute_s = 1;
  one_heavy[2].compute_s = 2;
  EXPECT_DOUBLE_EQ(m.StepSeconds(lopsided, 0.5), 3.5);  // two ranks, a core each: the slowest
  EXPECT_DOUBLE_EQ(m.StepSeconds(even, 0.5), 2.5);      // 4 s of work on 2 cores
  // 5 s of work on 2 cores, but not 2.5 s: all four at half a core finish
  // the light ranks' 1 s at 2 s, then the heavy rank's last 1 s runs alone.
  EXPECT_DOUBLE_EQ(m.StepSeconds(one_heavy, 0.5), 3.5);
  // Two hosts of two ranks on one core each: each host on its own.
  topo_.cores_per_host = 1;
  std::vector<RankLoad> two_hosts(4);
  two_hosts[0].compute_s = 1;
  two_hosts[1].compute_s = 3;
  two_hosts[2].compute_s = 2;
  two_hosts[3].compute_s = 2;
  EXPECT_DOUBLE_EQ(CostModel(topo_, 4, 2, 10).StepSeconds(two_hosts, 0), 4);  // 1 + 3 and 2 + 2 on a core
  topo_.cores_per_host = 4;
  EXPECT_FALSE(CostModel(topo_, 4, 4, 10).SharesCores());
  EXPECT_DOUBLE_EQ(CostModel(topo_, 4, 4, 10).StepSeconds(even, 0.5), 1.5);
  // The file carries it.
  auto t = ParseTopologyJson(R"({"cores_per_host": 2, "kernels": {"cpu": {"forward": {"seconds_per_lookup": 1e-8,
      "seconds_per_byte": 0}, "backward": {"seconds_per_lookup": 1e-8, "seconds_per_byte": 0}}},
      "intra_host": {"bytes_per_s": 1, "latency_s": 0}, "inter_host": {"bytes_per_s": 1, "latency_s": 0}})", "t");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(t->cores_per_host, 2);
  EXPECT_NE(TopologyToJson(t.value()).find("\"cores_per_host\": 2"), std::string::npos);
  EXPECT_FALSE(ParseTopologyJson(R"({"cores_per_host": 0})", "t").ok());
}

}  // namespace
}  // namespace shardrec
