// Saving under one plan and world size, loading under another: every row
// and optimizer state value comes back bit for bit, for every sharder
// (self-routing row_cyclic included) and every optimizer; bad checkpoints
// are refused before any table changes, naming the file.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <mutex>
#include <random>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "../core/temp_dir.h"
#include "../modules/sharded_fixture.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/checkpoint/directory.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec {
namespace {

namespace fs = std::filesystem;

struct Layout {
  int world;
  std::string sharder;  // or a plan JSON
};

class CheckpointRoundTrip : public ShardedTest {
 protected:
  static std::vector<EmbeddingTableConfig> Tables() {
    return {Table("t0", 50, 8, {"f0", "f1"}, PoolingType::kSum, false),
            Table("t1", 23, 5, {"f2"}, PoolingType::kSum, false), Table("t2", 3, 12, {"f3"}, PoolingType::kMean, false)};
  }

  // Distinct values everywhere: a misplaced row or column cannot go unseen.
  static std::map<std::string, TableContents> Contents(const std::vector<EmbeddingTableConfig>& tables, int32_t optimizer,
                                                       uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(0.0f, 1.0f);
    std::map<std::string, TableContents> out;
    for (const auto& t : tables) {
      TableContents c;
      c.weights = Tensor::Empty(dtype::kFloat32, {t.num_embeddings, t.embedding_dim});
      for (int64_t i = 0; i < c.weights.numel(); ++i) c.weights.data<float>()[i] = u(rng) - 0.5f;
      const int64_t sd = sdk::StateDim(optimizer, t.embedding_dim);
      c.state = Tensor::Empty(dtype::kFloat32, {t.num_embeddings, sd});
      for (int64_t i = 0; i < c.state.numel(); ++i) c.state.data<float>()[i] = u(rng);
      out[t.name] = std::move(c);
    }
    return out;
  }

  StatusOr<ShardingPlan> Plan(const Layout& l) {
    PlanRequest req;
    req.tables = Tables();
    req.world_size = l.world;
    req.ranks_per_host = l.world % 2 == 0 && l.world > 2 ? l.world / 2 : l.world;
    if (l.sharder.front() == '{') {
      SR_ASSIGN_OR_RETURN(req.spec, ParsePlanJson(l.sharder, "test plan"));
    } else {
      req.sharder = l.sharder;
    }
    return MakePlan(registry_, req);
  }

  static EmbeddingModuleOptions Options(const std::string& optimizer) {
    EmbeddingModuleOptions o;
    o.optimizer = OptimizerSpec::Parse(optimizer).value();
    o.init_seed = 3;
    return o;
  }

