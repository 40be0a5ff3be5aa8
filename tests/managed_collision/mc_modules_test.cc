// The managed-collision embedding modules. Unsharded: an eviction resets
// exactly the evicted rows (weights as at creation, optimizer state zero)
// and leaves the others. Sharded against unsharded, over the comm backend
// of the test parameter: each rank manages its slice of every managed
// table's buckets, yet outputs at every step, every row and optimizer
// state at the end and the summed counters equal the unsharded module's
// on the concatenated batch, for each built-in sharder and world sizes 1-3,
// with tables fused into the embedding's input dist where the plan allows
// and with every table separate.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <mutex>
#include <set>

#include "../modules/sharded_fixture.h"
#include "mc_stream.h"
#include "shardrec/core/managed_collision/managed_collision_embedding.h"
#include "shardrec/core/tensor/dtype_convert.h"

namespace shardrec {
namespace {

constexpr float kTol = 1e-5f;
constexpr int kSteps = 7;

class ManagedCollisionModules : public ShardedTest {
 protected:
  void SetUp() override {
    ShardedTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(
        registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_eviction_builtin.so")
            .ok());
  }

  // The shared stream (mc_stream.h): t0 and t1 managed, raw ids that contend.
  static std::vector<EmbeddingTableConfig> Tables(PoolingType pooling) { return mc_stream::Tables(pooling); }
  static ManagedCollisionConfigs Managed() { return mc_stream::Managed(); }
  static int64_t BatchOf(int rank) { return mc_stream::BatchOf(rank); }
  static KeyedJaggedTensor RawBatch(const std::vector<EmbeddingTableConfig>& tables, int rank, int step) {
    return mc_stream::RawBatch(tables, rank, step);
  }

  static EmbeddingModuleOptions Options() {
    EmbeddingModuleOptions options;
    options.optimizer = OptimizerSpec::Parse("adagrad,lr=0.1").value();
    options.init_seed = 11;
    return options;
  }

  // expect_fused: the tables the collection must fuse (kFused only).
  void RunEbc(const std::string& sharder, int world, ManagedCollisionDist dist = ManagedCollisionDist::kFused,
              const ManagedCollisionConfigs& managed = Managed(), std::set<std::string> expect_fused = {}) {
    SCOPED_TRACE(fmt::format("sharder={} world={} dist={}", sharder, world,
                             dist == ManagedCollisionDist::kFused ? "fused" : "separate"));
    const auto tables = Tables(PoolingType::kSum);
    PlanRequest req;
    req.tables = tables;
    req.world_size = world;
    req.ranks_per_host = world;
    req.sharder = sharder;
    auto plan = MakePlan(registry_, req);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    auto ref = CreateManagedCollisionEmbeddingBagCollection(registry_, tables, managed, Options());
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    std::vector<int64_t> first(static_cast<size_t>(world) + 1, 0);
    for (int r = 0; r < world; ++r) first[static_cast<size_t>(r) + 1] = first[static_cast<size_t>(r)] + BatchOf(r);
    const int64_t width = 6 * 2 + 4 + 3;
    std::vector<Tensor> expected;
    int64_t evictions = 0;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<KeyedJaggedTensor> per_rank;
      for (int r = 0; r < world; ++r) per_rank.push_back(RawBatch(tables, r, step));
      auto out = ref->Forward(GlobalBatch(per_rank), true);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      expected.push_back(out->values().Clone());
      ASSERT_TRUE(ref->Backward(PooledGrad(0, first.back(), width, step), step + 1).ok());
    }
    const auto want_stats = ref->collection().Stats();
    for (const auto& [t, s] : want_stats) evictions += s.evictions;
    EXPECT_GT(evictions, 0) << "the stream must evict";

