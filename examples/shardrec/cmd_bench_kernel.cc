// `shardrec bench kernel`: a kernel plugin's forward and backward + fused
// optimizer against a random-row-gather probe in the same process
// (core/bench/kernel_bench.h). Ratios, not absolute numbers, are what
// survive a noisy machine; docs/benchmarks.md records them.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "kernel_bench.h"
#include "kernel_threads.h"
#include "shardrec/abi/kernel.h"
#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/modules/optimizer_spec.h"

namespace shardrec::cli {

int RunBenchKernel(const std::vector<std::string>& args) {
  GlobalOptions g;
  bench::KernelBenchConfig c;
  std::string kernel_name = "cpu", ids = "uniform", dtype = "fp32", optimizer = "rowwise_adagrad", quantized;
  po::options_description desc("bench kernel options");
  AddGlobalOptions(desc, &g);
  desc.add_options()
      ("kernel", po::value(&kernel_name)->default_value("cpu"), "compute-kernel plugin to measure")
      ("rows", po::value(&c.rows)->default_value(c.rows), "table rows")
      ("dim", po::value(&c.dim)->default_value(c.dim), "embedding dim")
      ("batch", po::value(&c.batch)->default_value(c.batch), "bags per call")
      ("pooling", po::value(&c.pooling)->default_value(c.pooling), "ids per bag")
      ("ids", po::value(&ids)->default_value(ids), "id distribution: uniform or zipf:ALPHA (e.g. zipf:1.05)")
      ("dtype", po::value(&dtype)->default_value(dtype), "weights: fp32, fp16 or bf16")
      ("optimizer", po::value(&optimizer)->default_value(optimizer),
       "fused optimizer for the backward: none (forward only), sgd, adagrad, rowwise_adagrad, adam "
       "[,lr=...,eps=...]")
      ("threads", po::value(&c.threads)->default_value(0), "threads for the probe and the kernel (0: all cores)")
      ("weighted", po::bool_switch(&c.weighted), "per-id weights")
      ("quantized", po::value(&quantized),
       "also time the forward over the same table quantized row-wise, e.g. int8,int4,int2 (inference "
       "tables; the ratio is to the --dtype forward)")
      ("min-time", DoubleValue(&c.min_time), "seconds per measurement")
      ("reps", po::value(&c.reps)->default_value(c.reps), "measurements (best and median are reported)");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("bench kernel", args, desc, nullptr, &vm, &code,
             "\n\nTimes a kernel plugin's pooled forward and its backward fused with the optimizer on one\n"
             "table against the machine's own limit, measured in the same run: for a CPU kernel a plain\n"
             "random-row gather of a table of the same shape with the same ids and threads (2 MiB pages,\n"
             "software prefetch); for a GPU kernel (--kernel cuda) a device-to-device copy, with the\n"
             "batches uploaded to the GPU once. Prints lookups/s, GB/s of row bytes, forward / probe and\n"
             "backward / probe (in lookups/s).\n\n"
             "  shardrec bench kernel --kernel cuda --rows 1000000 --dim 128 --batch 16384 --pooling 20\n"
             "  shardrec bench kernel --optimizer none --quantized int8,int4   # quantized vs fp32 forward")) {
    return code;
  }
  auto fail = [](const std::string& m) {
    std::cerr << "shardrec bench kernel: " << m << "\n";
    return kExitFailure;
  };
  if (c.rows <= 0 || c.dim <= 0 || c.batch <= 0 || c.pooling <= 0 || c.reps <= 0 || c.min_time <= 0) {
    std::cerr << "shardrec bench kernel: --rows, --dim, --batch, --pooling, --reps and --min-time must be positive\n";
    return kExitUsage;
  }
  auto dist = bench::IdDistribution::Parse(ids);
  if (!dist.ok()) return fail(dist.status().message());
  c.ids = dist.value();
  auto data_type = ParseDataType(dtype);
  if (!data_type.ok()) return fail("--dtype: " + data_type.status().message());
  c.dtype = ToDLDataType(data_type.value());
  auto spec = OptimizerSpec::Parse(optimizer);
  if (!spec.ok()) return fail("--optimizer: " + spec.status().message());
  c.optimizer = spec->optimizer;
  c.optimizer_params = spec->params;
  if (!quantized.empty()) {
    std::stringstream list(quantized);
    for (std::string item; std::getline(list, item, ',');) {
      if (item == "int8") {
        c.quantized.push_back(SR_ROW_QUANT_INT8);
      } else if (item == "int4") {
        c.quantized.push_back(SR_ROW_QUANT_INT4);
      } else if (item == "int2") {
        c.quantized.push_back(SR_ROW_QUANT_INT2);
      } else {
        std::cerr << "shardrec bench kernel: --quantized: unknown '" << item << "' (expected int8, int4, int2)\n";
        return kExitUsage;
      }
    }
  }

