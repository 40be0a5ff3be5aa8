// `shardrec embed` sharded (embed_job.h): the tables split by a plan across
// the ranks of a job, the batch split into contiguous sample ranges (rank r
// gets samples [r*B/N, (r+1)*B/N)), and rank 0 gathering the pooled output,
// the sequence rows and, after --grad, every table, so the files written
// are those of the unsharded run.
#include <algorithm>
#include <chrono>
#include <iostream>
#include <mutex>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "embed_job.h"
#include "kernel_threads.h"
#include "memory_check.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_collection.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/core/tensor/npy.h"
#include "shardrec/core/text/counted.h"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec::cli {

namespace {

namespace fs = std::filesystem;


StatusOr<ShardingPlan> PlanFor(const HostSession& session, const ProcessGroup& group, const EmbedFlags& f,
                               const std::vector<EmbeddingTableConfig>& tables, const std::optional<PlanSpec>& spec,
                               const EmbeddingModuleOptions& options) {
  PlanRequest req;
  req.tables = tables;
  req.world_size = group.world_size();
  req.ranks_per_host = group.local_world_size();
  req.default_kernel = f.kernel;
  req.sharder = f.sharder;
  req.sharder_options = session.plugin_options.ForKind("sharder");
  if (spec) {
    // The plan file's entries for this module's tables.
    PlanSpec mine;
    for (const auto& t : tables) {
      if (auto it = spec->find(t.name); it != spec->end()) mine.emplace(it->first, it->second);
    }
    req.spec = std::move(mine);
  }
  const int32_t opt = options.optimizer.optimizer;
  req.state_bytes_per_row = [opt](const EmbeddingTableConfig& t) {
    return sdk::StateDim(opt, t.embedding_dim) * static_cast<int64_t>(sizeof(float));
  };
  return MakePlan(session.registry, req);
}

// One rank's run; rank 0's EmbedOutputs are filled in.
Status EmbedRank(const ProcessGroup& group, const HostSession& session, const EmbedFlags& f,
                 const std::vector<EmbeddingTableConfig>& tables, const EmbeddingModuleOptions& options,
                 const KeyedJaggedTensor& kjt, bool has_grad, EmbedOutputs* out) {
  std::optional<PlanSpec> spec = f.planned;
  if (!f.plan.empty()) {
    SR_ASSIGN_OR_RETURN(spec, LoadPlanFile(f.plan));
    for (const auto& entry : *spec) {
      const std::string& name = entry.first;
      if (std::none_of(tables.begin(), tables.end(), [&](const auto& t) { return t.name == name; })) {
        return InvalidArgumentError(fmt::format("{}: table '{}' is not in {}", f.plan, name, f.tables));
      }
    }
  }
  std::vector<EmbeddingTableConfig> pooled, sequence;
  for (const auto& t : tables) (t.pooling == PoolingType::kNone ? sequence : pooled).push_back(t);
  const int world = group.world_size(), me = group.rank();
  const int64_t batch = kjt.stride();
  for (int64_t s : kjt.stride_per_key()) {
    if (s != batch) return InvalidArgumentError("a sharded embed needs one batch size for every feature");
  }
  auto first = [&](int r) { return batch * r / world; };
  SR_ASSIGN_OR_RETURN(KeyedJaggedTensor local, kjt.SliceSamples(first(me), first(me + 1)));
  std::vector<int64_t> batch_per_rank;
  for (int r = 0; r < world; ++r) batch_per_rank.push_back(first(r + 1) - first(r));

  std::optional<ShardedEmbeddingBagCollection> ebc;
  std::optional<ShardedEmbeddingCollection> ec;
  std::optional<ShardingPlan> pooled_plan, sequence_plan;
  int64_t bytes_here = 0;
  if (!pooled.empty()) {
    SR_ASSIGN_OR_RETURN(pooled_plan, PlanFor(session, group, f, pooled, spec, options));
    if (me == 0) spdlog::info("embed pooled tables:\n{}", FormatPlan(*pooled_plan));
    bytes_here += PlanBytesInThisProcess(*pooled_plan, group);
  }
  if (!sequence.empty()) {
    SR_ASSIGN_OR_RETURN(sequence_plan, PlanFor(session, group, f, sequence, spec, options));
    bytes_here += PlanBytesInThisProcess(*sequence_plan, group);
  }
  // Every rank decides alike (one limit, one plan) before anything is allocated.
  SR_RETURN_IF_ERROR(CheckMemory(bytes_here, f.memory_limit, "the tables and their optimizer state on this machine",
                                 "--max-memory"));
  if (pooled_plan) {
    SR_ASSIGN_OR_RETURN(auto made, ShardedEmbeddingBagCollection::Create(session.registry, group, *pooled_plan, options));
    ebc.emplace(std::move(made));
  }
  if (sequence_plan) {
    SR_ASSIGN_OR_RETURN(auto made, ShardedEmbeddingCollection::Create(session.registry, group, *sequence_plan, options));
    ec.emplace(std::move(made));
  }
  // --weights / --state: every rank reads the whole file and keeps its part.
  for (const auto& t : tables) {
    const ShardedTables& owner = t.pooling == PoolingType::kNone ? ec->tables() : ebc->tables();
    if (f.weights.empty() && f.state.empty()) break;
    TableContents c;
    if (!f.weights.empty()) {
      SR_ASSIGN_OR_RETURN(c.weights, ReadWeightsFile(f.weights, t));
    } else {
      SR_ASSIGN_OR_RETURN(TableContents now, owner.ReadTable(t.name));
      c.weights = now.weights;
    }
    if (!f.state.empty()) {
      SR_ASSIGN_OR_RETURN(auto state, ReadStateFile(f.state, t));
      if (state) c.state = *state;
    }
    SR_RETURN_IF_ERROR(owner.WriteTable(t.name, c));
  }

  if (!f.from_checkpoint.empty()) {
    for (const ShardedTables* owner : {ebc ? &ebc->tables() : nullptr, ec ? &ec->tables() : nullptr}) {
      if (owner) SR_RETURN_IF_ERROR(LoadCheckpoint(*owner, CheckpointRequestFor(f)).status());
    }
  }

  int64_t invalid = 0;
  if (ebc) {
    std::vector<std::string> keys;
    for (const auto& t : pooled) keys.insert(keys.end(), t.feature_names.begin(), t.feature_names.end());
    SR_ASSIGN_OR_RETURN(auto mine, local.Select(keys));
    int64_t dropped = 0;
    SR_ASSIGN_OR_RETURN(KeyedTensor kt, ebc->Forward(mine, &dropped));
    invalid += dropped;
    SR_ASSIGN_OR_RETURN(Tensor all, AllGatherRows(group, kt.values(), batch_per_rank));
    if (me == 0) {
      SR_ASSIGN_OR_RETURN(auto whole, KeyedTensor::Create(kt.keys(), kt.length_per_key(), std::move(all)));
      out->pooled.emplace(std::move(whole));
    }
  }
  if (ec) {
    std::vector<std::string> keys;
    for (const auto& t : sequence) keys.insert(keys.end(), t.feature_names.begin(), t.feature_names.end());
    SR_ASSIGN_OR_RETURN(auto mine, local.Select(keys));
    int64_t dropped = 0;
    SR_ASSIGN_OR_RETURN(auto rows, ec->Forward(mine, &dropped));
    invalid += dropped;
    for (const auto& key : keys) {
      const JaggedTensor& jt = rows.at(key);
      const int k = kjt.KeyIndex(key);
      // Ids of this feature per rank: its samples' lengths summed.
      std::vector<int64_t> ids_per_rank;
      for (int r = 0; r < world; ++r) {
        int64_t n = 0;
        for (int64_t b = first(r); b < first(r + 1); ++b) n += kjt.lengths()[static_cast<size_t>(kjt.BagOffset(k) + b)];
        ids_per_rank.push_back(n);
      }
      SR_ASSIGN_OR_RETURN(Tensor all, AllGatherRows(group, jt.values, ids_per_rank));
      if (me == 0) {
        JaggedTensor whole;
        whole.values = std::move(all);
        whole.lengths.assign(kjt.lengths().begin() + kjt.BagOffset(k), kjt.lengths().begin() + kjt.BagOffset(k + 1));
        out->sequence.emplace(key, std::move(whole));
      }
    }
  }
  SR_ASSIGN_OR_RETURN(auto invalid_all, [&]() -> StatusOr<Tensor> {
    Tensor sum = Tensor::Empty(dtype::kInt64, {1});
    SR_RETURN_IF_ERROR(group.AllReduce(Tensor::FromVector(std::vector<int64_t>{invalid}), &sum));
    return sum;
  }());
  out->invalid = invalid_all.data<int64_t>()[0];

  if (has_grad) {
    if (!ebc) return InvalidArgumentError("--grad is the gradient of the pooled output, but no table pools");
    SR_ASSIGN_OR_RETURN(Tensor grad, ReadNpy(f.grad));
    const int64_t width = out->pooled ? out->pooled->values().size(1) : 0;
    if (grad.ndim() != 2 || grad.size(0) != batch || (me == 0 && grad.size(1) != width)) {
      return InvalidArgumentError(fmt::format("{}: expected shape [{}, sum of dims], got {}", f.grad, batch,
                                              ShapeString(grad.shape())));
    }
    const int64_t cols = grad.size(1);
    SR_ASSIGN_OR_RETURN(Tensor g32, ToFloat32(grad, f.grad));
    Tensor mine = Tensor::Empty(dtype::kFloat32, {batch_per_rank[static_cast<size_t>(me)], cols});
    std::copy(g32.data<float>() + first(me) * cols, g32.data<float>() + first(me + 1) * cols, mine.data<float>());
    SR_RETURN_IF_ERROR(ebc->Backward(mine, f.iteration).WithContext(f.grad));
    for (const auto& t : pooled) {
      SR_ASSIGN_OR_RETURN(TableContents c, ebc->ReadTable(t.name));
      if (me == 0) out->updated.push_back({t.name, std::move(c.weights), std::move(c.state)});
    }
  }
  return Status::Ok();
}

}  // namespace

