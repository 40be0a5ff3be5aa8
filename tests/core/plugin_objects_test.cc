// The C++ wrappers: statuses become Status values with the component named,
// an exception a plugin lets escape is contained, handles are destroyed, and
// options reach the component.
#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "shardrec/core/dl_view.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec {
namespace {

using testing::Fixture;

class PluginObjectsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    DiscoveryOptions d;
    d.plugin_files = {Fixture("good", "bundle", "fixture"),
                      Fixture("score_throws", "eviction", "scorethrows")};
    d.use_environment = false;
    d.use_default_dir = false;
    registry_.Discover(d);
    ASSERT_EQ(registry_.libraries().size(), 2u);
  }
  // Creates eviction policy `name` with no options.
  EvictionPolicy Policy(const std::string& name) {
    auto ref = registry_.Find(SR_KIND_EVICTION, name);
    EXPECT_TRUE(ref.ok()) << ref.status().ToString();
    auto policy = EvictionPolicy::Create(ref.value(), OptionList());
    EXPECT_TRUE(policy.ok()) << policy.status().ToString();
    return std::move(policy).value();
  }

  // Scores scores->shape[0] candidates whose statistics are all zero.
  static Status ScoreZeros(const EvictionPolicy& policy, DLView& scores) {
    const int64_t n = scores->shape[0];
    std::vector<int64_t> zeros(static_cast<size_t>(n));
    DLView stats(zeros.data(), {n});
    sr_eviction_score_args a{};
    a.struct_size = SR_STRUCT_SIZE(sr_eviction_score_args, scores);
    a.num_candidates = static_cast<size_t>(n);
    a.counts = a.last_access = a.window_counts = stats.get();
    a.scores = scores.get();
    return policy.Score(a);
  }

  HostServices services_;
  PluginRegistry registry_{&services_};
};

TEST_F(PluginObjectsTest, ExceptionEscapingAnEntryBecomesInternal) {
  std::vector<double> s(1);
  DLView out(s.data(), {1});
  Status st = ScoreZeros(Policy("raw_policy"), out);
  EXPECT_EQ(st.code(), SR_INTERNAL);
  EXPECT_EQ(st.message(),
            "eviction raw_policy: score: the plugin threw an exception across the C boundary");
}

TEST_F(PluginObjectsTest, PluginErrorKeepsItsCodeAndNamesTheComponent) {
  std::vector<float> wrong(2);
  DLView out(wrong.data(), {2});
  Status st = ScoreZeros(Policy("fixture_recency"), out);
  EXPECT_EQ(st.code(), SR_INVALID_ARGUMENT);
  EXPECT_EQ(st.message(),
            "eviction fixture_recency: score: scores: expected dtype float64, got float32");
}

TEST_F(PluginObjectsTest, OptionsReachTheComponentAndUnknownOnesAreRefused) {
  auto ref = registry_.Find(SR_KIND_SHARDER, "fixture_one_rank");
  ASSERT_TRUE(ref.ok());
  auto bad = Sharder::Create(ref.value(), OptionList({{"rank_from_end", "x"}}));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("option 'rank_from_end' must be an integer, got 'x'"),
            std::string::npos)
      << bad.status().message();
  auto typo = Sharder::Create(ref.value(), OptionList({{"rank_form_end", "2"}}));
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("unknown option 'rank_form_end' (accepted: rank_from_end)"),
            std::string::npos)
      << typo.status().message();

  auto sharder = Sharder::Create(ref.value(), OptionList({{"rank_from_end", "2"}}));
  ASSERT_TRUE(sharder.ok()) << sharder.status().ToString();
  sr_table_desc t{};
  t.struct_size = SR_STRUCT_SIZE(sr_table_desc, state_bytes_per_row);
  t.name = "t";
  t.num_rows = 10;
  t.num_cols = 4;
  sr_topology topo{};
  topo.struct_size = SR_STRUCT_SIZE(sr_topology, memory_bytes_per_rank);
  topo.world_size = 3;
  topo.ranks_per_host = 3;
  sr_shard shard{};
  size_t n = 0;
  int32_t placement = -1;
  sr_shard_table_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_shard_table_args, placement);
  a.table = &t;
  a.topology = &topo;
  a.shards = &shard;
  a.shards_capacity = 1;
  a.num_shards = &n;
  a.placement = &placement;
  ASSERT_TRUE(sharder->ShardTable(a).ok());
  EXPECT_EQ(n, 1u);
  EXPECT_EQ(shard.rank, 1);  // world 3, second from the end
  EXPECT_EQ(placement, SR_PLACEMENT_GRID);
}

TEST_F(PluginObjectsTest, CreatingTheWrongKindIsRefused) {
  auto ref = registry_.Find(SR_KIND_SHARDER, "fixture_one_rank");
  ASSERT_TRUE(ref.ok());
  auto wrong = EvictionPolicy::Create(ref.value(), OptionList());
  ASSERT_FALSE(wrong.ok());
  EXPECT_EQ(wrong.status().message(), "component 'fixture_one_rank' is a sharder, not a eviction");
}

}  // namespace
}  // namespace shardrec

namespace shardrec {
namespace {

TEST_F(PluginObjectsTest, CommunicatorRunsCollectivesThroughRequests) {
  auto ref = registry_.Find(SR_KIND_COMM, "fixture_self");
  ASSERT_TRUE(ref.ok());
  sr_comm_create_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_comm_create_args, options);
  a.rank = 0;
  a.world_size = 2;
  a.rendezvous = "local:test";
  a.prefix = "t";
  auto refused = Communicator::Create(ref.value(), a);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "comm fixture_self: create: fixture_self serves a world of one rank, got rank 0 of 2");
  a.world_size = 1;
  auto comm = Communicator::Create(ref.value(), a);
  ASSERT_TRUE(comm.ok()) << comm.status().ToString();

  std::vector<float> send{1, 2, 3}, recv(3, 0);
  DLView s(send.data(), {3}), r(recv.data(), {3});
  const int64_t counts[1] = {3};
  sr_collective_args c{};
  c.struct_size = SR_STRUCT_SIZE(sr_collective_args, stream);
  c.send = s.get();
  c.recv = r.get();
  c.send_counts = counts;
  c.recv_counts = counts;
  auto req = comm->AllToAllV(c);
  ASSERT_TRUE(req.ok()) << req.status().ToString();
  auto done = req->Test();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(done.value());
  EXPECT_TRUE(req->Wait(100).ok());
  EXPECT_EQ(recv, send);

  auto barrier = comm->Barrier();
  ASSERT_TRUE(barrier.ok());
  EXPECT_TRUE(barrier->Wait().ok());
  auto sub = comm->Split(0, 0);
  ASSERT_TRUE(sub.ok());
  std::vector<float> small(2);
  DLView bad(small.data(), {2});
  c.recv = bad.get();
  auto mismatch = sub->AllReduce(c);
  ASSERT_FALSE(mismatch.ok());
  EXPECT_EQ(mismatch.status().message(),
            "comm fixture_self: all_reduce: send and recv differ in size");
}

}  // namespace
}  // namespace shardrec