  HostSession session;
  if (!OpenSession("bench kernel", g, {SR_KIND_KERNEL}, &session)) return kExitUsage;
  auto ref = session.registry.Find(SR_KIND_KERNEL, kernel_name);
  if (!ref.ok()) return fail(ref.status().message());
  if (Status st = CheckKernelsUsable(session.registry, {kernel_name}, c.optimizer); !st.ok()) {
    return fail(st.message());
  }
  c.kernel_options = session.plugin_options.For("kernel", kernel_name);
  if (!UserThreads(c.kernel_options) && DeclaresOption(ref.value(), "threads")) {
    c.kernel_options.Set("threads", std::to_string(c.threads));
  }
  const int threads = c.threads > 0 ? c.threads : HostCores();

  auto result = bench::RunKernelBench(ref.value(), c, [&](const std::string& line) {
    if (!g.json) std::fprintf(stderr, "[bench kernel] %s\n", line.c_str());
  });
  if (!result.ok()) return fail(result.status().message());
  const auto& r = result.value();
  const double gb = r.row_bytes / 1e9;
  const double fwd_ratio = r.forward.best / r.probe.best;
  const double bwd_ratio = r.has_backward ? r.backward.best / r.probe.best : 0.0;
  if (g.json) {
    nlohmann::json j{{"kernel", kernel_name},
                     {"rows", c.rows},
                     {"dim", c.dim},
                     {"batch", c.batch},
                     {"pooling", c.pooling},
                     {"ids", c.ids.ToString()},
                     {"dtype", dtype},
                     {"optimizer", spec->ToString()},
                     {"threads", threads},
                     {"weighted", c.weighted},
                     {"probe", r.probe_name},
                     {"probe_mlookups_per_s", {{"best", r.probe.best / 1e6}, {"median", r.probe.median / 1e6}}},
                     {"probe_gb_per_s", r.probe.best * gb},
                     {"forward_mlookups_per_s", {{"best", r.forward.best / 1e6}, {"median", r.forward.median / 1e6}}},
                     {"forward_gb_per_s", r.forward.best * gb},
                     {"forward_over_probe", fwd_ratio},
                     {"table_init_seconds", r.init_seconds}};
    if (r.has_backward) {
      j["backward_mlookups_per_s"] = {{"best", r.backward.best / 1e6}, {"median", r.backward.median / 1e6}};
      j["backward_gb_per_s"] = r.backward.best * gb;
      j["backward_over_probe"] = bwd_ratio;
    }
    for (const auto& q : r.quantized) {
      j["quantized"][q.name] = {{"forward_mlookups_per_s", {{"best", q.forward.best / 1e6}, {"median", q.forward.median / 1e6}}},
                                {"row_bytes", q.row_bytes},
                                {"forward_gb_per_s", q.forward.best * q.row_bytes / 1e9},
                                {"over_forward", q.forward.best / r.forward.best}};
    }
    std::cout << j.dump() << "\n";
  } else {
    std::printf("kernel '%s', %lld x %lld %s, batch %lld x %lld ids (%s), %d thread(s)%s\n", kernel_name.c_str(),
                static_cast<long long>(c.rows), static_cast<long long>(c.dim), dtype.c_str(),
                static_cast<long long>(c.batch), static_cast<long long>(c.pooling), c.ids.ToString().c_str(), threads,
                c.weighted ? ", weighted" : "");
    std::printf("%-28s %12s %12s %10s %10s\n", "", "Mlookups/s", "(median)", "GB/s", "/ probe");
    std::printf("%-28s %12.2f %12.2f %10.2f %10s\n", r.probe_name.c_str(), r.probe.best / 1e6,
                r.probe.median / 1e6, r.probe.best * gb, "1.00");
    std::printf("%-28s %12.2f %12.2f %10.2f %10.2f\n", "forward", r.forward.best / 1e6, r.forward.median / 1e6,
                r.forward.best * gb, fwd_ratio);
    if (r.has_backward) {
      std::printf("%-28s %12.2f %12.2f %10.2f %10.2f\n", ("backward + " + spec->ToString()).c_str(),
                  r.backward.best / 1e6, r.backward.median / 1e6, r.backward.best * gb, bwd_ratio);
    }
    for (const auto& q : r.quantized) {
      std::printf("%-28s %12.2f %12.2f %10.2f %10s  (%.2fx the %s forward, %.0f-byte rows)\n",
                  ("forward " + q.name).c_str(), q.forward.best / 1e6, q.forward.median / 1e6,
                  q.forward.best * q.row_bytes / 1e9, "", q.forward.best / r.forward.best, dtype.c_str(), q.row_bytes);
    }
    std::printf("(table creation and init took %.2f s)\n", r.init_seconds);
  }
  return kExitOk;
}

}  // namespace shardrec::cli