  // Writes `contents` under `from`, saves, loads under `to`, and compares;
  // checksums checked before loading or as the rows are read, every byte of
  // every file at least once either way.
  void RoundTrip(const Layout& from, const Layout& to, const std::string& optimizer, bool verify_first) {
    SCOPED_TRACE(fmt::format("{} x{} -> {} x{}, {}, checksums {}", from.sharder, from.world, to.sharder, to.world,
                             optimizer, verify_first ? "first" : "as read"));
    testing::TempDir dir("ckpt");
    const auto tables = Tables();
    const auto options = Options(optimizer);
    const auto contents = Contents(tables, options.optimizer.optimizer, 11);
    auto plan_a = Plan(from);
    ASSERT_TRUE(plan_a.ok()) << plan_a.status().ToString();
    OnRanks(from.world, [&](const ProcessGroup& group) {
      auto ebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan_a.value(), options);
      ASSERT_TRUE(ebc.ok()) << ebc.status().ToString();
      for (const auto& [name, c] : contents) ASSERT_TRUE(ebc->tables().WriteTable(name, c).ok());
      CheckpointSaveRequest req;
      req.root = dir.path();
      req.step = 7;
      req.optimizer_iteration = 7;
      req.chunk_bytes = 200;  // many chunks per part
      auto saved = SaveCheckpoint(ebc->tables(), req);
      ASSERT_TRUE(saved.ok()) << saved.status().ToString();
      EXPECT_EQ(saved->dir, dir.path() / "step-00000007");
    });
    auto plan_b = Plan(to);
    ASSERT_TRUE(plan_b.ok()) << plan_b.status().ToString();
    std::atomic<int64_t> checked{0};
    OnRanks(to.world, [&](const ProcessGroup& group) {
      auto ebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan_b.value(), options);
      ASSERT_TRUE(ebc.ok()) << ebc.status().ToString();
      CheckpointLoadRequest req;
      req.dir = dir.path();
      req.chunk_bytes = 300;
      req.verify_before_loading = verify_first;
      auto loaded = LoadCheckpoint(ebc->tables(), req);
      ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
      checked += loaded->bytes_checked_here;
      EXPECT_EQ(loaded->manifest.step, 7);
      EXPECT_EQ(loaded->manifest.optimizer_iteration, 7);
      for (const auto& [name, want] : contents) {
        auto got = ebc->tables().ReadTable(name);
        ASSERT_TRUE(got.ok()) << got.status().ToString();
        EXPECT_EQ(MaxAbsDiff(got->weights, want.weights), 0.0f) << "weights of " << name << ", rank " << group.rank();
        EXPECT_EQ(MaxAbsDiff(got->state, want.state), 0.0f) << "state of " << name << ", rank " << group.rank();
      }
    });
    int64_t files = 0;
    auto manifest = LoadCheckpointManifest(dir.path() / "step-00000007");
    ASSERT_TRUE(manifest.ok()) << manifest.status().ToString();
    for (const auto& f : manifest->files) {
      files += f.bytes + (f.row_ids ? f.row_ids->bytes : 0);
    }
    // Checked first, each file by one rank; as read, a replica's file is
    // hashed by every rank that reads it (for free), the rest once.
    if (verify_first) {
      EXPECT_EQ(checked.load(), files) << "bytes hashed by all ranks together";
    } else {
      EXPECT_GE(checked.load(), files) << "bytes hashed by all ranks together";
    }
  }
};

// Column-wise with uneven blocks, so that a column split meets another.
constexpr char kColumnWise[] = R"({"plan": {
    "t0": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "3"}},
    "t1": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "2"}},
    "t2": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "5"}}}})";
constexpr char kMixed[] = R"({"plan": {
    "t0": {"sharding_type": "row_wise"}, "t1": {"sharding_type": "data_parallel"},
    "t2": {"sharding_type": "column_wise", "sharder_options": {"block_cols": "4"}}}})";

