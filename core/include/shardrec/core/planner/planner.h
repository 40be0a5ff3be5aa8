// The sharding planner (docs/planner.md): for every table it enumerates the
// options the plugins found at run time offer (each sharder's placement,
// each kernel the topology has a speed for, and where on the ranks the
// placement may go), estimates each one's bytes (the sharder's
// estimate_storage, else the host's) and step time (CostModel, with the
// sharder's estimate_cost lookup shares when it has one), and partitions:
// tables by decreasing cost, each to the option that keeps the slowest
// rank's estimated step lowest within the memory budgets, then local
// improvement (re-placing the tables of the slowest rank) until no move
// helps. It explains each choice and refuses an infeasible problem with the
// smallest reason.
//
// Deterministic: the same request gives the same plan on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/planner/cost_model.h"
#include "shardrec/core/planner/planner_constraints.h"
#include "shardrec/core/planner/planner_topology.h"
#include "shardrec/core/planner/table_workload.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/sharding/sharding_plan.h"

namespace shardrec {

struct PlannerRequest {
  std::vector<EmbeddingTableConfig> tables;
  std::vector<TableWorkload> workload;  // per table; empty: 1 id per feature, uniform rows
  int64_t batch_per_rank = 512;
  int world_size = 1;
  int ranks_per_host = 0;  // 0: the topology's, else every rank on one host
  PlannerTopology topology = DefaultTopology();
  std::vector<int64_t> memory_bytes_per_rank;  // empty: the topology's (0 there: unlimited)
  PlannerConstraints constraints;
  // Kernels the run can use (found, supporting the optimizer, with a device);
  // empty: every kernel of the topology that the registry has.
  std::vector<std::string> kernels;
  // Sharders to consider; empty: every sharder found.
  std::vector<std::string> sharders;
  std::map<std::string, OptionList> sharder_options;  // component options by sharder
  std::function<int64_t(const EmbeddingTableConfig&)> state_bytes_per_row;
  QCommConfig qcomm;  // carried into the plan
};

// One rank's estimated step.
struct RankEstimate {
  double compute_s = 0, comm_s = 0, latency_s = 0;
  double total_s() const { return compute_s + comm_s + latency_s; }
  int64_t bytes = 0, budget = 0;  // budget 0: unlimited
};

struct TableChoice {
  ParameterSharding sharding;         // explicit shards: the plan file replays it
  double seconds = 0;                 // the table's own step time, on its busiest rank
  std::vector<double> seconds_per_rank;  // this table's share of each rank's step (world entries)
  std::vector<int64_t> bytes_per_rank;
  std::vector<std::string> why;       // --explain: the choice, then each alternative
};

struct PlannerResult {
  std::vector<TableChoice> tables;  // in the request's order
  std::vector<RankEstimate> ranks;
  double step_seconds = 0;          // the slowest rank's estimate
  // No placement of the tables' options (constraints honoured, memory
  // budgets not counted) can be estimated below this (the planner's runs; 0
  // from EstimatePlan): every table's least total work spread evenly over
  // the ranks (or the hosts' cores, when ranks share them), or the busiest
  // rank of the table whose least is largest, whichever is more, plus the
  // least collective latency a plan can pay. step_seconds / bound_seconds -
  // 1 is the most any plan of those options could gain under the model.
  double bound_seconds = 0;
  std::string bound_reason;         // which of the two set it
  double plan_seconds = 0;          // wall time the planner took
  int improvement_moves = 0;
  int64_t options_evaluated = 0;
  std::vector<std::string> notes;   // what the plan rests on (topology source, measured stats)
  PlanSpec spec;                    // for MakePlan
};

StatusOr<PlannerResult> RunPlanner(const PluginRegistry& registry, const PlannerRequest& request);

// The cost model's estimate of an existing plan (made by hand, by one
// sharder or by the planner) under the same request: the per-rank figures
// and step time (tables' `why` empty).
StatusOr<PlannerResult> EstimatePlan(const PluginRegistry& registry, const PlannerRequest& request,
                                     const ShardingPlan& plan);

// The plan as a table for people: per table type, kernel, ranks, estimated
// ms and bytes on its busiest rank; per rank the estimate split, bytes and
// a bar; with `explain`, why each table got its choice.
std::string FormatPlannerResult(const PlannerResult& result, const PlannerRequest& request, bool explain);

}  // namespace shardrec
