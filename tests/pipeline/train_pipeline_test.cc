// TrainPipelineSparseDist: its semantics alone (order, end of data,
// errors, what each Prefetch starts), then sharded training pipelined
// against the same training unpipelined, bit for bit (outputs at every
// step, every table's weights and optimizer state, managed collision's
// counters): every built-in sharder and the self-routing plugin, worlds of
// 2 and 3, with and without managed collision, over local and gloo.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>

#include "../managed_collision/mc_stream.h"
#include "../modules/sharded_fixture.h"
#include "shardrec/core/managed_collision/managed_collision_embedding.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/core/pipeline/train_pipeline.h"

namespace shardrec {
namespace {

// ---- The pipeline alone: batches are ints, a dist doubles them.

using IntPipeline = TrainPipelineSparseDist<int, int>;

struct Counting {
  int next = 0, total = 0;
  std::atomic<int> fetched{0}, dists{0};
  std::atomic<int> fetch_thread_is_caller{0};
  std::thread::id caller = std::this_thread::get_id();
  int fail_fetch_at = -1, fail_dist_at = -1, throw_at = -1;
  IntPipeline::FetchFn Fetch() {
    return [this]() -> StatusOr<std::optional<int>> {
      if (next == fail_fetch_at) return InvalidArgumentError(fmt::format("fetch {} failed", next));
      if (next >= total) return std::optional<int>();
      ++fetched;
      if (std::this_thread::get_id() == caller) ++fetch_thread_is_caller;
      return std::optional<int>(next++);
    };
  }
  IntPipeline::DistFn Dist() {
    return [this](int& b, const ProcessGroup*) -> StatusOr<int> {
      if (b == throw_at) throw std::runtime_error("dist threw");
      if (b == fail_dist_at) return Status(SR_UNAVAILABLE, fmt::format("dist {} failed", b));
      ++dists;
      return 2 * b;
    };
  }
};

// The pipeline needs a group only to hand to the dist; these never use it.
const ProcessGroup* FakeGroup() { return reinterpret_cast<const ProcessGroup*>(alignof(ProcessGroup)); }

TEST(TrainPipeline, ReturnsEveryBatchInOrderThenNothing) {
  for (PipelineMode mode : {PipelineMode::kNone, PipelineMode::kSparseDist}) {
    SCOPED_TRACE(PipelineModeName(mode));
    Counting c;
    c.total = 5;
    IntPipeline p(mode, FakeGroup(), c.Fetch(), c.Dist());
    for (int i = 0; i < 5; ++i) {
      auto s = p.Next();
      ASSERT_TRUE(s.ok()) << s.status().ToString();
      ASSERT_TRUE(s->has_value()) << "batch " << i;
      EXPECT_EQ((*s)->batch, i);
      EXPECT_EQ((*s)->dist, 2 * i);
    }
    for (int i = 0; i < 3; ++i) {
      auto s = p.Next();
      ASSERT_TRUE(s.ok());
      EXPECT_FALSE(s->has_value()) << "after the end";
    }
    EXPECT_EQ(c.fetched, 5);
    EXPECT_EQ(c.dists, 5);
    EXPECT_EQ(p.times().batches, 5);
    // Unpipelined, everything runs on the caller's thread; pipelined, only the first batch.
    EXPECT_EQ(c.fetch_thread_is_caller, mode == PipelineMode::kNone ? 5 : 1);
  }
}

TEST(TrainPipeline, PrefetchSaysWhatOfTheNextBatchStarts) {
  Counting c;
  c.total = 4;
  IntPipeline p(PipelineMode::kSparseDist, FakeGroup(), c.Fetch(), c.Dist());
  using P = IntPipeline::Prefetch;
  auto s = p.Next(P::kNothing);  // batch 0, made here; nothing started
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ(c.fetched, 1);
  EXPECT_EQ(c.dists, 1);
  s = p.Next(P::kFetch);  // batch 1, made here; batch 2's fetch starts
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->dist, 2);
  EXPECT_EQ(c.fetch_thread_is_caller, 2);
  s = p.Next(P::kFetchAndDist);  // batch 2: fetched ahead, its dist runs now; batch 3 starts whole
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->dist, 4);
  EXPECT_EQ(c.fetch_thread_is_caller, 2) << "batch 2 was fetched on the pipeline thread";
  s = p.Next();
  ASSERT_TRUE(s.ok() && s->has_value());
  EXPECT_EQ((*s)->batch, 3);
  EXPECT_EQ(c.fetch_thread_is_caller, 2);
  s = p.Next();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(s->has_value());
}