    std::mutex mu;
    Replicas replicas;
    OnRanks(world, [&](const ProcessGroup& group) {
      const int me = group.rank();
      auto mc = CreateShardedManagedCollisionEmbeddingBagCollection(registry_, group, plan.value(), managed, Options(),
                                                                     {}, dist);
      ASSERT_TRUE(mc.ok()) << mc.status().ToString();
      for (const auto& [name, how] : mc->collection().dist()) {
        const bool fused = how == "fused";
        if (dist == ManagedCollisionDist::kSeparate) {
          EXPECT_FALSE(fused) << name << ": " << how;
        }
        if (expect_fused.count(name)) {
          EXPECT_TRUE(fused) << name << ": " << how;
        }
      }
      for (int step = 0; step < kSteps; ++step) {
        auto out = mc->Forward(RawBatch(tables, me, step), true);
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        EXPECT_LE(MaxAbsDiff(out->values(), Rows(expected[static_cast<size_t>(step)], first[static_cast<size_t>(me)],
                                                 BatchOf(me))),
                  kTol)
            << "output, rank " << me << ", step " << step;
        ASSERT_TRUE(mc->Backward(PooledGrad(first[static_cast<size_t>(me)], BatchOf(me), width, step), step + 1).ok());
      }
      ExpectTablesMatch(mc->embedding(), ref->embedding().tables(), tables, plan.value(), me, kTol, mu, replicas);
      auto stats = mc->collection().Stats();
      ASSERT_TRUE(stats.ok());
      for (const auto& [name, want] : want_stats) {
        const ManagedCollisionStats& got = stats->at(name);
        EXPECT_EQ(got.lookups, want.lookups) << name;
        EXPECT_EQ(got.hits, want.hits) << name;
        EXPECT_EQ(got.residual, want.residual) << name;
        EXPECT_EQ(got.admissions, want.admissions) << name;
        EXPECT_EQ(got.evictions, want.evictions) << name;
        EXPECT_EQ(got.refusals, want.refusals) << name;
        EXPECT_EQ(got.occupied, want.occupied) << name;
        EXPECT_EQ(got.capacity, want.capacity) << name;
      }
    });
  }
};

TEST_P(ManagedCollisionModules, ShardedEbcEqualsUnshardedForEverySharder) {
  // row_cyclic routes ids itself: evicted rows must be reset at the global
  // rows its local rows stand for (they once were reset at local ones).
  // Fused where the plan allows (table_wise: every table; row_wise: t1 on
  // 1 and 2 ranks, whose 2 buckets fall on the row blocks), separate
  // elsewhere; and every table separate when asked.
  for (const std::string sharder :
       {"table_wise", "row_wise", "column_wise", "table_row_wise", "data_parallel", "row_cyclic"}) {
    for (int world = 1; world <= 3; ++world) {
      std::set<std::string> fused;
      if (sharder == "table_wise") fused = {"t0", "t1"};
      if (sharder == "row_wise" && world <= 2) fused = {"t1"};
      RunEbc(sharder, world, ManagedCollisionDist::kFused, Managed(), fused);
      RunEbc(sharder, world, ManagedCollisionDist::kSeparate);
    }
  }
}

TEST_P(ManagedCollisionModules, FusedRowWiseWithBucketsOnEveryRank) {
  // No residual range, zch_size and buckets multiples of the world size:
  // every rank manages the buckets of its own row block.
  ManagedCollisionConfigs managed;
  managed["t0"] = ParseManagedCollision("t0", "zch_size=16,buckets=4,policy=lru,eviction_interval=1").value();
  managed["t1"] = ParseManagedCollision("t1", "zch_size=10,buckets=2,policy=lfu,eviction_interval=3").value();
  RunEbc("row_wise", 2, ManagedCollisionDist::kFused, managed, {"t0", "t1"});
  RunEbc("row_wise", 4, ManagedCollisionDist::kFused, managed, {"t0"});
}

TEST_P(ManagedCollisionModules, FusedInputMustBeRemappedBeforeTheLookup) {
  if (GetParam() != "local") GTEST_SKIP() << "one comm parameter is enough";
  const auto tables = Tables(PoolingType::kSum);
  PlanRequest req;
  req.tables = tables;
  req.world_size = 1;
  req.ranks_per_host = 1;
  req.sharder = "table_wise";
  auto plan = MakePlan(registry_, req);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  OnRanks(1, [&](const ProcessGroup& group) {
    auto mc = CreateShardedManagedCollisionEmbeddingBagCollection(registry_, group, plan.value(), Managed(), Options());
    ASSERT_TRUE(mc.ok()) << mc.status().ToString();
    ASSERT_FALSE(mc->collection().routes().empty());
    // Raw ids routed but never remapped: the lookup refuses them.
    auto dist = mc->embedding().DistributeInput(RawBatch(tables, 0, 0), nullptr, &mc->collection().routes());
    ASSERT_TRUE(dist.ok()) << dist.status().ToString();
    EXPECT_TRUE(dist->rows_pending);
    auto out = mc->embedding().Forward(*dist);
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.status().message().find("never remapped"), std::string::npos) << out.status().message();
    // Remapped once: rows of the tables; a second remap is refused.
    ASSERT_TRUE(mc->collection().RemapReceived(*dist, true).ok());
    for (int64_t v : dist->received.values()) EXPECT_TRUE(v >= 0 && v < 16) << v;
    EXPECT_FALSE(mc->collection().RemapReceived(*dist, true).ok());
    EXPECT_TRUE(mc->embedding().Forward(*dist).ok());
  });
}