TEST_P(CheckpointRoundTrip, AnyPlanToAnyPlanEveryOptimizer) {
  const std::vector<std::pair<Layout, Layout>> moves = {
      {{1, "table_wise"}, {4, "row_wise"}},        {{4, "row_wise"}, {2, kColumnWise}},
      {{2, kColumnWise}, {3, "row_cyclic"}},       {{3, "row_cyclic"}, {4, "table_row_wise"}},
      {{4, "table_row_wise"}, {1, "data_parallel"}}, {{2, "data_parallel"}, {3, kMixed}},
      {{3, kMixed}, {2, "row_cyclic"}},            {{2, "row_cyclic"}, {1, "table_wise"}}};
  int n = 0;
  for (const char* optimizer : {"adagrad", "rowwise_adagrad", "adam", "sgd"}) {
    for (const auto& [from, to] : moves) RoundTrip(from, to, optimizer, n++ % 3 != 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Comm, CheckpointRoundTrip, ::testing::Values("local", "gloo"));

// Bad checkpoints, refused before any table changes.
class BadCheckpoint : public CheckpointRoundTrip {
 protected:
  void SetUp() override {
    CheckpointRoundTrip::SetUp();
    if (IsSkipped()) return;
    const auto options = Options("adagrad");
    auto plan = Plan({2, "row_wise"});
    ASSERT_TRUE(plan.ok());
    plan_ = plan.value();
    OnRanks(2, [&](const ProcessGroup& group) {
      auto ebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan_, options);
      ASSERT_TRUE(ebc.ok());
      for (const auto& [name, c] : Contents(Tables(), SR_OPTIMIZER_ADAGRAD, 5)) ASSERT_TRUE(ebc->tables().WriteTable(name, c).ok());
      CheckpointSaveRequest req;
      req.root = dir_.path();
      req.step = 3;
      ASSERT_TRUE(SaveCheckpoint(ebc->tables(), req).ok());
    });
    ckpt_ = dir_.path() / "step-00000003";
  }

  // Loads into fresh row-wise tables on 2 ranks; expects an error holding
  // `expect`, and the tables as they were created (checksums checked
  // first), or an error also saying that they were not (as read).
  void ExpectRefused(const std::string& expect, const std::string& optimizer = "adagrad", bool reset = false,
                     std::vector<EmbeddingTableConfig> tables = {}, bool verify_first = true,
                     const std::string& sharder = "row_wise") {
    if (tables.empty()) tables = Tables();
    PlanRequest req;
    req.tables = tables;
    req.world_size = 2;
    if (sharder.front() == '{') {
      req.spec = ParsePlanJson(sharder, "test plan").value();
    } else {
      req.sharder = sharder;
    }
    auto plan = MakePlan(registry_, req);
    ASSERT_TRUE(plan.ok());
    OnRanks(2, [&](const ProcessGroup& group) {
      auto ebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan.value(), Options(optimizer));
      ASSERT_TRUE(ebc.ok());
      std::map<std::string, TableContents> before;
      for (const auto& t : tables) before[t.name] = ebc->tables().ReadTable(t.name).value();
      CheckpointLoadRequest lr;
      lr.dir = dir_.path();
      lr.reset_optimizer = reset;
      lr.verify_before_loading = verify_first;
      auto loaded = LoadCheckpoint(ebc->tables(), lr);
      ASSERT_FALSE(loaded.ok()) << "loaded a bad checkpoint";
      EXPECT_NE(loaded.status().message().find(expect), std::string::npos) << loaded.status().ToString();
      if (!verify_first && loaded.status().message().find("nothing was loaded") == std::string::npos) {
        EXPECT_NE(loaded.status().message().find("the tables hold a mix of loaded and earlier rows"), std::string::npos)
            << loaded.status().ToString();
        return;
      }
      for (const auto& t : tables) {
        auto now = ebc->tables().ReadTable(t.name).value();
        EXPECT_EQ(MaxAbsDiff(now.weights, before[t.name].weights), 0.0f) << t.name << " changed";
      }
    });
  }

  std::string DataFile(const std::string& kind = "weights") {
    auto m = LoadCheckpointManifest(ckpt_).value();
    for (const auto& f : m.files) {
      if (f.kind == kind && f.table == "t0") return f.path;
    }
    return "";
  }

  // Flips one bit of the byte `from_end` bytes before the end of `file`.
  void FlipByte(const std::string& file, int from_end) {
    std::fstream f(ckpt_ / file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-from_end, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-from_end, std::ios::end);
    c = static_cast<char>(c ^ 0x10);
    f.write(&c, 1);
  }

  testing::TempDir dir_{"badckpt"};
  ShardingPlan plan_;
  fs::path ckpt_;
};

TEST_P(BadCheckpoint, FlippedByteIsRefusedNamingTheFile) {
  const std::string file = DataFile("adagrad.sum");
  FlipByte(file, 3);
  ExpectRefused(file + ": checksum mismatch");
}

// Checked as read: a file read whole and in order is hashed on the way
// (the same plan), one read in part is hashed after loading (column-wise
// reads a few columns of each row); either way the file is named.
TEST_P(BadCheckpoint, FlippedByteIsNamedWhenCheckedAsRead) {
  const std::string file = DataFile();
  FlipByte(file, 5);
  ExpectRefused(file + ": checksum mismatch", "adagrad", false, {}, false, "row_wise");
  ExpectRefused(file + ": checksum mismatch", "adagrad", false, {}, false, kColumnWise);
  // Damage that sizes and headers show is still refused before any change.
  fs::resize_file(ckpt_ / file, fs::file_size(ckpt_ / file) - 4);
  ExpectRefused(file + ": truncated", "adagrad", false, {}, false);
}

