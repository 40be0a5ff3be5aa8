// The five built-in sharders, through the host (PlaceTable): exact grids as
// TorchRec makes them — row blocks of ceil(rows / N) with the last ranks
// short or empty, TorchRec's default column block, table-row-wise on one
// host's ranks, replicas — per-call options, and errors that name the table.
// Also ValidatePlacement on hand-made bad grids.
#include <gtest/gtest.h>

#include <filesystem>

#include "shardrec/core/host_services.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/sharding/table_placement.h"

namespace shardrec {
namespace {

struct Cell {
  int64_t row_offset, num_rows, col_offset, num_cols;
  int rank;
  bool operator==(const Cell&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Cell& c) {
  return os << "{rows " << c.row_offset << "+" << c.num_rows << ", cols " << c.col_offset << "+" << c.num_cols
            << ", rank " << c.rank << "}";
}

sr_table_desc Table(const char* name, int64_t rows, int64_t cols) { return MakeTableDesc(name, rows, cols); }
sr_topology Topology(int world, int per_host) { return MakeTopology(world, per_host); }

class Sharders : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto path = std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_sharder_builtin.so";
    ASSERT_TRUE(registry_.LoadLibrary(path).ok()) << path;
  }
  StatusOr<TablePlacement> Place(const std::string& sharder, const sr_table_desc& t, const sr_topology& topo,
                                 const OptionList& options = {}) {
    auto ref = registry_.Find(SR_KIND_SHARDER, sharder);
    if (!ref.ok()) return ref.status();
    auto s = Sharder::Create(ref.value(), {});
    if (!s.ok()) return s.status();
    return PlaceTable(s.value(), t, topo, options);
  }
  std::vector<Cell> Cells(const std::string& sharder, const sr_table_desc& t, const sr_topology& topo,
                          const OptionList& options = {}) {
    auto p = Place(sharder, t, topo, options);
    EXPECT_TRUE(p.ok()) << p.status().ToString();
    std::vector<Cell> out;
    if (p.ok()) {
      for (const sr_shard& s : p->shards) out.push_back({s.row_offset, s.num_rows, s.col_offset, s.num_cols, s.rank});
    }
    return out;
  }
  HostServices services_;
  PluginRegistry registry_{&services_};
};

TEST_F(Sharders, RowWiseBlocksAreCeilOfRowsOverRanks) {
  EXPECT_EQ(Cells("row_wise", Table("t", 10, 4), Topology(4, 4)),
            (std::vector<Cell>{{0, 3, 0, 4, 0}, {3, 3, 0, 4, 1}, {6, 3, 0, 4, 2}, {9, 1, 0, 4, 3}}));
  // ceil(5 / 4) = 2: the last rank gets nothing.
  EXPECT_EQ(Cells("row_wise", Table("t", 5, 4), Topology(4, 2)),
            (std::vector<Cell>{{0, 2, 0, 4, 0}, {2, 2, 0, 4, 1}, {4, 1, 0, 4, 2}, {5, 0, 0, 4, 3}}));
  // Fewer rows than ranks.
  EXPECT_EQ(Cells("row_wise", Table("t", 2, 8), Topology(4, 4)),
            (std::vector<Cell>{{0, 1, 0, 8, 0}, {1, 1, 0, 8, 1}, {2, 0, 0, 8, 2}, {2, 0, 0, 8, 3}}));
  EXPECT_EQ(Cells("row_wise", Table("t", 7, 3), Topology(1, 1)), (std::vector<Cell>{{0, 7, 0, 3, 0}}));
}

TEST_F(Sharders, TableWiseGoesToTheNamedRankOrAStableHashedOne) {
  EXPECT_EQ(Cells("table_wise", Table("t", 10, 4), Topology(3, 3), {{"rank", "2"}}),
            (std::vector<Cell>{{0, 10, 0, 4, 2}}));
  const auto a = Cells("table_wise", Table("user_id", 10, 4), Topology(7, 7));
  const auto b = Cells("table_wise", Table("user_id", 10, 4), Topology(7, 7));
  ASSERT_EQ(a.size(), 1u);
  EXPECT_EQ(a, b) << "every rank and every run must agree";
  EXPECT_GE(a[0].rank, 0);
  EXPECT_LT(a[0].rank, 7);
}

TEST_F(Sharders, ColumnWiseUsesTorchRecsDefaultBlockOrTheOption) {
  // D <= 128: one block (the whole table).
  EXPECT_EQ(Cells("column_wise", Table("t", 6, 64), Topology(2, 2), {{"rank", "1"}}),
            (std::vector<Cell>{{0, 6, 0, 64, 1}}));
  // D = 512: the smallest multiple of 4 in [128, 512) dividing 512 is 128.
  EXPECT_EQ(Cells("column_wise", Table("t", 6, 512), Topology(3, 3), {{"rank", "1"}}),
            (std::vector<Cell>{{0, 6, 0, 128, 1}, {0, 6, 128, 128, 2}, {0, 6, 256, 128, 0}, {0, 6, 384, 128, 1}}));
  // D = 260: 130 divides it but is not a multiple of 4, so one block.
  EXPECT_EQ(Cells("column_wise", Table("t", 6, 260), Topology(2, 2), {{"rank", "0"}}).size(), 1u);
  // An explicit block; the last block is short.
  EXPECT_EQ(Cells("column_wise", Table("t", 4, 8), Topology(2, 2), {{"block_cols", "3"}, {"rank", "0"}}),
            (std::vector<Cell>{{0, 4, 0, 3, 0}, {0, 4, 3, 3, 1}, {0, 4, 6, 2, 0}}));
}

TEST_F(Sharders, TableRowWiseSplitsRowsOverOneHostsRanks) {
  EXPECT_EQ(Cells("table_row_wise", Table("t", 5, 2), Topology(4, 2), {{"host", "1"}}),
            (std::vector<Cell>{{0, 3, 0, 2, 2}, {3, 2, 0, 2, 3}}));
  const auto hashed = Cells("table_row_wise", Table("t", 5, 2), Topology(6, 3));
  ASSERT_EQ(hashed.size(), 3u);
  EXPECT_EQ(hashed[0].rank % 3, 0) << "a host's first rank";
}

TEST_F(Sharders, DataParallelReplicatesOnEveryRank) {
  auto p = Place("data_parallel", Table("t", 5, 2), Topology(3, 3));
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_TRUE(p->replicated);
  ASSERT_EQ(p->shards.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(p->shards[r].rank, r);
    EXPECT_EQ(p->shards[r].num_rows, 5);
    EXPECT_EQ(p->shards[r].num_cols, 2);
  }
}

TEST_F(Sharders, BadOptionsAndTopologiesNameTheTable) {
  auto far = Place("table_wise", Table("clicks", 5, 2), Topology(2, 2), {{"rank", "2"}});
  ASSERT_FALSE(far.ok());
  EXPECT_NE(far.status().message().find("table 'clicks'"), std::string::npos) << far.status().message();
  EXPECT_NE(far.status().message().find("rank 2 is outside [0, 2)"), std::string::npos) << far.status().message();

  auto typo = Place("row_wise", Table("clicks", 5, 2), Topology(2, 2), {{"rnak", "1"}});
  ASSERT_FALSE(typo.ok());
  EXPECT_NE(typo.status().message().find("rnak"), std::string::npos) << typo.status().message();

  auto uneven = Place("table_row_wise", Table("clicks", 5, 2), Topology(3, 2));
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.status().message().find("equal numbers"), std::string::npos) << uneven.status().message();