int RunShardedEmbed(const std::vector<std::string>& args, const EmbedFlags& f, const GlobalOptions& g,
                    const CommFlags& comm, const HostSession& session, const std::vector<EmbeddingTableConfig>& tables,
                    const EmbeddingModuleOptions& options, const KeyedJaggedTensor& kjt, bool has_grad) {
  const auto start = std::chrono::steady_clock::now();
  std::mutex mu;
  return RunOnRanks("embed", args, comm, session, [&](const ProcessGroup& group) {
    EmbedOutputs out;
    // This rank's kernel gets its share of the host's cores (kernel_threads.h).
    EmbeddingModuleOptions rank_options = options;
    ShareCoresAmongRanks(session.registry, f.kernel, group.local_world_size(), rank_options.kernel_options);
    if (Status s = EmbedRank(group, session, f, tables, rank_options, kjt, has_grad, &out); !s.ok()) {
      std::lock_guard<std::mutex> lock(mu);
      PrintLine(std::cerr, "shardrec embed: rank " + std::to_string(group.rank()) + ": " + s.message());
      return kExitFailure;
    }
    if (group.rank() != 0) return kExitOk;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return WriteEmbedOutputs(out, f, g, kjt, options, seconds,
                             fmt::format("sharded over {} ({}), kernel '{}'", Counted(group.world_size(), "rank"),
                                         group.backend(), f.kernel));
  });
}

}  // namespace shardrec::cli
