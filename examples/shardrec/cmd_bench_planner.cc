// `shardrec bench planner` (docs/planner.md, docs/benchmarks.md):
//   speed     plans --tables-count synthetic tables (a few huge, some hot,
//             many small) for --world-size ranks on --hosts hosts, --reps
//             times, and prints the time against the 1 s the issue allows;
//   --train   plans a skewed workload on this machine for each --comm and
//             --world-sizes, trains it with the planner's plan, the balanced
//             table-wise default and every single-sharder plan (each a
//             `shardrec train --json` child, --reps interleaved rounds),
//             with the topology measured for each comm and world size
//             (`bench topology`) unless --topology is given, and prints estimated beside
//             measured step times, the planner's speed-up over each, the
//             correlation of estimate and measurement over the plans, the
//             model's bound, and verdicts against the rounds' spread and
//             paired by round.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "child_process.h"
#include "cli.h"
#include "commands.h"
#include "planner_inputs.h"
#include "shardrec/core/modules/optimizer_spec.h"
#include "train_data.h"

namespace shardrec::cli {

namespace {

// The one-sided sign test: the chance of `wins` or more of `rounds` paired
// rounds if neither plan were faster (each round a fair coin). On a VM
// whose speed drifts by 20% within the hour, "faster in every round" calls
// a steady 5% gap a tie; this says how unlikely the wins are by chance.
// A tied round counts as a loss (the textbook test drops ties): never
// kinder to the planner.
double SignTestP(int wins, int rounds) {
  // C(rounds, i) / 2^rounds, in logs: no overflow.
  const double log_all = std::lgamma(rounds + 1.0) - rounds * std::log(2.0);
  double p = 0;
  for (int i = std::max(wins, 0); i <= rounds; ++i) {
    p += std::exp(log_all - std::lgamma(i + 1.0) - std::lgamma(rounds - i + 1.0));
  }
  return std::min(p, 1.0);
}

double Pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const double n = static_cast<double>(x.size());
  if (x.size() < 2) return std::nan("");
  double mx = 0, my = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    mx += x[i] / n;
    my += y[i] / n;
  }
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  return sxx > 0 && syy > 0 ? sxy / std::sqrt(sxx * syy) : std::nan("");
}

// The speed benchmark's tables: 1 % huge, 4 % medium, the rest small, with
// a few hot (many ids per sample) among them.
std::vector<EmbeddingTableConfig> ManyTables(int count) {
  std::vector<EmbeddingTableConfig> out;
  for (int i = 0; i < count; ++i) {
    EmbeddingTableConfig t;
    t.name = "t" + std::to_string(i);
    t.feature_names = {"f" + std::to_string(i)};
    if (i % 100 == 0) {
      t.num_embeddings = 50'000'000;
      t.embedding_dim = 128;
    } else if (i % 25 == 0) {
      t.num_embeddings = 2'000'000;
      t.embedding_dim = 64;
    } else {
      t.num_embeddings = 10'000 + (i * 7919) % 200'000;
      t.embedding_dim = 16 << (i % 3);
    }
    out.push_back(t);
  }
  return out;
}

struct Measured {
  double samples_per_s = 0;
  std::string error;
};

// One `shardrec train --json` child's steady step rate.
Measured TrainChild(const std::vector<std::string>& words) {
  Measured m;
  auto rate = TrainChildSamplesPerSecond(words);
  if (rate.ok()) {
    m.samples_per_s = rate.value();
  } else {
    m.error = rate.status().message();
  }
  return m;
}

// A comma-separated list of positive integers (--world-sizes).
StatusOr<std::vector<int>> PositiveInts(const std::string& text, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  for (std::string item; std::getline(ss, item, ',');) {
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || item.empty() || v < 1) {
      return InvalidArgumentError(flag + ": '" + item + "' is not a positive integer");
    }
    out.push_back(v);
  }
  if (out.empty()) return InvalidArgumentError(flag + " is empty");
  return out;
}

}  // namespace

