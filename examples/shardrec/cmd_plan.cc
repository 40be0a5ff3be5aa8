// `shardrec plan`: the planner from the command line (docs/planner.md).
// Plans tables for a world of ranks on a topology, prints the plan with
// its estimates per table and per rank (and with --explain why), writes a
// plan file `train --plan` and `embed --plan` replay, and with --compare
// estimates the balanced table-wise default and every single-sharder plan
// beside it.
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "planner_inputs.h"
#include "shardrec/core/modules/optimizer_spec.h"
#include "shardrec/core/tensor/npy.h"
#include "shardrec/core/text/byte_size.h"
#include "train_cache.h"
#include "train_data.h"

namespace shardrec::cli {

namespace {

struct PlanFlags {
  std::string tables = "4x100000x64,2x20000x16", ids = "uniform", pooling = "8", optimizer = "adagrad,lr=0.05";
  std::string memory_per_rank, output;
  CacheFlags cache;  // --memory-budget, --cache-params (docs/cache.md)
  std::vector<std::string> kernels, sharders;
  int world_size = 2;
  int64_t batch = 512;
  bool explain = false, compare = false;
};

}  // namespace

int RunPlan(const std::vector<std::string>& args) {
  GlobalOptions g;
  PlanFlags f;
  PlannerFlags pf;
  po::options_description desc("plan options");
  AddGlobalOptions(desc, &g);
  desc.add_options()
      ("tables", po::value(&f.tables)->default_value(f.tables),
       "a tables JSON file, or a spec: comma-separated [COUNTx]ROWSxDIM[:sum|mean] (as train)")
      ("world-size", po::value(&f.world_size)->default_value(f.world_size), "ranks to plan for")
      ("batch", po::value(&f.batch)->default_value(f.batch), "samples per rank per step")
      ("pooling-factor", po::value(&f.pooling)->default_value(f.pooling),
       "mean ids per bag: one value, or one per feature (as train)")
      ("ids", po::value(&f.ids)->default_value(f.ids), "id distribution: uniform, or zipf:ALPHA (as train)")
      ("optimizer", po::value(&f.optimizer)->default_value(f.optimizer),
       "the fused optimizer the tables train with: its state counts in the memory, its speed in the topology")
      ("memory-per-rank", po::value(&f.memory_per_rank),
       "bytes of weights + optimizer state each rank may hold (e.g. 8GiB); default: the topology's, else unlimited. "
       "A plan over it is refused; --memory-budget instead keeps the tables over it larger than memory")
      ("kernel", po::value(&f.kernels)->composing(),
       "a kernel the planner may choose (repeatable; default: every kernel the topology has a speed for)")
      ("sharder", po::value(&f.sharders)->composing(),
       "a sharder the planner may choose (repeatable; default: every sharder plugin found)");
  AddCacheOptions(desc, f.cache, /*with_dir=*/false);
  AddPlannerOptions(desc, &pf);
  desc.add_options()
      ("output,o", po::value(&f.output), "write the plan file here (explicit shards: train --plan replays it)")
      ("explain", po::bool_switch(&f.explain), "say why each table got its choice and what each alternative would cost")
      ("compare", po::bool_switch(&f.compare),
       "also estimate the balanced table-wise default and every single-sharder plan, side by side");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("plan", args, desc, nullptr, &vm, &code,
             "\n\nChooses per table a sharder, a compute kernel and ranks among what the plugins found\n"
             "offer, keeping the slowest rank's estimated step time lowest within each rank's memory.\n"
             "The estimate models each rank's kernel time (the topology's measured speeds) and the\n"
             "bytes it sends and receives in the input and output dists (the topology's links), with\n"
             "the traffic of each table: ids per sample and their skew over the rows.\n\n"
             "examples:\n"
             "  shardrec bench topology -o topo.json            # measure this machine first\n"
             "  shardrec plan --tables tables.json --world-size 8 --hosts 2 --topology topo.json -o plan.json\n"
             "  shardrec plan --tables 2x2000000x64,20x1000x16 --ids zipf:1.1 --explain --compare\n"
             "  shardrec train --plan plan.json --world-size 8   # run it; or: shardrec train --planner\n"
             "  shardrec plan --tables 1x32000000x64 --memory-budget 2GiB -o plan.json   # an 8 GiB table, cached")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit = kExitUsage) {
    std::cerr << "shardrec plan: " << m << "\n";
    return exit;
  };
  if (f.world_size < 1) return fail("--world-size must be >= 1");
  if (f.batch < 1) return fail("--batch must be >= 1");
  auto tables = TablesFromFileOrSpec(f.tables);
  if (!tables.ok()) return fail("--tables: " + tables.status().message());
  auto pooling = ParsePoolingFactors(f.pooling);
  if (!pooling.ok()) return fail(pooling.status().message());
  auto optimizer = OptimizerSpec::Parse(f.optimizer);
  if (!optimizer.ok()) return fail("--optimizer: " + optimizer.status().message());
  if (Status st = ParseCacheFlags(f.cache); !st.ok()) return fail(st.message());
  if (f.cache.budget_bytes > 0 && !f.memory_per_rank.empty()) {
    return fail("give --memory-budget (tables over it are cached) or --memory-per-rank (a plan over it is refused), "
                "not both");
  }
  int64_t memory = 0;
  if (!f.memory_per_rank.empty()) {
    auto bytes = ParseByteSize(f.memory_per_rank);
    if (!bytes.ok()) return fail("--memory-per-rank: " + bytes.status().message());
    memory = bytes.value();
  }
  auto synthetic = SyntheticData::Create(tables.value(), f.ids, pooling.value(), 0);
  if (!synthetic.ok()) return fail(synthetic.status().message());