TEST(TrainPipeline, AnErrorComesOutWithItsBatchAndStays) {
  for (PipelineMode mode : {PipelineMode::kNone, PipelineMode::kSparseDist}) {
    for (int kind = 0; kind < 3; ++kind) {
      SCOPED_TRACE(fmt::format("{} kind {}", PipelineModeName(mode), kind));
      Counting c;
      c.total = 6;
      if (kind == 0) c.fail_fetch_at = 3;
      if (kind == 1) c.fail_dist_at = 3;
      if (kind == 2) c.throw_at = 3;
      IntPipeline p(mode, FakeGroup(), c.Fetch(), c.Dist());
      for (int i = 0; i < 3; ++i) {
        auto s = p.Next();
        ASSERT_TRUE(s.ok()) << "batch " << i << " comes before the failure: " << s.status().ToString();
        ASSERT_TRUE(s->has_value());
      }
      for (int again = 0; again < 2; ++again) {
        auto s = p.Next();
        ASSERT_FALSE(s.ok());
        const std::string want = kind == 0 ? "fetch 3 failed" : kind == 1 ? "dist 3 failed" : "dist threw";
        EXPECT_NE(s.status().message().find(want), std::string::npos) << s.status().ToString();
      }
    }
  }
}

TEST(TrainPipeline, SparseDistWithoutAGroupIsRefused) {
  Counting c;
  c.total = 2;
  IntPipeline p(PipelineMode::kSparseDist, nullptr, c.Fetch(), c.Dist());
  auto s = p.Next();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("Duplicate"), std::string::npos) << s.status().ToString();
}

TEST(TrainPipeline, ModeNames) {
  EXPECT_EQ(ParsePipelineMode("none").value(), PipelineMode::kNone);
  EXPECT_EQ(ParsePipelineMode("sparse_dist").value(), PipelineMode::kSparseDist);
  auto bad = ParsePipelineMode("sparse");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("none or sparse_dist"), std::string::npos);
}

// ---- Sharded training, pipelined against unpipelined.

constexpr int kSteps = 6;

struct RankRun {
  std::vector<Tensor> outputs;                 // per step
  std::map<std::string, TableContents> tables;  // after the last step
  std::map<std::string, ManagedCollisionStats> stats;
};

bool SameBits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype().code == b.dtype().code && a.dtype().bits == b.dtype().bits &&
         std::memcmp(a.raw_data(), b.raw_data(), static_cast<size_t>(a.nbytes())) == 0;
}

class PipelinedTraining : public ShardedTest {
 protected:
  void SetUp() override {
    ShardedTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(
        registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_eviction_builtin.so")
            .ok());
  }

  // Managed: the managed-collision tests' stream (mc_stream.h), which evicts
  // every round or two; else weighted tables with sum and mean pooling.
  static std::vector<EmbeddingTableConfig> Tables(bool managed) {
    if (managed) return mc_stream::Tables(PoolingType::kSum);
    return {Table("t0", 50, 8, {"f0", "f1"}, PoolingType::kSum, true), Table("t1", 23, 5, {"f2"}, PoolingType::kMean, true),
            Table("t2", 3, 12, {"f3"}, PoolingType::kSum, true)};
  }
  static ManagedCollisionConfigs Managed() { return mc_stream::Managed(); }
  static int64_t BatchOf(int rank) { return mc_stream::BatchOf(rank); }
  static KeyedJaggedTensor Batch(const std::vector<EmbeddingTableConfig>& tables, bool managed, int rank, int step) {
    return managed ? mc_stream::RawBatch(tables, rank, step) : LocalBatch(tables, rank, step, BatchOf(rank));
  }