int RunBenchPlanner(const std::vector<std::string>& args) {
  GlobalOptions g;
  PlannerFlags pf;
  int count = 1000, world = 64, reps = 3, steps = 200;
  bool train = false;
  std::string comms = "local,gloo", worlds = "2,4";
  // One huge table, two large ones, three hot, many small: byte-balanced
  // table-wise piles the hot ones onto the ranks without the huge one, and
  // three hot tables do not split evenly over 2 or 4 ranks whole.
  std::string skew_tables = "1x2000000x64,2x500000x32,3x20000x32,24x5000x16", skew_ids = "zipf:1.05";
  std::string skew_pooling = "1,1,1,40,40,40,2";
  int64_t batch = 512;
  po::options_description desc("bench planner options");
  AddGlobalOptions(desc, &g);
  AddPlannerOptions(desc, &pf);
  desc.add_options()
      ("tables-count", po::value(&count)->default_value(count), "speed: tables to plan")
      ("world-size", po::value(&world)->default_value(world), "speed: ranks to plan for")
      ("reps", po::value(&reps)->default_value(reps),
       "speed: plans made (best and median reported); --train: rounds, each training every plan once (median)")
      ("train", po::bool_switch(&train), "train the skewed workload under each plan instead")
      ("comms", po::value(&comms)->default_value(comms), "--train: comm backends, comma-separated")
      ("world-sizes", po::value(&worlds)->default_value(worlds), "--train: world sizes, comma-separated")
      ("skew-tables", po::value(&skew_tables)->default_value(skew_tables),
       "--train: the tables (a few huge, a few hot, many small)")
      ("skew-pooling", po::value(&skew_pooling)->default_value(skew_pooling),
       "--train: ids per sample per table, the last repeated for the rest")
      ("skew-ids", po::value(&skew_ids)->default_value(skew_ids), "--train: id distribution")
      ("steps", po::value(&steps)->default_value(steps), "--train: steps per run")
      ("batch", po::value(&batch)->default_value(batch), "samples per rank per step");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("bench planner", args, desc, nullptr, &vm, &code,
             "\n\nexamples:\n"
             "  shardrec bench planner                       # 1000 tables x 64 ranks on 8 hosts\n"
             "  shardrec bench planner --hosts 8 --tables-count 1000 --world-size 64\n"
             "  shardrec bench planner --train                # plans trained side by side, topology measured\n"
             "  shardrec bench planner --train --comms gloo --world-sizes 2 --topology topo.json")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit = kExitUsage) {
    std::cerr << "shardrec bench planner: " << m << "\n";
    return exit;
  };
  if (count < 1 || world < 1 || reps < 1 || steps < 1 || batch < 1) return fail("counts must be positive");
  HostSession session;
  if (!OpenSession("bench planner", g, {SR_KIND_SHARDER, SR_KIND_KERNEL}, &session)) return kExitUsage;
  const auto adagrad = OptimizerSpec::Parse("adagrad,lr=0.05");
  const int32_t opt = adagrad->optimizer;
  const auto state = StateBytesPerRow(opt);

  if (!train) {
    PlannerRequest req;
    req.tables = ManyTables(count);
    req.batch_per_rank = batch;
    if (Status st = FillPlannerRequest(pf, world, 0, &req); !st.ok()) return fail(st.message());
    req.state_bytes_per_row = state;
    req.sharder_options = session.plugin_options.ForKind("sharder");
    // Traffic: 1 to 20 ids per sample, every tenth table hot (60).
    for (size_t t = 0; t < req.tables.size(); ++t) {
      TableWorkload w;
      w.pooling_factor = t % 10 == 3 ? 60 : 1 + static_cast<double>(t % 20);
      req.workload.push_back(w);
    }
    std::vector<double> seconds;
    PlannerResult last;
    for (int i = 0; i < reps; ++i) {
      auto r = RunPlanner(session.registry, req);
      if (!r.ok()) return fail(r.status().message(), kExitFailure);
      seconds.push_back(r->plan_seconds);
      last = std::move(r).value();
    }
    std::sort(seconds.begin(), seconds.end());
    const double median = seconds[seconds.size() / 2];
    if (g.json) {
      std::cout << nlohmann::json{{"tables", count}, {"world_size", world}, {"hosts", pf.hosts},
                                  {"seconds_best", seconds.front()}, {"seconds_median", median}, {"limit_s", 1.0},
                                  {"options_evaluated", last.options_evaluated},
                                  {"improvement_moves", last.improvement_moves},
                                  {"estimated_step_s", last.step_seconds}}
                       .dump()
                << "\n";
    } else {
      std::cout << fmt::format("planned {} tables for {} ranks on {} hosts: {:.3f} s median, {:.3f} s best of {}; "
                               "limit 1 s: {:.2f} of it ({} options scored, {} improvement moves, estimated step {:.3f} ms)\n",
                               count, world, pf.hosts, median, seconds.front(), reps, median, last.options_evaluated,
                               last.improvement_moves, last.step_seconds * 1e3);
    }
    return kExitOk;
  }

  // --train: the skewed workload under every plan, measured.
  auto tables = TablesFromFileOrSpec(skew_tables);
  if (!tables.ok()) return fail("--skew-tables: " + tables.status().message());
  auto pooling = ParsePoolingFactors(skew_pooling);
  if (!pooling.ok()) return fail(pooling.status().message());
  while (pooling->size() < tables->size()) pooling->push_back(pooling->back());
  std::string pooling_text;
  for (double p : pooling.value()) pooling_text += (pooling_text.empty() ? "" : ",") + fmt::format("{}", p);
  auto synthetic = SyntheticData::Create(tables.value(), skew_ids, pooling.value(), 0);
  if (!synthetic.ok()) return fail(synthetic.status().message());
  auto world_list_or = PositiveInts(worlds, "--world-sizes");
  if (!world_list_or.ok()) return fail(world_list_or.status().message());
  const std::vector<int> world_list = world_list_or.value();
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / fmt::format("shardrec-bench-planner-{}", ::getpid());
  std::filesystem::create_directories(dir);
  struct RemoveAtExit {
    std::filesystem::path dir;
    ~RemoveAtExit() {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    }
  } remove_at_exit{dir};
  std::vector<double> all_est, all_meas;
  nlohmann::json rows = nlohmann::json::array(), verdicts = nlohmann::json::array(), bounds = nlohmann::json::array();
  for (const std::string& comm : [&] {
         std::vector<std::string> v;
         std::stringstream ss(comms);
         for (std::string item; std::getline(ss, item, ',');) v.push_back(item);
         return v;
       }()) {
    for (const int n : world_list) {
      PlannerRequest req;
      req.tables = tables.value();
      req.batch_per_rank = batch;
      PlannerFlags flags = pf;
      flags.hosts = 1;
      if (flags.topology.empty()) {
        // Calibrated here: this comm and world size, measured now.
        flags.topology = (dir / fmt::format("topology-{}-{}.json", comm, n)).string();
        std::cout << fmt::format("measuring the topology: shardrec bench topology --comm {} --world-size {}\n", comm, n)
                  << std::flush;
        const auto [out, status] = RunChild({"bench", "topology", "--comm", comm, "--world-size", std::to_string(n),
                                             "-o", flags.topology});
        if (status != 0) return fail("bench topology failed: " + OutputTail(out), kExitFailure);
      }
      if (Status st = FillPlannerRequest(flags, n, 0, &req); !st.ok()) return fail(st.message());
      auto workload = PlannerWorkload(flags, req.tables, &synthetic.value(), batch);
      if (!workload.ok()) return fail(workload.status().message());
      req.workload = workload.value();
      req.state_bytes_per_row = state;
      req.kernels = UsableKernels(session.registry, req.topology, opt);
      auto planned = RunPlanner(session.registry, req);
      if (!planned.ok()) return fail(planned.status().message(), kExitFailure);
      const PlanRequest base = PlanRequestFor(req);
      std::vector<std::pair<std::string, PlanRequest>> plans;
      PlanRequest p = base;
      p.spec = planned->spec;
      plans.emplace_back("planner", p);
      p = base;
      plans.emplace_back("balanced table_wise", p);
      for (const ComponentRef& ref : session.registry.Components(SR_KIND_SHARDER)) {
        p = base;
        p.sharder = ref.name();
        plans.emplace_back(ref.name(), p);
      }
      std::cout << fmt::format("{} x {} ranks, {} steps of {} per rank ({} ids, ids per sample {}):\n", comm, n, steps,
                               batch, skew_ids, pooling_text)
                << std::flush;
      // Every plan's file and estimate first; then --reps rounds, each
      // training every plan once, so a slow spell of the machine falls on
      // all plans alike; each plan's median rate counts.
      struct Run {
        std::string name;
        std::filesystem::path file;
        double estimated_step = std::nan("");
        std::vector<double> rates;
        std::vector<double> by_round;  // rates in round order (rates gets sorted)
        std::string error;
      };
      std::vector<Run> runs;
      for (const auto& [name, request] : plans) {
        auto plan = MakePlan(session.registry, request);
        if (!plan.ok()) {
          std::cout << fmt::format("  {:<20} cannot run: {}\n", name, plan.status().message());
          continue;
        }
        Run r;
        r.name = name;
        r.file = dir / (std::to_string(runs.size()) + ".json");
        auto estimate = EstimatePlan(session.registry, req, plan.value());
        if (estimate.ok()) r.estimated_step = estimate->step_seconds;
        std::ofstream(r.file) << PlanToJson(plan.value()) << "\n";
        runs.push_back(std::move(r));
      }
      for (int round = 0; round < reps; ++round) {
        // Each round starts one plan later: no plan always runs first, just
        // after the last round's biggest allocations were handed back.
        for (size_t i = 0; i < runs.size(); ++i) {
          Run& r = runs[(i + static_cast<size_t>(round)) % runs.size()];
          if (!r.error.empty()) continue;
          const Measured m = TrainChild({"train", "--comm", comm, "--world-size", std::to_string(n), "--tables",
                                         skew_tables, "--pooling-factor", pooling_text, "--ids", skew_ids, "--steps",
                                         std::to_string(steps), "--batch", std::to_string(batch), "--plan",
                                         r.file.string(), "--json"});
          if (m.error.empty()) {
            r.rates.push_back(m.samples_per_s);
          } else {
            r.error = m.error;
          }
        }
      }
      std::vector<double> est, meas;
      double planner_rate = 0;
      for (Run& r : runs) {
        if (!r.error.empty() || r.rates.empty()) {
          std::cout << fmt::format("  {:<20} failed: {}\n", r.name, r.error);
          continue;
        }
        r.by_round = r.rates;
        std::sort(r.rates.begin(), r.rates.end());
        const double rate = r.rates[r.rates.size() / 2];
        if (r.name == "planner") planner_rate = rate;
        const double measured_step = static_cast<double>(batch * n) / rate;
        std::cout << fmt::format("  {:<20} measured {:>9.0f} samples/s (median of {}, {:.0f}-{:.0f}), step {:>8.3f} ms | "
                                 "estimated step {:>8.3f} ms | planner / this {:.2f}\n",
                                 r.name, rate, r.rates.size(), r.rates.front(), r.rates.back(), measured_step * 1e3,
                                 r.estimated_step * 1e3, planner_rate > 0 ? planner_rate / rate : std::nan(""))
                  << std::flush;
        if (std::isfinite(r.estimated_step)) {
          est.push_back(r.estimated_step);
          meas.push_back(measured_step);
          all_est.push_back(r.estimated_step);
          all_meas.push_back(measured_step);
        }
        rows.push_back({{"comm", comm}, {"world_size", n}, {"plan", r.name}, {"samples_per_s", rate},
                        {"samples_per_s_all", r.rates}, {"measured_step_s", measured_step},
                        {"estimated_step_s", r.estimated_step}});
      }
      std::cout << fmt::format("  correlation of estimated and measured step over {} plans: {:.3f}\n", est.size(),
                               Pearson(est, meas));
      // How much room the model leaves: no plan of these options can be
      // estimated below the bound, so a plan estimated within a few percent
      // of it can only be beaten by what the model leaves out.
      if (planned->bound_seconds > 0) {
        std::cout << fmt::format("  the model's bound: no plan estimated below {:.3f} ms ({}); the planner's plan "
                                 "{:.1f}% above it\n",
                                 planned->bound_seconds * 1e3, planned->bound_reason,
                                 (planned->step_seconds / planned->bound_seconds - 1) * 100);
      }
      bounds.push_back({{"comm", comm}, {"world_size", n}, {"bound_step_s", planned->bound_seconds},
                        {"planner_estimated_step_s", planned->step_seconds}, {"reason", planned->bound_reason}});
      // The verdict, against the rounds' spread: a win only when every
      // round of the planner beat every round of the other plan.
      const auto planner_run = std::find_if(runs.begin(), runs.end(), [](const Run& r) { return r.name == "planner"; });
      if (planner_run != runs.end() && planner_run->error.empty() && !planner_run->rates.empty()) {
        int faster = 0, slower = 0, within = 0;
        std::string ties, losses;
        for (const Run& r : runs) {
          if (&r == &*planner_run || !r.error.empty() || r.rates.empty()) continue;
          if (planner_run->rates.front() > r.rates.back()) {
            ++faster;
          } else if (planner_run->rates.back() < r.rates.front()) {
            ++slower;
            losses += (losses.empty() ? "" : ", ") + r.name;
          } else {
            ++within;
            ties += (ties.empty() ? "" : ", ") + r.name;
          }
        }
        std::cout << fmt::format("  planner against the {} other plans: faster in every round than {}, within the "
                                 "rounds' spread of {}{}, slower in every round than {}{}\n",
                                 faster + within + slower, faster, within, ties.empty() ? "" : " (" + ties + ")", slower,
                                 losses.empty() ? "" : " (" + losses + ")");
        // Paired by round: each round trains every plan once, a few seconds
        // apart, so the planner against a plan in the same round sees the
        // same spell of the machine. The verdict above needs the planner's
        // worst round to beat the other's best, which on a VM that drifts
        // by 20% within the hour hides any gap smaller than the drift.
        int paired_faster = 0, significant = 0;
        std::string paired_not;
        nlohmann::json paired = nlohmann::json::array();
        for (const Run& r : runs) {
          if (&r == &*planner_run || !r.error.empty() || r.by_round.empty()) continue;
          const size_t k = std::min(r.by_round.size(), planner_run->by_round.size());
          if (k == 0) continue;
          std::vector<double> ratio;
          int wins = 0;
          for (size_t i = 0; i < k; ++i) {
            ratio.push_back(planner_run->by_round[i] / r.by_round[i]);
            wins += ratio.back() > 1 ? 1 : 0;
          }
          std::sort(ratio.begin(), ratio.end());
          const bool every = wins == static_cast<int>(k);
          const double chance = SignTestP(wins, static_cast<int>(k));
          paired_faster += every ? 1 : 0;
          significant += chance < 0.05 ? 1 : 0;
          if (!every) {
            paired_not += fmt::format("{}{} ({} of {} rounds, planner / this {:.2f}-{:.2f}, sign test p = {:.3f})",
                                      paired_not.empty() ? "" : ", ", r.name, wins, k, ratio.front(), ratio.back(), chance);
          }
          paired.push_back({{"plan", r.name}, {"rounds", k}, {"planner_faster", wins},
                            {"ratio_min", ratio.front()}, {"ratio_max", ratio.back()}, {"sign_test_p", chance}});
        }
        std::cout << fmt::format("  paired by round: faster than {} of the {} in every round{}\n", paired_faster,
                                 paired.size(), paired_not.empty() ? "" : "; not in every round: " + paired_not);
        // Five rounds won of five is p = 0.031: fewer rounds can never show it.
        std::cout << fmt::format("  by the sign test over the rounds (one-sided p < 0.05): faster than {} of the {}{}\n",
                                 significant, paired.size(),
                                 significant < static_cast<int>(paired.size())
                                     ? " (pool runs with scripts/planner_sign_test.py)" : "");
        verdicts.push_back({{"comm", comm}, {"world_size", n}, {"faster", faster}, {"within_spread", within},
                            {"slower", slower}, {"paired_faster_every_round", paired_faster},
                            {"paired_faster_by_sign_test", significant}, {"paired", paired}});
      }
    }
  }
  std::cout << fmt::format("correlation over all {} runs: {:.3f}\n", all_est.size(), Pearson(all_est, all_meas));
  if (g.json) {
    std::cout << nlohmann::json{{"runs", rows}, {"verdicts", verdicts}, {"bounds", bounds}, {"correlation", Pearson(all_est, all_meas)}}.dump()
              << "\n";
  }
  return kExitOk;
}

}  // namespace shardrec::cli