  HostSession session;
  PluginKinds kinds = {SR_KIND_SHARDER, SR_KIND_KERNEL};
  if (f.cache.budget_bytes > 0) kinds.push_back(SR_KIND_EVICTION);  // the caches' policies
  if (!OpenSession("plan", g, kinds, &session)) return kExitUsage;
  PlannerRequest req;
  req.tables = tables.value();
  req.batch_per_rank = f.batch;
  if (Status st = FillPlannerRequest(pf, f.world_size, memory, &req); !st.ok()) return fail(st.message());
  auto workload = PlannerWorkload(pf, req.tables, &synthetic.value(), f.batch);
  if (!workload.ok()) return fail(workload.status().message());
  req.workload = std::move(workload).value();
  req.kernels = f.kernels;
  req.sharders = f.sharders;
  req.sharder_options = session.plugin_options.ForKind("sharder");
  const int32_t opt = optimizer->optimizer;
  req.state_bytes_per_row = StateBytesPerRow(opt);
  PlanUnderMemoryBudget(session.registry, f.cache.budget_bytes, &req);
  for (const std::string& k : f.kernels) {
    if (Status st = CheckKernelsUsable(session.registry, {k}, opt); !st.ok()) return fail("--kernel: " + st.message());
  }
  auto result = RunPlanner(session.registry, req);
  if (!result.ok()) return fail(result.status().message(), kExitFailure);
  // The plan made concrete (and checked) as train would make it.
  PlanRequest plan_req = PlanRequestFor(req);
  plan_req.spec = result->spec;
  // --memory-budget: the tables over it become cached (fused_ssd_caching),
  // each cache's overflow sized to hold a whole step, as train sizes it.
  ApplyCacheFlags(f.cache, StepIdsBound(f.world_size, f.batch, req.tables, pooling.value(), false), plan_req);
  auto plan = MakePlan(session.registry, plan_req);
  if (!plan.ok()) return fail("the planner's plan does not check: " + plan.status().message(), kExitFailure);
  if (!f.output.empty()) {
    // Staged and renamed: a reader sees the old plan or the new, never half.
    const Status written = WriteFileAtomically(
        f.output, [&](std::ostream& os) { os << PlanToJson(plan.value()) << "\n"; }, std::ios::out);
    if (!written.ok()) return fail("-o: " + written.message(), kExitFailure);
  }

