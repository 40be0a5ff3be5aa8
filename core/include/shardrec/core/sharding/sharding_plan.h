// Sharding plans, in the seeds' vocabulary (torchrec.distributed.types
// ParameterSharding): per table a sharding type (a sharder component), a
// compute kernel (a kernel component) and ranks, as a JSON plan file
//   {"plan": {"t0": {"sharding_type": "table_wise", "compute_kernel": "cpu", "ranks": [1]},
//             "t1": {"sharding_type": "column_wise", "ranks": [0, 1], "sharder_options": {"block_cols": "64"}},
//             "t2": {"sharding_type": "row_wise",
//                    "shards": [{"rows": [0, 50], "cols": [0, 16], "rank": 0}, ...]}}}
// or made for every table by one sharder (`--sharder NAME`), or, with
// neither, the default: every table whole on one rank, largest first onto
// the rank holding the fewest bytes (table-wise, balanced).
//
// What `ranks` means follows the seeds: table_wise the rank; column_wise
// one rank per column block; table_row_wise the first rank of the host;
// row_wise and data_parallel unused (all ranks). "shards" gives the grid
// itself instead of asking the sharder. MakePlan refuses a bad plan before
// any work, naming the table: an unknown table, sharder or kernel, a rank
// outside the world, shards that do not tile the table, a rank over its
// memory budget.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/core/cache/cache_params.h"
#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/qcomm/qcomm_config.h"
#include "shardrec/core/sharding/table_placement.h"

namespace shardrec {

struct ParameterSharding {
  std::string sharding_type;  // sharder component name
  // A kernel component's name ("" or "fused": the request's default), or
  // "fused_ssd_caching": the default kernel over a RAM cache of the rows,
  // which live on a file (docs/cache.md), as cache_params says.
  std::string compute_kernel;
  std::optional<CacheParams> cache_params;
  std::vector<int> ranks;
  std::vector<std::pair<std::string, std::string>> sharder_options;  // per-call, e.g. block_cols
  std::optional<std::vector<sr_shard>> shards;                       // an explicit grid
};

// A cached table's kernel when it uses the request's default.
inline bool IsCachedKernel(const std::string& compute_kernel) { return compute_kernel == kSsdCachingKernel; }

// Table name -> its sharding.
using PlanSpec = std::map<std::string, ParameterSharding>;

// A plan file: {"plan": {TABLE: {...}}, "qcomm_codecs": {...}}; the second
// key is optional (qcomm_config.h).
StatusOr<PlanSpec> ParsePlanJson(const std::string& json_text, const std::string& source);
StatusOr<PlanSpec> LoadPlanFile(const std::filesystem::path& path);
// The plan file's "qcomm_codecs" (empty when it has none).
StatusOr<QCommConfig> ParsePlanQComm(const std::string& json_text, const std::string& source);
StatusOr<QCommConfig> LoadPlanQComm(const std::filesystem::path& path);

struct PlanRequest {
  std::vector<EmbeddingTableConfig> tables;
  int world_size = 1;
  int ranks_per_host = 1;
  std::vector<int64_t> memory_bytes_per_rank;  // empty: unlimited
  std::string default_kernel = "cpu";
  std::optional<PlanSpec> spec;  // from a plan file
  std::string sharder;           // one sharder for every table ("" : the balanced table-wise default)
  // Component options by sharder name (`--plugin-opt sharder.NAME.KEY=VALUE`),
  // given to each sharder at create; a key it does not know is an error.
  std::map<std::string, OptionList> sharder_options;
  // Optimizer state per full row, in bytes (0: none).
  std::function<int64_t(const EmbeddingTableConfig&)> state_bytes_per_row;
  QCommConfig qcomm;  // the output dist's codecs, carried into the plan
  // Bytes of weights + optimizer state each rank keeps in RAM (0: no
  // budget). Tables that do not fit are cached (fused_ssd_caching),
  // largest first, at the largest load factor the budget allows, with
  // cache_defaults' other settings; a plan's own load factors are kept.
  int64_t memory_budget_per_rank = 0;
  CacheParams cache_defaults;
  // Per table, the overflow slots its caches get when their cache_params
  // (or cache_defaults) leave `overflow` 0: the most ids one step may send
  // the table, so that any step fits (train sizes them from each table's
  // own features). A table not named here keeps the policy's default.
  std::map<std::string, int64_t> cache_overflow;
};

struct ShardedTable {
  EmbeddingTableConfig config;
  ParameterSharding sharding;  // as planned: sharder, kernel, ranks filled in
  TablePlacement placement;
};

struct ShardingPlan {
  int world_size = 1;
  int ranks_per_host = 1;
  std::vector<ShardedTable> tables;     // in the request's table order
  std::vector<int64_t> bytes_per_rank;  // weights + optimizer state
  // The request's component options, so the sharders that route ids at run
  // time (ShardLayout) are created as the plan's were.
  std::map<std::string, OptionList> sharder_options;
  QCommConfig qcomm;  // the quantized comm codecs per comm op (empty: float32)
};

// A row-wise quantized table (int8/int4/int2) keeps its rows whole: each
// carries one scale and bias. INVALID_ARGUMENT naming the table, `sharder`
// and the shard's columns when a non-empty shard splits them.
Status CheckQuantizedRowsWhole(const EmbeddingTableConfig& table, std::span<const sr_shard> shards,
                               const std::string& sharder);

StatusOr<ShardingPlan> MakePlan(const PluginRegistry& registry, const PlanRequest& request);

// The plan as a table for people: per table its type, kernel, ranks, the
// shards (rows x cols @ rank) and then bytes per rank.
std::string FormatPlan(const ShardingPlan& plan);
// FormatPlan's lines for the tables kept larger than memory ("  cached
// t0: algorithm=lru,load_factor=0.2 (rows on file, 20% of them in RAM)"),
// one a table; "" when none is.
std::string FormatPlanCaches(const ShardingPlan& plan);

// The plan as a plan file (explicit shards included), so a run can be
// repeated exactly.
std::string PlanToJson(const ShardingPlan& plan);

}  // namespace shardrec