  ShardingPlan Plan(const std::string& sharder, int world, const std::vector<EmbeddingTableConfig>& tables) {
    PlanRequest req;
    req.tables = tables;
    req.world_size = world;
    req.ranks_per_host = sharder == "table_row_wise" && world % 2 == 0 ? world / 2 : world;
    if (sharder == "column_wise") {
      req.spec = ParsePlanJson(R"({"plan": {
          "t0": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "4"}},
          "t1": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "2"}},
          "t2": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "5"}}}})",
                               "test plan")
                     .value();
    } else {
      req.sharder = sharder;
    }
    auto plan = MakePlan(registry_, req);
    EXPECT_TRUE(plan.ok()) << plan.status().ToString();
    return plan.ok() ? plan.value() : ShardingPlan{};
  }

  // Trains kSteps on every rank through a pipeline; batch 2's step asks for
  // no prefetch and batch 3's for the fetch only, as a checkpoint and
  // position weights make the host do.
  std::vector<RankRun> Train(const ShardingPlan& plan, bool managed, PipelineMode mode, int world) {
    const auto tables = Tables(managed);
    EmbeddingModuleOptions options;
    options.optimizer = OptimizerSpec::Parse("adagrad,lr=0.1").value();
    options.init_seed = 11;
    int64_t width = 0;
    for (const auto& t : tables) width += t.embedding_dim * static_cast<int64_t>(t.feature_names.size());
    std::vector<RankRun> runs(static_cast<size_t>(world));
    OnRanks(world, [&](const ProcessGroup& group) {
      const int me = group.rank();
      int64_t first = 0;
      for (int r = 0; r < me; ++r) first += BatchOf(r);
      std::optional<ShardedEmbeddingBagCollection> plain;
      std::optional<ShardedManagedCollisionEmbeddingBagCollection> mc;
      if (managed) {
        auto made = CreateShardedManagedCollisionEmbeddingBagCollection(registry_, group, plan, Managed(), options);
        ASSERT_TRUE(made.ok()) << made.status().ToString();
        mc.emplace(std::move(made).value());
      } else {
        auto made = ShardedEmbeddingBagCollection::Create(registry_, group, plan, options);
        ASSERT_TRUE(made.ok()) << made.status().ToString();
        plain.emplace(std::move(made).value());
      }
      ShardedEmbeddingBagCollection& ebc = mc ? mc->embedding() : *plain;
      std::optional<ProcessGroup> dist_group;
      if (mode == PipelineMode::kSparseDist) {
        auto made = group.Duplicate();
        ASSERT_TRUE(made.ok()) << made.status().ToString();
        dist_group.emplace(std::move(made).value());
      }
      struct Dist {
        std::optional<DistributedInput> plain;
        std::optional<ShardedManagedCollisionEmbeddingBagCollection::Prepared> mc;
      };
      int next = 0;
      TrainPipelineSparseDist<int, Dist> pipeline(
          mode, dist_group ? &*dist_group : nullptr,
          [&]() -> StatusOr<std::optional<int>> {
            if (next >= kSteps) return std::optional<int>();
            return std::optional<int>(next++);
          },
          [&](int& step, const ProcessGroup* via) -> StatusOr<Dist> {
            const KeyedJaggedTensor kjt = Batch(tables, managed, me, step);
            Dist d;
            if (mc) {
              SR_ASSIGN_OR_RETURN(auto p, mc->Prepare(kjt, via));
              d.mc.emplace(std::move(p));
            } else {
              SR_ASSIGN_OR_RETURN(auto p, ebc.DistributeInput(kjt, via));
              d.plain.emplace(std::move(p));
            }
            return d;
          });
      using P = decltype(pipeline)::Prefetch;
      RankRun& run = runs[static_cast<size_t>(me)];
      for (int step = 0;; ++step) {
        auto stage = pipeline.Next(step == 2 ? P::kNothing : step == 3 ? P::kFetch : P::kFetchAndDist);
        ASSERT_TRUE(stage.ok()) << stage.status().ToString();
        if (!stage->has_value()) {
          EXPECT_EQ(step, kSteps);
          break;
        }
        ASSERT_EQ((*stage)->batch, step);
        auto out = mc ? mc->Forward(std::move(*(*stage)->dist.mc)) : ebc.Forward(std::move(*(*stage)->dist.plain));
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        run.outputs.push_back(out->values().Clone());
        const Tensor grad = PooledGrad(first, BatchOf(me), width, step);
        ASSERT_TRUE((mc ? mc->Backward(grad, step + 1) : ebc.Backward(grad, step + 1)).ok());
      }
      for (const auto& t : tables) {
        auto got = ebc.ReadTable(t.name);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        run.tables[t.name] = std::move(got).value();
      }
      if (mc) {
        auto stats = mc->collection().Stats();
        ASSERT_TRUE(stats.ok()) << stats.status().ToString();
        run.stats = std::move(stats).value();
      }
    });
    return runs;
  }

  void ExpectPipelinedIsUnpipelined(const std::string& sharder, bool managed) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(fmt::format("sharder={} world={} managed={}", sharder, world, managed));
      const ShardingPlan plan = Plan(sharder, world, Tables(managed));
      const auto want = Train(plan, managed, PipelineMode::kNone, world);
      const auto got = Train(plan, managed, PipelineMode::kSparseDist, world);
      ASSERT_EQ(got.size(), want.size());
      int64_t evictions = 0;
      for (size_t r = 0; r < want.size(); ++r) {
        ASSERT_EQ(got[r].outputs.size(), static_cast<size_t>(kSteps)) << "rank " << r;
        ASSERT_EQ(want[r].outputs.size(), static_cast<size_t>(kSteps)) << "rank " << r;
        for (int s = 0; s < kSteps; ++s) {
          EXPECT_TRUE(SameBits(got[r].outputs[static_cast<size_t>(s)], want[r].outputs[static_cast<size_t>(s)]))
              << "output, rank " << r << ", step " << s;
        }
        for (const auto& [name, w] : want[r].tables) {
          EXPECT_TRUE(SameBits(got[r].tables.at(name).weights, w.weights)) << "weights of " << name << ", rank " << r;
          EXPECT_TRUE(SameBits(got[r].tables.at(name).state, w.state)) << "optimizer state of " << name << ", rank " << r;
        }
        for (const auto& [name, s] : want[r].stats) {
          const auto& g = got[r].stats.at(name);
          EXPECT_EQ(g.lookups, s.lookups) << name;
          EXPECT_EQ(g.hits, s.hits) << name;
          EXPECT_EQ(g.admissions, s.admissions) << name;
          EXPECT_EQ(g.evictions, s.evictions) << name;
          EXPECT_EQ(g.occupied, s.occupied) << name;
          evictions += s.evictions;
        }
      }
      if (managed) {
        EXPECT_GT(evictions, 0) << "the stream must evict, so deferred row resets are exercised";
      }
    }
  }
};

