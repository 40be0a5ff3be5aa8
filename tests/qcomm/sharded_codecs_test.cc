// The sharded modules with quantized comm codecs against the same modules
// without: each output dist (table-wise all-to-all, row-wise reduce-
// scatter, the generic all-to-all of column and table-row splits, the
// sequence all-to-all) with each built-in codec gives outputs and, after
// the backward, tables within the codec's documented tolerance of float32,
// and puts fewer bytes on the wire; codec names that do not exist are
// refused at creation, naming the op.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <mutex>

#include "../modules/sharded_fixture.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_collection.h"

namespace shardrec {
namespace {

// Relative to max(1, |value|): docs/comm.md's table for one step.
double Tolerance(const std::string& codec) {
  if (codec == "fp16") return 2e-3;
  if (codec == "bf16") return 2e-2;
  if (codec == "int8") return 5e-2;
  return 1.5e-1;  // fp8
}

double MaxScaledDiff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.data<float>()[i], y = b.data<float>()[i];
    m = std::max(m, std::fabs(x - y) / std::max(1.0, std::fabs(y)));
  }
  return m;
}

class ShardedCodecs : public ShardedTest {
 protected:
  void SetUp() override {
    ShardedTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(
        registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_codec_builtin.so").ok());
  }
  static std::vector<EmbeddingTableConfig> Tables() {
    return {Table("t0", 50, 8, {"f0", "f1"}, PoolingType::kSum, false),
            Table("t1", 23, 6, {"f2"}, PoolingType::kMean, false), Table("t2", 9, 12, {"f3"}, PoolingType::kSum, false)};
  }
  ShardingPlan Plan(const std::string& sharder, int world) {
    PlanRequest req;
    req.tables = Tables();
    req.world_size = world;
    req.ranks_per_host = sharder == "table_row_wise" ? world / 2 : world;  // two hosts
    if (sharder == "column_wise") {
      req.spec = ParsePlanJson(R"({"plan": {"t0": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "4"}},
          "t1": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "3"}},
          "t2": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "6"}}}})",
                               "test")
                     .value();
    } else {
      req.sharder = sharder;
    }
    return MakePlan(registry_, req).value();
  }

  struct Run {
    std::vector<Tensor> outputs;                  // per rank, the first step's
    std::vector<std::map<std::string, Tensor>> weights;  // per rank, after two steps
    int64_t output_bytes = 0;                     // summed over ranks
    std::string path;
  };
  Run Train(const ShardingPlan& plan, const QCommConfig& qcomm, int world) {
    Run run;
    run.outputs.resize(static_cast<size_t>(world));
    run.weights.resize(static_cast<size_t>(world));
    std::mutex mu;
    int64_t width = 0;
    for (const auto& t : Tables()) width += t.embedding_dim * static_cast<int64_t>(t.feature_names.size());
    OnRanks(world, [&](const ProcessGroup& group) {
      const int me = group.rank();
      EmbeddingModuleOptions options;
      options.optimizer = OptimizerSpec::Parse("sgd,lr=0.1").value();
      options.init_seed = 5;
      ShardedModuleOptions so;
      so.qcomm = qcomm;
      auto ebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan, options, so);
      ASSERT_TRUE(ebc.ok()) << ebc.status().ToString();
      for (int step = 0; step < 2; ++step) {
        auto out = ebc->Forward(LocalBatch(Tables(), me, step, 6));
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        if (step == 0) run.outputs[static_cast<size_t>(me)] = out->values().Clone();
        ASSERT_TRUE(ebc->Backward(PooledGrad(6 * me, 6, width, step), step + 1).ok());
      }
      for (const auto& t : Tables()) {
        auto got = ebc->ReadTable(t.name);
        ASSERT_TRUE(got.ok());
        run.weights[static_cast<size_t>(me)][t.name] = got->weights;
      }
      std::lock_guard<std::mutex> lock(mu);
      run.output_bytes += ebc->times().output_dist_bytes;
      run.path = ebc->output_dist();
    });
    return run;
  }

  void Compare(const std::string& sharder, const std::string& op, const std::string& want_path) {
    const int world = sharder == "table_row_wise" ? 4 : 3;
    const ShardingPlan plan = Plan(sharder, world);
    const Run plain = Train(plan, {}, world);
    EXPECT_EQ(plain.path, want_path) << sharder;
    for (const std::string codec : {"fp16", "bf16", "int8", "fp8"}) {
      SCOPED_TRACE(fmt::format("{} with {} on {}", sharder, codec, op));
      const Run q = Train(plan, ParseQCommFlag(op + "=" + codec).value(), world);
      for (int r = 0; r < world; ++r) {
        EXPECT_LE(MaxScaledDiff(q.outputs[static_cast<size_t>(r)], plain.outputs[static_cast<size_t>(r)]),
                  Tolerance(codec))
            << "outputs of rank " << r;
        for (const auto& [name, w] : plain.weights[static_cast<size_t>(r)]) {
          EXPECT_LE(MaxScaledDiff(q.weights[static_cast<size_t>(r)].at(name), w), Tolerance(codec))
              << "weights of " << name << " on rank " << r;
        }
      }
      EXPECT_LT(q.output_bytes, plain.output_bytes * (codec == "fp16" || codec == "bf16" ? 0.51 : 0.5))
          << "fewer bytes on the wire";
      EXPECT_GT(q.output_bytes, 0);
    }
  }
};