  // --compare: the other plans a user could have run, under the same model.
  struct Row {
    std::string name;
    double step = 0;
    std::string error;
  };
  std::vector<Row> rows{{"planner", result->step_seconds, ""}};
  if (f.compare) {
    std::vector<std::string> names{""};
    for (const ComponentRef& ref : session.registry.Components(SR_KIND_SHARDER)) names.push_back(ref.name());
    for (const std::string& name : names) {
      PlanRequest alt = plan_req;
      alt.spec.reset();
      alt.sharder = name;
      auto p = MakePlan(session.registry, alt);
      Row row{name.empty() ? "balanced table_wise (the default)" : name, 0, ""};
      if (!p.ok()) {
        row.error = p.status().message();
      } else if (auto e = EstimatePlan(session.registry, req, p.value()); e.ok()) {
        row.step = e->step_seconds;
      } else {
        row.error = e.status().message();
      }
      rows.push_back(row);
    }
  }
  const double global_batch = static_cast<double>(f.batch) * f.world_size;
  if (g.json) {
    nlohmann::json j = {{"world_size", f.world_size}, {"hosts", pf.hosts}, {"batch_per_rank", f.batch},
                        {"estimated_step_s", result->step_seconds}, {"bound_step_s", result->bound_seconds},
                        {"bound_reason", result->bound_reason}, {"plan_seconds", result->plan_seconds},
                        {"options_evaluated", result->options_evaluated}, {"improvement_moves", result->improvement_moves},
                        {"notes", result->notes}, {"plan", nlohmann::json::parse(PlanToJson(plan.value()))}};
    j["ranks"] = nlohmann::json::array();
    for (const RankEstimate& r : result->ranks) {
      j["ranks"].push_back({{"compute_s", r.compute_s}, {"comm_s", r.comm_s}, {"latency_s", r.latency_s},
                            {"bytes", r.bytes}, {"budget", r.budget}});
    }
    if (f.compare) {
      for (const Row& r : rows) {
        j["compare"].push_back(r.error.empty() ? nlohmann::json{{"plan", r.name}, {"estimated_step_s", r.step}}
                                               : nlohmann::json{{"plan", r.name}, {"error", r.error}});
      }
    }
    std::cout << j.dump() << "\n";
    return kExitOk;
  }
  std::cout << FormatPlannerResult(result.value(), req, f.explain);
  if (PlanCachesTables(plan.value())) {
    std::cout << fmt::format("kept larger than memory under --memory-budget {} a rank (the estimate above counts their "
                             "lookups as in RAM; a cache's misses cost more: shardrec bench cache):\n",
                             FormatByteSize(f.cache.budget_bytes))
              << FormatPlanCaches(plan.value()) << "  in RAM per rank, the caches' slots and directories counted:";
    for (size_t r = 0; r < plan->bytes_per_rank.size(); ++r) {
      std::cout << fmt::format(" [{}] {}", r, FormatByteSize(plan->bytes_per_rank[r]));
    }
    std::cout << "\n";
  }
  if (f.compare) {
    std::cout << "estimated, the same model for every plan:\n";
    for (const Row& r : rows) {
      if (!r.error.empty()) {
        std::cout << fmt::format("  {:<36} cannot run: {}\n", r.name, r.error);
      } else {
        std::cout << fmt::format("  {:<36} step {:>9.3f} ms  {:>10.0f} samples/s  {:>5.2f}x the planner's step\n", r.name,
                                 r.step * 1e3, global_batch / r.step, r.step / result->step_seconds);
      }
    }
  }
  if (!f.output.empty()) std::cout << "plan file: " << f.output << "\n";
  return kExitOk;
}

}  // namespace shardrec::cli