TEST_P(ManagedCollisionModules, ShardedEcEqualsUnsharded) {
  const auto tables = Tables(PoolingType::kNone);
  for (int world : {2, 3}) {
    SCOPED_TRACE(world);
    PlanRequest req;
    req.tables = tables;
    req.world_size = world;
    req.ranks_per_host = world;
    req.sharder = "row_wise";
    auto plan = MakePlan(registry_, req);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    auto ref = CreateManagedCollisionEmbeddingCollection(registry_, tables, Managed(), Options());
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    // Outputs per step, per rank: each rank's part of every feature.
    std::vector<std::vector<std::map<std::string, std::vector<float>>>> expected(kSteps);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<KeyedJaggedTensor> per_rank;
      for (int r = 0; r < world; ++r) per_rank.push_back(RawBatch(tables, r, step));
      auto out = ref->Forward(GlobalBatch(per_rank), true);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      std::map<std::string, Tensor> grads;
      expected[static_cast<size_t>(step)].resize(static_cast<size_t>(world));
      for (auto& [name, jt] : *out) {
        const Tensor& v = jt.values;
        const int64_t dim = v.size(1);
        int64_t at = 0;
        for (int r = 0; r < world; ++r) {
          const auto& kjt = per_rank[static_cast<size_t>(r)];
          const int64_t n = kjt.length_per_key()[static_cast<size_t>(kjt.KeyIndex(name))];
          expected[static_cast<size_t>(step)][static_cast<size_t>(r)][name].assign(
              v.data<float>() + at * dim, v.data<float>() + (at + n) * dim);
          at += n;
        }
        Tensor g = Tensor::Zeros(dtype::kFloat32, {v.size(0), dim});
        for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::sin(0.3f * static_cast<float>(i) + step);
        grads[name] = g;
      }
      ASSERT_TRUE(ref->Backward(grads, step + 1).ok());
    }
    OnRanks(world, [&](const ProcessGroup& group) {
      const int me = group.rank();
      auto mc = CreateShardedManagedCollisionEmbeddingCollection(registry_, group, plan.value(), Managed(), Options());
      ASSERT_TRUE(mc.ok()) << mc.status().ToString();
      for (int step = 0; step < kSteps; ++step) {
        auto out = mc->Forward(RawBatch(tables, me, step), true);
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        std::map<std::string, Tensor> grads;
        for (auto& [name, jt] : *out) {
          const Tensor& v = jt.values;
          const auto& want = expected[static_cast<size_t>(step)][static_cast<size_t>(me)][name];
          ASSERT_EQ(static_cast<size_t>(v.numel()), want.size()) << name;
          for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(v.data<float>()[i], want[i], kTol) << name;
          // This rank's rows of the global gradient: offset by the ids before it.
          int64_t before = 0;
          for (int r = 0; r < me; ++r) {
            const auto other = RawBatch(tables, r, step);
            before += other.length_per_key()[static_cast<size_t>(other.KeyIndex(name))];
          }
          const int64_t dim = v.size(1);
          Tensor g = Tensor::Zeros(dtype::kFloat32, {v.size(0), dim});
          for (int64_t i = 0; i < g.numel(); ++i) {
            g.data<float>()[i] = std::sin(0.3f * static_cast<float>(before * dim + i) + step);
          }
          grads[name] = g;
        }
        ASSERT_TRUE(mc->Backward(grads, step + 1).ok());
      }
      for (size_t t = 0; t < tables.size(); ++t) {
        auto got = mc->embedding().ReadTable(tables[t].name);
        ASSERT_TRUE(got.ok());
        const auto want_w =
            ToFloat32(ref->embedding().tables().ReadWeights(static_cast<int32_t>(t)).value(), "w").value();
        EXPECT_LE(MaxAbsDiff(got->weights, want_w), kTol) << tables[t].name << ", rank " << me;
      }
    });
  }
}

