// `shardrec plot METRICS.csv -o curve.png`: the learning curve of a
// `train --metrics-out` run, drawn by matplotlib (train_click_log.h).
#include <cmath>
#include <iostream>

#include "cli.h"
#include "commands.h"
#include "train_click_log.h"

namespace shardrec::cli {

int RunPlot(const std::vector<std::string>& args) {
  GlobalOptions g;
  std::string csv, png, title;
  double reference = std::nan("");
  po::options_description desc("plot options");
  AddGlobalOptions(desc, &g);
  desc.add_options()("csv", po::value(&csv), "a `train --metrics-out` CSV (positional)")(
      "out,o", po::value(&png), "the PNG to write")(
      "reference-auc", DoubleValue(&reference), "draw this AUC as a dashed line (e.g. the planted model's)")(
      "title", po::value(&title), "the figure's title (default: the CSV's path)");
  po::positional_options_description pos;
  pos.add("csv", 1);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("plot", args, desc, &pos, &vm, &code,
             " METRICS.csv -o curve.png\n\nDraws loss and AUC against samples trained: the windowed training metric "
             "and the held-out\npasses of a `shardrec train --metrics-out` run (needs python3-matplotlib).\n\n"
             "example:\n"
             "  shardrec plot metrics.csv -o curve.png --reference-auc 0.78")) {
    return code;
  }
  if (csv.empty() || png.empty()) {
    std::cerr << "shardrec plot: give the CSV and -o PNG (see --help)\n";
    return kExitUsage;
  }
  if (Status st = PlotMetrics(csv, png, reference, title); !st.ok()) {
    std::cerr << "shardrec plot: " << st.message() << "\n";
    return kExitFailure;
  }
  std::cout << "plot: " << png << "\n";
  return kExitOk;
}

}  // namespace shardrec::cli
