// What `plan`, `train --planner`, `embed --planner` and `bench planner`
// share: the planner's flags (--topology, --constraints, --stats-from,
// --hosts) and the traffic it plans for: measured from the data named by
// --stats-from (a click log, or a directory of batches as `embed` reads
// them), or sampled from the run's own synthetic batches.
#pragma once

#include <string>
#include <vector>

#include "cli.h"
#include "shardrec/core/planner/planner.h"
#include "train_data.h"

namespace shardrec::cli {

struct PlannerFlags {
  std::string topology, constraints, stats_from;
  int64_t stats_samples = 65536;
  int hosts = 1;
};

// `with_hosts`: also --hosts (plan, bench; a run knows its hosts).
void AddPlannerOptions(po::options_description& desc, PlannerFlags* flags, bool with_hosts = true);
// The kernels of the topology this run can use with `optimizer`.
std::vector<std::string> UsableKernels(const PluginRegistry& registry, const PlannerTopology& topology, int32_t optimizer);

// --pooling-factor's text: one number, or one per feature.
StatusOr<std::vector<double>> ParsePoolingFactors(const std::string& text);

// Ids per sample and row histograms per table, from --stats-from when given,
// else from `synthetic`'s first batches (about --stats-samples samples).
StatusOr<std::vector<TableWorkload>> PlannerWorkload(const PlannerFlags& flags,
                                                     const std::vector<EmbeddingTableConfig>& tables,
                                                     const SyntheticData* synthetic, int64_t batch_per_rank);

// The request's topology, constraints, hosts and memory from the flags;
// the caller fills tables, workload, batch, world, kernels and optimizer.
Status FillPlannerRequest(const PlannerFlags& flags, int world_size, int64_t memory_per_rank, PlannerRequest* req);

// Optimizer state bytes per full row, for PlanRequest/PlannerRequest.
std::function<int64_t(const EmbeddingTableConfig&)> StateBytesPerRow(int32_t optimizer);

// The PlanRequest that makes `req`'s tables concrete (MakePlan) on its
// world, hosts and budgets; `spec` empty: the caller chooses.
PlanRequest PlanRequestFor(const PlannerRequest& req);
// Under --memory-budget the caches keep each rank within the budget, so
// the planner places tables as if memory were unlimited (a topology's
// memory per rank too), but a table larger than the budget may not be
// data_parallel (a replica on every rank cannot be cached). Call after
// FillPlannerRequest, with state_bytes_per_row set.
void PlanUnderMemoryBudget(const PluginRegistry& registry, int64_t budget_per_rank, PlannerRequest* req);

}  // namespace shardrec::cli
