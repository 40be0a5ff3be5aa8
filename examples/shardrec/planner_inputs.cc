// The planner's flags and traffic (planner_inputs.h).
#include "planner_inputs.h"

#include <filesystem>

#include <fmt/format.h>

#include "shardrec/core/data/click_log_reader.h"
#include "shardrec/core/io/batch_dir.h"
#include "shardrec/sdk/optimizer.hpp"
#include "train_click_log.h"

namespace shardrec::cli {

void AddPlannerOptions(po::options_description& desc, PlannerFlags* f, bool with_hosts) {
  desc.add_options()
      ("topology", po::value(&f->topology),
       "the machines to plan for, a JSON file from `shardrec bench topology -o FILE` or written by hand "
       "(docs/planner.md); default: built-in figures of a 2-core machine")
      ("constraints", po::value(&f->constraints),
       "per-table constraints, a JSON file: {\"constraints\": {TABLE: {\"sharding_types\": [...], "
       "\"compute_kernels\": [...], \"ranks\": [...], \"sharder_options\": {...}}}}")
      ("stats-from", po::value(&f->stats_from),
       "measure ids per sample and id skew per feature from data: criteo:PATH (a click log, as --data), or a "
       "directory of batches as `embed --batch` reads them (default: the run's synthetic --ids and --pooling-factor)")
      ("stats-samples", po::value(&f->stats_samples)->default_value(f->stats_samples),
       "samples --stats-from reads (or the synthetic batches sampled)");
  if (with_hosts) {
    desc.add_options()("hosts", po::value(&f->hosts)->default_value(f->hosts),
                       "hosts the ranks are spread over, equal numbers each (the topology's inter-host link joins them)");
  }
}

std::vector<std::string> UsableKernels(const PluginRegistry& registry, const PlannerTopology& topology, int32_t optimizer) {
  std::vector<std::string> out;
  for (const auto& [name, cost] : topology.kernels) {
    if (CheckKernelsUsable(registry, {name}, optimizer).ok()) out.push_back(name);
  }
  return out;
}

StatusOr<std::vector<double>> ParsePoolingFactors(const std::string& text) {
  std::vector<double> out;
  for (size_t start = 0; start <= text.size();) {
    const size_t end = std::min(text.find(',', start), text.size());
    try {
      size_t used = 0;
      const std::string item = text.substr(start, end - start);
      out.push_back(std::stod(item, &used));
      if (used != item.size() || !(out.back() >= 0)) throw std::invalid_argument(item);
    } catch (...) {
      return InvalidArgumentError("--pooling-factor '" + text + "': expected numbers >= 0 separated by commas");
    }
    start = end + 1;
  }
  return out;
}

namespace {

StatusOr<std::vector<KeyedJaggedTensor>> ClickLogBatches(const std::string& spec_text,
                                                         const std::vector<EmbeddingTableConfig>& tables,
                                                         int64_t samples) {
  SR_ASSIGN_OR_RETURN(data::ClickLogSpec spec, data::ClickLogSpec::Parse(spec_text));
  data::ClickLogOptions o;
  o.batch = std::min<int64_t>(samples, 4096);
  o.prefetch = 0;
  SR_RETURN_IF_ERROR(ClickLogFeatures(tables, &o.features, &o.num_embeddings));
  SR_ASSIGN_OR_RETURN(auto reader, data::ClickLogReader::Open(spec, o));
  std::vector<KeyedJaggedTensor> out;
  int64_t read = 0;
  while (read < samples) {
    SR_ASSIGN_OR_RETURN(auto batch, reader->Next());
    if (!batch) break;
    read += batch->sparse.stride();
    out.push_back(std::move(batch->sparse));
  }
  if (out.empty()) return InvalidArgumentError("--stats-from " + spec_text + ": holds no samples");
  return out;
}

}  // namespace

StatusOr<std::vector<TableWorkload>> PlannerWorkload(const PlannerFlags& f, const std::vector<EmbeddingTableConfig>& tables,
                                                     const SyntheticData* synthetic, int64_t batch_per_rank) {
  if (f.stats_samples < 1) return InvalidArgumentError("--stats-samples must be >= 1");
  std::vector<KeyedJaggedTensor> batches;
  if (!f.stats_from.empty()) {
    if (f.stats_from.rfind("criteo:", 0) == 0) {
      SR_ASSIGN_OR_RETURN(batches, ClickLogBatches(f.stats_from, tables, f.stats_samples));
    } else {
      std::error_code ec;
      if (!std::filesystem::is_directory(f.stats_from, ec)) {
        return InvalidArgumentError("--stats-from " + f.stats_from + ": neither criteo:PATH nor a directory of batches");
      }
      auto kjt = ReadKjtDir(f.stats_from);
      if (!kjt.ok()) return kjt.status().WithContext("--stats-from");
      batches.push_back(std::move(kjt).value());
    }
  } else if (synthetic) {
    const int64_t per = std::min<int64_t>(batch_per_rank, f.stats_samples);
    for (int64_t step = 0, taken = 0; taken < f.stats_samples; ++step, taken += per) {
      batches.push_back(synthetic->Samples(step, 0, per));
    }
  }
  return MeasureWorkload(tables, batches, 1);
}

std::function<int64_t(const EmbeddingTableConfig&)> StateBytesPerRow(int32_t optimizer) {
  return [optimizer](const EmbeddingTableConfig& t) {
    return sdk::StateDim(optimizer, t.embedding_dim) * static_cast<int64_t>(sizeof(float));
  };
}

PlanRequest PlanRequestFor(const PlannerRequest& req) {
  PlanRequest p;
  p.tables = req.tables;
  p.world_size = req.world_size;
  p.ranks_per_host = req.ranks_per_host;
  p.memory_bytes_per_rank = req.memory_bytes_per_rank;
  p.sharder_options = req.sharder_options;
  p.state_bytes_per_row = req.state_bytes_per_row;
  return p;
}

void PlanUnderMemoryBudget(const PluginRegistry& registry, int64_t budget_per_rank, PlannerRequest* req) {
  if (budget_per_rank <= 0) return;
  req->topology.memory_bytes_per_rank = 0;
  req->memory_bytes_per_rank.clear();
  for (const EmbeddingTableConfig& t : req->tables) {
    const int64_t row_bytes = t.embedding_dim * static_cast<int64_t>(DTypeSize(ToDLDataType(t.data_type))) +
                              (req->state_bytes_per_row ? req->state_bytes_per_row(t) : 0);
    if (t.num_embeddings * row_bytes <= budget_per_rank) continue;
    std::vector<std::string>& allowed = req->constraints[t.name].sharding_types;
    if (allowed.empty()) {
      for (const ComponentRef& ref : registry.Components(SR_KIND_SHARDER)) allowed.push_back(ref.name());
    }
    // (A table the constraints allow only data_parallel keeps it: the plan
    // then says it does not fit.)
    if (allowed != std::vector<std::string>{"data_parallel"}) std::erase(allowed, std::string("data_parallel"));
  }
}

Status FillPlannerRequest(const PlannerFlags& f, int world_size, int64_t memory_per_rank, PlannerRequest* req) {
  if (f.hosts < 1 || world_size % f.hosts != 0) {
    return InvalidArgumentError(fmt::format("--hosts {}: the {} ranks must split into equal hosts", f.hosts, world_size));
  }
  req->world_size = world_size;
  req->ranks_per_host = world_size / f.hosts;
  if (!f.topology.empty()) {
    SR_ASSIGN_OR_RETURN(req->topology, LoadTopologyFile(f.topology));
  }
  if (!f.constraints.empty()) {
    SR_ASSIGN_OR_RETURN(req->constraints, LoadConstraintsFile(f.constraints));
  }
  if (memory_per_rank > 0) req->memory_bytes_per_rank.assign(static_cast<size_t>(world_size), memory_per_rank);
  return Status::Ok();
}

}  // namespace shardrec::cli