TEST_P(ManagedCollisionModules, EvictionResetsExactlyTheEvictedRows) {
  if (GetParam() != "local") GTEST_SKIP() << "unsharded: one comm parameter is enough";
  const auto tables = Tables(PoolingType::kSum);
  auto mc = CreateManagedCollisionEmbeddingBagCollection(registry_, tables, Managed(), Options());
  auto fresh = EmbeddingBagCollection::Create(registry_, tables, Options());
  ASSERT_TRUE(mc.ok() && fresh.ok());
  // t1 (distance LFU, a round every step, dim 4) evicts often.
  constexpr int32_t kT1 = 1;
  constexpr int64_t kRows = 10, kDim = 4;
  const auto initial = fresh->tables().ReadWeights(kT1).value();
  bool saw_eviction = false;
  for (int step = 0; step < 40 && !saw_eviction; ++step) {
    const auto before_w = mc->embedding().tables().ReadWeights(kT1).value();
    const int64_t evictions_before = mc->collection().Stats().at("t1").evictions;
    auto out = mc->Forward(RawBatch(tables, 0, step), true);  // the round and the reset run in here
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    const bool evicted = mc->collection().Stats().at("t1").evictions > evictions_before;
    const auto after_w = mc->embedding().tables().ReadWeights(kT1).value();
    const auto after_s = mc->embedding().tables().ReadState(kT1).value();
    std::vector<int64_t> changed;
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t c = 0; c < kDim; ++c) {
        if (before_w.data<float>()[r * kDim + c] != after_w.data<float>()[r * kDim + c]) {
          changed.push_back(r);
          break;
        }
      }
    }
    EXPECT_EQ(!changed.empty(), evicted) << "step " << step << ": rows change exactly when ids are evicted";
    for (int64_t r : changed) {
      saw_eviction = true;
      for (int64_t c = 0; c < kDim; ++c) {
        EXPECT_EQ(after_w.data<float>()[r * kDim + c], initial.data<float>()[r * kDim + c]) << "row " << r;
      }
      for (int64_t c = 0; c < after_s.size(1); ++c) EXPECT_EQ(after_s.data<float>()[r * after_s.size(1) + c], 0.0f);
    }
    for (int64_t v : mc->remapped()->values()) ASSERT_TRUE(v >= 0 && v < 16);
    ASSERT_TRUE(mc->Backward(PooledGrad(0, BatchOf(0), 6 * 2 + 4 + 3, step), step + 1).ok());
  }
  EXPECT_TRUE(saw_eviction) << "no row of t1 was reset in 40 steps";
}

INSTANTIATE_TEST_SUITE_P(Comm, ManagedCollisionModules, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