TEST_P(PipelinedTraining, TableWise) { ExpectPipelinedIsUnpipelined("table_wise", false); }
TEST_P(PipelinedTraining, RowWise) { ExpectPipelinedIsUnpipelined("row_wise", false); }
TEST_P(PipelinedTraining, ColumnWise) { ExpectPipelinedIsUnpipelined("column_wise", false); }
TEST_P(PipelinedTraining, TableRowWise) { ExpectPipelinedIsUnpipelined("table_row_wise", false); }
TEST_P(PipelinedTraining, DataParallel) { ExpectPipelinedIsUnpipelined("data_parallel", false); }
TEST_P(PipelinedTraining, SelfRoutingPlugin) { ExpectPipelinedIsUnpipelined("row_cyclic", false); }
TEST_P(PipelinedTraining, ManagedCollisionTableWise) { ExpectPipelinedIsUnpipelined("table_wise", true); }
TEST_P(PipelinedTraining, ManagedCollisionRowWise) { ExpectPipelinedIsUnpipelined("row_wise", true); }
TEST_P(PipelinedTraining, ManagedCollisionColumnWise) { ExpectPipelinedIsUnpipelined("column_wise", true); }
TEST_P(PipelinedTraining, ManagedCollisionTableRowWise) { ExpectPipelinedIsUnpipelined("table_row_wise", true); }
TEST_P(PipelinedTraining, ManagedCollisionDataParallel) { ExpectPipelinedIsUnpipelined("data_parallel", true); }
TEST_P(PipelinedTraining, ManagedCollisionSelfRoutingPlugin) { ExpectPipelinedIsUnpipelined("row_cyclic", true); }

INSTANTIATE_TEST_SUITE_P(Comm, PipelinedTraining, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
