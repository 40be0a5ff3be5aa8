// The main job (`shardrec` with no arguments, or `shardrec demo`): a small
// DLRM learns a planted click log. `shardrec datagen` writes the log once
// into a cache directory; `shardrec train --data` trains one epoch on it
// with held-out passes, and the run ends by comparing the held-out AUC with
// what the planted model itself scores there (docs/data.md).
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "train_click_log.h"

namespace shardrec::cli {

namespace {

namespace fs = std::filesystem;

// $XDG_CACHE_HOME/shardrec, else ~/.cache/shardrec, else the temp directory's.
fs::path CacheDir() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') return fs::path(x) / "shardrec";
  if (const char* h = std::getenv("HOME"); h != nullptr && *h != '\0') return fs::path(h) / ".cache" / "shardrec";
  return fs::temp_directory_path() / "shardrec-cache";
}

// The last held-out AUC in a metrics CSV, or NaN.
double LastEvalAuc(const fs::path& csv) {
  std::ifstream in(csv);
  std::string line;
  double auc = std::nan("");
  while (std::getline(in, line)) {
    if (line.rfind("eval,", 0) != 0) continue;
    // split,step,samples,epoch,loss,auc,...
    size_t at = 0;
    for (int field = 0; field < 5 && at != std::string::npos; ++field) at = line.find(',', at + 1);
    if (at != std::string::npos) auc = std::atof(line.c_str() + at + 1);
  }
  return auc;
}

}  // namespace

int RunDemo(const std::vector<std::string>& args) {
  GlobalOptions g;
  std::string dir;
  int64_t samples = 2000000;
  int world = 2;
  po::options_description desc("demo options");
  AddGlobalOptions(desc, &g);
  desc.add_options()("dir", po::value(&dir), "where the click log is written once and reused (default: "
                                             "$XDG_CACHE_HOME/shardrec/planted-clicks-N, else ~/.cache/...)")(
      "samples", po::value(&samples)->default_value(samples), "training samples (the held-out set is a tenth)")(
      "world-size", po::value(&world)->default_value(world), "ranks, as threads");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("demo", args, desc, nullptr, &vm, &code,
             "\n\nThe main job (also `shardrec` with no arguments): writes a click log drawn from a planted\n"
             "model (once; `shardrec datagen`), trains a small DLRM on it for one epoch on 2 ranks as threads\n"
             "(`shardrec train --data`), evaluates it on held-out samples as it goes, and compares its AUC with\n"
             "the planted model's own. About a minute on a 2-core machine.")) {
    return code;
  }
  if (samples < 10000 || samples > 1000000000) {
    std::cerr << "shardrec demo: --samples must be in [10000, 1e9]\n";
    return kExitUsage;
  }
  if (world < 1 || world > 64) {
    std::cerr << "shardrec demo: --world-size must be in [1, 64]\n";
    return kExitUsage;
  }
  const fs::path root = dir.empty() ? CacheDir() / fmt::format("planted-clicks-{}", samples) : fs::path(dir);
  std::error_code ec;
  std::cout << "shardrec: the main job: a small DLRM learns a planted click log, " << world
            << " rank(s) as threads (`shardrec demo --help`)\n";
  if (!fs::exists(root / "planted.json", ec)) {
    // Written beside, then renamed: an interrupted run leaves no half log.
    // A --dir of the user's is never emptied: only the cache's own
    // leftovers are removed.
    const fs::path partial = root.string() + ".partial";
    if (!dir.empty() && ((fs::exists(root, ec) && !fs::is_empty(root, ec)) || fs::exists(partial, ec))) {
      std::cerr << "shardrec demo: --dir " << root.string() << " holds something other than a finished click log (or "
                << partial.string() << " exists); give a new directory\n";
      return kExitFailure;
    }
    fs::remove_all(partial, ec);
    fs::create_directories(root.parent_path(), ec);
    std::cout << "writing the click log to " << root.string() << " (once)\n" << std::flush;
    const int rc = RunDatagen({partial.string(), "--train-samples", std::to_string(samples), "--eval-samples",
                               std::to_string(samples / 10)});
    if (rc != kExitOk) return rc;
    fs::remove_all(root, ec);
    fs::rename(partial, root, ec);
    if (ec) {
      std::cerr << "shardrec demo: cannot rename " << partial.string() << " to " << root.string() << ": "
                << ec.message() << "\n";
      return kExitFailure;
    }
  } else {
    std::cout << "reusing the click log in " << root.string() << "\n";
  }
  const double planted = PlantedAuc("criteo:" + (root / "eval").string());
  const fs::path model = root / "dlrm-small.json", csv = root / "last-run-metrics.csv",
                 png = root / "last-run-curve.png";
  {
    std::ofstream out(model);
    out << R"({"model": "dlrm", "dense_in_features": 13, "dense_arch_layer_sizes": [64, 16],)"
        << R"( "over_arch_layer_sizes": [64, 32, 1]})" << "\n";
    if (!out) {
      std::cerr << "shardrec demo: cannot write " << model.string() << "\n";
      return kExitFailure;
    }
  }
  // Four held-out passes along the epoch (the last one at its end).
  const int64_t steps = samples / (world * 512);
  const int64_t steps_per_eval = std::max<int64_t>(1, (steps + 3) / 4);
  std::vector<std::string> train = {"--model", model.string(), "--tables", "26x20000x16", "--data",
                                    "criteo:" + (root / "train").string(), "--eval-data",
                                    "criteo:" + (root / "eval").string(), "--epochs", "1", "--batch", "512",
                                    "--world-size", std::to_string(world), "--eval-every", std::to_string(steps_per_eval),
                                    "--metrics-out", csv.string()};
  const int rc = RunTrain(train);
  if (rc != kExitOk) return rc;
  const double got = LastEvalAuc(csv);
  std::cout << fmt::format("learned: held-out AUC {:.4f} = {:.3f} x the planted model's own {:.4f} (no model beats it "
                           "on average)\ncurve: {}\n",
                           got, got / planted, planted, csv.string());
  if (Status st = PlotMetrics(csv.string(), png.string(), planted, "shardrec demo: a small DLRM on a planted click log");
      st.ok()) {
    std::cout << "plot: " << png.string() << "\n";
  } else {
    std::cout << "(no plot: " << st.message() << ")\n";
  }
  return kExitOk;
}

}  // namespace shardrec::cli