TEST_P(BadCheckpoint, TruncatedFileIsRefused) {
  const std::string file = DataFile();
  fs::resize_file(ckpt_ / file, fs::file_size(ckpt_ / file) - 4);
  ExpectRefused(file + ": truncated");
}

TEST_P(BadCheckpoint, MissingFileIsRefused) {
  const std::string file = DataFile();
  fs::remove(ckpt_ / file);
  ExpectRefused(file + ": missing");
}

TEST_P(BadCheckpoint, NewerFormatIsRefused) {
  auto j = nlohmann::json::parse(std::ifstream(ckpt_ / "manifest.json"));
  j["format_version"] = kCheckpointFormatVersion + 1;
  j["shardrec_version"] = "9.9.9";
  std::ofstream(ckpt_ / "manifest.json") << j.dump();
  ExpectRefused("was written by a newer shardrec (9.9.9)");
}

TEST_P(BadCheckpoint, DifferentTablesAreRefused) {
  auto tables = Tables();
  tables[1].num_embeddings = 24;
  ExpectRefused("table 't1': 24 rows, the checkpoint's has 23", "adagrad", false, tables);
  tables = Tables();
  tables[0].embedding_dim = 6;
  ExpectRefused("table 't0': dim 6, the checkpoint's has 8", "adagrad", false, tables);
  tables = Tables();
  tables[2].data_type = DataType::kFp16;
  ExpectRefused("table 't2': fp16, the checkpoint's is fp32", "adagrad", false, tables);
}

TEST_P(BadCheckpoint, OptimizerMismatchIsRefusedUnlessReset) {
  ExpectRefused("the checkpoint's optimizer is adagrad", "adam");
  // --reset-optimizer: the weights load, the state stays fresh.
  OnRanks(2, [&](const ProcessGroup& group) {
    auto ebc = ShardedEmbeddingBagCollection::Create(registry_, group, plan_, Options("adam"));
    ASSERT_TRUE(ebc.ok());
    CheckpointLoadRequest lr;
    lr.dir = dir_.path();
    lr.reset_optimizer = true;
    auto loaded = LoadCheckpoint(ebc->tables(), lr);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    EXPECT_FALSE(loaded->optimizer_state_loaded);
    const auto want = Contents(Tables(), SR_OPTIMIZER_ADAGRAD, 5);
    for (const auto& [name, c] : want) {
      auto got = ebc->tables().ReadTable(name).value();
      EXPECT_EQ(MaxAbsDiff(got.weights, c.weights), 0.0f) << name;
      for (int64_t i = 0; i < got.state.numel(); ++i) ASSERT_EQ(got.state.data<float>()[i], 0.0f) << name;
    }
  });
}

TEST_P(BadCheckpoint, APartialSaveIsNeverPicked) {
  // A save that died before publishing: a .partial directory, newer step.
  fs::create_directories(dir_.path() / ".partial.999999999-step-00000009" / "tables");
  auto resolved = ResolveCheckpoint(dir_.path());
  ASSERT_TRUE(resolved.ok());
  EXPECT_EQ(resolved.value(), ckpt_);
  // An unpublished step directory (no manifest) is not picked either.
  fs::create_directories(dir_.path() / "step-00000010");
  EXPECT_EQ(ResolveCheckpoint(dir_.path()).value(), ckpt_);
  const auto entries = ListCheckpoints(dir_.path());
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_TRUE(entries[0].published);
  // The rest by step: the partial save (9), then the unpublished directory (10).
  EXPECT_NE(entries[1].note.find("never finished"), std::string::npos) << entries[1].note;
  EXPECT_NE(entries[2].note.find("no manifest.json"), std::string::npos) << entries[2].note;
}

INSTANTIATE_TEST_SUITE_P(Comm, BadCheckpoint, ::testing::Values("local"));

}  // namespace
}  // namespace shardrec
