// The five built-in sharders, TorchRec's sharding types:
//   table_wise      the whole table on one rank (per-call option `rank`;
//                   default: a hash of the table name)
//   row_wise        rows in blocks of ceil(rows / world) on ranks 0..N-1;
//                   the last ranks may get fewer rows or none
//   column_wise     columns in blocks (option `block_cols`; default TorchRec's:
//                   the smallest multiple of 4 in [128, D) dividing D, else D),
//                   on the ranks listed in `ranks` ("0,2,1": one per block) or
//                   on consecutive ranks from `rank` (default: hashed)
//   table_row_wise  rows split as row_wise over the ranks of one host
//                   (option `host`; default: hashed)
//   data_parallel   a whole replica on every rank
// Ids are routed by row range (the host's block bucketization) and storage
// is the host's estimate for all five: nothing here needs more.
#include <algorithm>
#include <iterator>

#include "placement.h"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::sharders {
namespace {

class TableWise {
 public:
  explicit TableWise(sdk::Options&) {}
  void ShardTable(const sr_shard_table_args& a) {
    const Request r = ReadRequest("table_wise", a);
    sdk::Options o(a.options, "sharder table_wise, table '" + r.table + "'");
    const int rank = RankOption(o, "rank", HashedChoice(r.table, r.world), r.world, "table '" + r.table + "'");
    o.Finish();
    Emit(a, {Shard(0, r.rows, 0, r.cols, rank)}, SR_PLACEMENT_GRID);
  }
};

class RowWise {
 public:
  explicit RowWise(sdk::Options&) {}
  void ShardTable(const sr_shard_table_args& a) {
    const Request r = ReadRequest("row_wise", a);
    sdk::Options o(a.options, "sharder row_wise, table '" + r.table + "'");
    o.Finish();
    Emit(a, RowShards(r, r.world, 0), SR_PLACEMENT_GRID);
  }
};

// TorchRec's default column block (`_find_base_dim(MIN_CW_DIM = 128, D)`).
int64_t DefaultColumnBlock(int64_t cols) {
  for (int64_t w = 128; w < cols; ++w) {
    if (cols % w == 0 && w % 4 == 0) return w;
  }
  return cols;
}

class ColumnWise {
 public:
  explicit ColumnWise(sdk::Options&) {}
  void ShardTable(const sr_shard_table_args& a) {
    const Request r = ReadRequest("column_wise", a);
    const std::string who = "table '" + r.table + "'";
    sdk::Options o(a.options, "sharder column_wise, " + who);
    const int64_t block = o.GetInt("block_cols", DefaultColumnBlock(r.cols));
    const int first = RankOption(o, "rank", HashedChoice(r.table, r.world), r.world, who);
    const std::vector<int> ranks = RankList(o.GetString("ranks", ""), r.world, who);
    o.Finish();
    if (block <= 0) throw sdk::InvalidArgument(who + ": block_cols must be positive, got " + std::to_string(block));
    const int64_t blocks = (r.cols + block - 1) / block;
    if (!ranks.empty() && static_cast<int64_t>(ranks.size()) != blocks) {
      throw sdk::InvalidArgument(who + ": " + std::to_string(ranks.size()) + " ranks for " + std::to_string(blocks) +
                                 " column blocks of " + std::to_string(block));
    }
    std::vector<sr_shard> shards;
    for (int64_t i = 0; i < blocks; ++i) {
      const int rank = ranks.empty() ? static_cast<int>((first + i) % r.world) : ranks[i];
      shards.push_back(Shard(0, r.rows, i * block, std::min(block, r.cols - i * block), rank));
    }
    Emit(a, shards, SR_PLACEMENT_GRID);
  }
};

class TableRowWise {
 public:
  explicit TableRowWise(sdk::Options&) {}
  void ShardTable(const sr_shard_table_args& a) {
    const Request r = ReadRequest("table_row_wise", a);
    const std::string who = "table '" + r.table + "'";
    sdk::Options o(a.options, "sharder table_row_wise, " + who);
    const int host = RankOption(o, "host", HashedChoice(r.table, r.hosts()), r.hosts(), who);
    o.Finish();
    Emit(a, RowShards(r, r.ranks_per_host, host * r.ranks_per_host), SR_PLACEMENT_GRID);
  }
};

class DataParallel {
 public:
  explicit DataParallel(sdk::Options&) {}
  void ShardTable(const sr_shard_table_args& a) {
    const Request r = ReadRequest("data_parallel", a);
    sdk::Options o(a.options, "sharder data_parallel, table '" + r.table + "'");
    o.Finish();
    std::vector<sr_shard> shards;
    for (int rank = 0; rank < r.world; ++rank) shards.push_back(Shard(0, r.rows, 0, r.cols, rank));
    Emit(a, shards, SR_PLACEMENT_REPLICATED);
  }
};

const char* const kRankOption[] = {"rank"};
const char* const kColumnOptions[] = {"block_cols", "rank", "ranks"};
const char* const kHostOption[] = {"host"};

const sr_named_value kTableWiseAttrs[] = {
    sdk::StringAttr("sharding_type", "table_wise"),
    sdk::StringListAttr("call_options", kRankOption, std::size(kRankOption)),
};
const sr_named_value kRowWiseAttrs[] = {sdk::StringAttr("sharding_type", "row_wise")};
const sr_named_value kColumnWiseAttrs[] = {
    sdk::StringAttr("sharding_type", "column_wise"),
    sdk::StringListAttr("call_options", kColumnOptions, std::size(kColumnOptions)),
};
const sr_named_value kTableRowWiseAttrs[] = {
    sdk::StringAttr("sharding_type", "table_row_wise"),
    sdk::StringListAttr("call_options", kHostOption, std::size(kHostOption)),
};
const sr_named_value kDataParallelAttrs[] = {sdk::StringAttr("sharding_type", "data_parallel")};

const sr_component kComponents[] = {
    sdk::Component(SR_KIND_SHARDER, "table_wise", "1.0", "the whole table on one rank",
                   &sdk::SharderVtable<TableWise>(), sdk::List(kTableWiseAttrs), 10),
    sdk::Component(SR_KIND_SHARDER, "row_wise", "1.0", "rows in blocks of ceil(rows / world) over every rank",
                   &sdk::SharderVtable<RowWise>(), sdk::List(kRowWiseAttrs), 5),
    sdk::Component(SR_KIND_SHARDER, "column_wise", "1.0", "column blocks on consecutive ranks",
                   &sdk::SharderVtable<ColumnWise>(), sdk::List(kColumnWiseAttrs), 5),
    sdk::Component(SR_KIND_SHARDER, "table_row_wise", "1.0", "rows split over the ranks of one host",
                   &sdk::SharderVtable<TableRowWise>(), sdk::List(kTableRowWiseAttrs), 5),
    sdk::Component(SR_KIND_SHARDER, "data_parallel", "1.0", "a replica on every rank",
                   &sdk::SharderVtable<DataParallel>(), sdk::List(kDataParallelAttrs), 5),
};

}  // namespace
}  // namespace shardrec::sharders

SHARDREC_DEFINE_PLUGIN("builtin", "1.0", shardrec::sharders::kComponents)
