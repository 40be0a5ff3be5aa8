// `shardrec metrics LOGITS.npy LABELS.npy`: TorchRec's binary metrics (AUC,
// NE, log loss, calibration, accuracy; core/metrics) of any predictions,
// as the trainer computes them: a check against another tool's numbers.
#include <cmath>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "shardrec/core/metrics/binary_metrics.h"
#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec::cli {

int RunMetrics(const std::vector<std::string>& args) {
  GlobalOptions g;
  std::string logits_path, labels_path;
  bool probabilities = false;
  po::options_description desc("metrics options");
  AddGlobalOptions(desc, &g);
  desc.add_options()("logits", po::value(&logits_path), ".npy of the predictions' logits, one per sample (positional)")(
      "labels", po::value(&labels_path), ".npy of the labels, 0 or 1 (positional)")(
      "probabilities", po::bool_switch(&probabilities), "the first file holds probabilities in (0, 1), not logits");
  po::positional_options_description pos;
  pos.add("logits", 1).add("labels", 1);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("metrics", args, desc, &pos, &vm, &code,
             " LOGITS.npy LABELS.npy\n\nTorchRec's binary metrics of the predictions, as `train` computes them: "
             "AUC (exact), NE,\nlog loss, calibration, accuracy (docs/data.md#metrics).\n\n"
             "example:\n  shardrec metrics logits.npy labels.npy --json")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit_code) {
    std::cerr << "shardrec metrics: " << m << "\n";
    return exit_code;
  };
  if (logits_path.empty() || labels_path.empty()) return fail("give LOGITS.npy and LABELS.npy (see --help)", kExitUsage);
  auto logits = ReadNpy(logits_path);
  if (!logits.ok()) return fail(logits.status().message(), kExitFailure);
  auto labels = ReadNpy(labels_path);
  if (!labels.ok()) return fail(labels.status().message(), kExitFailure);
  auto l32 = ToFloat32(logits.value(), logits_path);
  auto y32 = ToFloat32(labels.value(), labels_path);
  if (!l32.ok()) return fail(l32.status().message(), kExitFailure);
  if (!y32.ok()) return fail(y32.status().message(), kExitFailure);
  if (l32->numel() != y32->numel()) {
    return fail(fmt::format("{} holds {} values, {} holds {}", logits_path, l32->numel(), labels_path, y32->numel()),
                kExitFailure);
  }
  std::vector<float> l(l32->data<float>(), l32->data<float>() + l32->numel());
  for (float y : y32->span<float>()) {
    if (y != 0.0f && y != 1.0f) return fail(labels_path + ": labels must be 0 or 1", kExitFailure);
  }
  if (probabilities) {
    for (float& p : l) {
      if (!(p > 0.0f && p < 1.0f)) return fail(logits_path + ": probabilities must be in (0, 1)", kExitFailure);
      p = std::log(p / (1.0f - p));
    }
  }
  const auto m = metrics::ComputeBinaryMetrics(l, y32->span<float>());
  if (g.json) {
    std::cout << nlohmann::json{{"samples", m.samples}, {"auc", m.auc}, {"ne", m.ne}, {"log_loss", m.log_loss},
                                {"calibration", m.calibration}, {"accuracy", m.accuracy}, {"mean_label", m.mean_label}}
                     .dump()
              << "\n";
  } else {
    std::cout << fmt::format("{} samples: AUC {:.6f}, NE {:.6f}, log loss {:.6f}, calibration {:.6f}, accuracy {:.6f}\n",
                             m.samples, m.auc, m.ne, m.log_loss, m.calibration, m.accuracy);
  }
  return kExitOk;
}

}  // namespace shardrec::cli