  auto zero = Place("column_wise", Table("clicks", 5, 2), Topology(2, 2), {{"block_cols", "0"}});
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("block_cols must be positive"), std::string::npos);
}

TEST(ValidatePlacement, FindsGapsOverlapsAndStrayRanks) {
  const sr_table_desc t = Table("t", 10, 4);
  const sr_topology topo = Topology(2, 2);
  auto shard = [](int64_t ro, int64_t nr, int64_t co, int64_t nc, int rank) {
    sr_shard s{};
    s.struct_size = SR_STRUCT_SIZE(sr_shard, rank);
    s.row_offset = ro;
    s.num_rows = nr;
    s.col_offset = co;
    s.num_cols = nc;
    s.rank = rank;
    return s;
  };
  EXPECT_EQ(ValidatePlacement({{shard(0, 5, 0, 4, 0), shard(5, 5, 0, 4, 1)}, false}, t, topo), "");
  EXPECT_NE(ValidatePlacement({{shard(0, 5, 0, 4, 0), shard(6, 4, 0, 4, 1)}, false}, t, topo)
                .find("rows [5, 6) x cols [0, 4) are owned by 0 shards"),
            std::string::npos);
  EXPECT_NE(ValidatePlacement({{shard(0, 6, 0, 4, 0), shard(5, 5, 0, 4, 1)}, false}, t, topo)
                .find("owned by 2 shards"),
            std::string::npos);
  EXPECT_NE(ValidatePlacement({{shard(0, 10, 0, 4, 2)}, false}, t, topo).find("outside the world of 2"),
            std::string::npos);
  EXPECT_NE(ValidatePlacement({{shard(0, 10, 0, 5, 0)}, false}, t, topo).find("falls outside"), std::string::npos);
  EXPECT_NE(ValidatePlacement({{shard(0, 5, 0, 4, 0)}, true}, t, topo).find("not the whole table"),
            std::string::npos);
}

}  // namespace
}  // namespace shardrec