TEST_P(ShardedCodecs, TableWiseAllToAll) { Compare("table_wise", "pooled_embeddings_all_to_all", "table_wise"); }
TEST_P(ShardedCodecs, RowWiseReduceScatter) { Compare("row_wise", "pooled_embeddings_reduce_scatter", "row_wise"); }
TEST_P(ShardedCodecs, ColumnWiseGenericAllToAll) { Compare("column_wise", "pooled_embeddings_all_to_all", "generic"); }
TEST_P(ShardedCodecs, TableRowWiseGenericAllToAll) {
  Compare("table_row_wise", "pooled_embeddings_all_to_all", "generic");
}

TEST_P(ShardedCodecs, ACodecOnAnotherOpChangesNothing) {
  const ShardingPlan plan = Plan("table_wise", 2);
  const Run plain = Train(plan, {}, 2);
  const Run other = Train(plan, ParseQCommFlag("pooled_embeddings_reduce_scatter=int8").value(), 2);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(MaxScaledDiff(other.outputs[static_cast<size_t>(r)], plain.outputs[static_cast<size_t>(r)]), 0.0);
  }
  EXPECT_EQ(other.output_bytes, plain.output_bytes);
}

TEST_P(ShardedCodecs, SequenceAllToAll) {
  const int world = 2;
  const ShardingPlan plan = Plan("row_wise", world);
  auto run = [&](const QCommConfig& qcomm, std::vector<std::map<std::string, Tensor>>& out, int64_t& bytes) {
    out.resize(static_cast<size_t>(world));
    std::mutex mu;
    OnRanks(world, [&](const ProcessGroup& group) {
      EmbeddingModuleOptions options;
      options.optimizer = OptimizerSpec::Parse("sgd,lr=0.1").value();
      options.init_seed = 5;
      ShardedModuleOptions so;
      so.qcomm = qcomm;
      auto ec = ShardedEmbeddingCollection::Create(registry_, group, plan, options, so);
      ASSERT_TRUE(ec.ok()) << ec.status().ToString();
      auto got = ec->Forward(LocalBatch(Tables(), group.rank(), 0, 5));
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      std::map<std::string, Tensor> grads;
      for (auto& [name, jt] : *got) {
        out[static_cast<size_t>(group.rank())][name] = jt.values.Clone();
        Tensor g = Tensor::Empty(dtype::kFloat32, jt.values.shape());
        for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = std::sin(0.3f * static_cast<float>(i));
        grads[name] = g;
      }
      ASSERT_TRUE(ec->Backward(grads, 1).ok());
      std::lock_guard<std::mutex> lock(mu);
      bytes += ec->times().output_dist_bytes;
    });
  };
  std::vector<std::map<std::string, Tensor>> plain, fp16;
  int64_t plain_bytes = 0, fp16_bytes = 0;
  run({}, plain, plain_bytes);
  run(ParseQCommFlag("sequence_embeddings_all_to_all=fp16").value(), fp16, fp16_bytes);
  for (int r = 0; r < world; ++r) {
    for (const auto& [name, v] : plain[static_cast<size_t>(r)]) {
      EXPECT_LE(MaxScaledDiff(fp16[static_cast<size_t>(r)].at(name), v), Tolerance("fp16")) << name;
    }
  }
  EXPECT_GT(fp16_bytes, 0);
  EXPECT_LE(fp16_bytes * 2, plain_bytes + 1) << "fp16 halves the sequence all-to-all's bytes";
}

TEST_P(ShardedCodecs, AnUnknownCodecIsRefusedNamingTheOp) {
  const ShardingPlan plan = Plan("table_wise", 2);
  OnRanks(2, [&](const ProcessGroup& group) {
    ShardedModuleOptions so;
    so.qcomm = ParseQCommFlag("pooled_embeddings_all_to_all=fp16:fp4").value();
    EmbeddingModuleOptions options;
    auto ebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan, options, so);
    ASSERT_FALSE(ebc.ok());
    EXPECT_NE(ebc.status().message().find("pooled_embeddings_all_to_all backward codec 'fp4'"), std::string::npos)
        << ebc.status().ToString();
    EXPECT_NE(ebc.status().message().find("bf16"), std::string::npos) << "lists the codecs there are";
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, ShardedCodecs, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
