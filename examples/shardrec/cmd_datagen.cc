// `shardrec datagen`: a Criteo-format click log with a known answer
// (core/data/planted_click_log.h): training files, held-out files, and
// beside them planted.json with what the planted model itself scores on the
// held-out files (its AUC is the mark a trained model is judged against).
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "progress.h"
#include "shardrec/core/data/planted_click_log.h"
#include "shardrec/core/metrics/binary_metrics.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec::cli {

namespace {

namespace fs = std::filesystem;

struct DatagenFlags {
  std::string out;
  int64_t train_samples = 2000000, eval_samples = 200000, files = 4;
  bool gzip = false;
  data::PlantedClickModelOptions model;
};

// The files of one split: `files` of about equal size, day_0 ... day_{n-1}.
Status WriteSplit(const data::PlantedClickModel& model, const fs::path& dir, int64_t first, int64_t samples,
                  int64_t files, bool gzip, Progress& progress, int64_t* written, int64_t total,
                  std::vector<float>* logits, std::vector<float>* labels) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return InvalidArgumentError(fmt::format("{}: cannot create: {}", dir.string(), ec.message()));
  for (int64_t f = 0; f < files; ++f) {
    const int64_t begin = samples * f / files, end = samples * (f + 1) / files;
    const fs::path path = dir / fmt::format("day_{}.tsv{}", f, gzip ? ".gz" : "");
    const int64_t before = *written;
    const auto start = std::chrono::steady_clock::now();
    SR_RETURN_IF_ERROR(data::WritePlantedTsv(model, first + begin, end - begin, path, logits, labels, [&](int64_t n) {
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      progress.Step(before + n, secs > 0 ? static_cast<double>(n) / secs : 0.0);
    }));
    *written += end - begin;
  }
  (void)total;
  return Status::Ok();
}

}  // namespace

int RunDatagen(const std::vector<std::string>& args) {
  GlobalOptions g;
  DatagenFlags f;
  po::options_description desc("datagen options");
  AddGlobalOptions(desc, &g);
  desc.add_options()
      ("out", po::value(&f.out), "the new directory to write (refused if it exists and is not empty)")
      ("train-samples", po::value(&f.train_samples)->default_value(f.train_samples), "samples in train/")
      ("eval-samples", po::value(&f.eval_samples)->default_value(f.eval_samples), "held-out samples in eval/")
      ("files", po::value(&f.files)->default_value(f.files), "train/ is split into this many day_N files")
      ("gzip", po::bool_switch(&f.gzip), "write day_N.tsv.gz instead of day_N.tsv")
      ("seed", po::value(&f.model.seed)->default_value(f.model.seed), "the planted model and every sample")
      ("cardinality", po::value(&f.model.cardinality)->default_value(f.model.cardinality),
       "distinct ids per categorical feature (Zipf popularity)")
      ("zipf-alpha", po::value(&f.model.zipf_alpha)->default_value(f.model.zipf_alpha), "the ids' Zipf exponent")
      ("informative", po::value(&f.model.informative)->default_value(f.model.informative),
       "categorical features (the first ones) whose ids move the click probability");
  po::positional_options_description pos;
  pos.add("out", 1);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("datagen", args, desc, &pos, &vm, &code,
             " DIR\n\nWrites a Criteo-format click log drawn from a planted logistic model of the dense values and\n"
             "of the ids of some categorical features, so that what a model should learn is known:\n"
             "  DIR/train/day_N.tsv   training samples (label, 13 integers, 26 hex ids; some fields empty)\n"
             "  DIR/eval/day_0.tsv    held-out samples\n"
             "  DIR/planted.json      the planted model's own AUC, log loss and NE on the held-out samples\n\n"
             "examples:\n"
             "  shardrec datagen clicks                                  # 2M + 200k samples\n"
             "  shardrec train --model dlrm --data criteo:clicks/train --eval-data criteo:clicks/eval")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit_code) {
    std::cerr << "shardrec datagen: " << m << "\n";
    return exit_code;
  };
  if (f.out.empty()) return fail("give the directory to write (see --help)", kExitUsage);
  if (f.train_samples < 1 || f.eval_samples < 1) return fail("--train-samples and --eval-samples must be >= 1", kExitUsage);
  if (f.files < 1 || f.files > f.train_samples) return fail("--files must be in [1, --train-samples]", kExitUsage);
  if (f.model.cardinality < 1 || f.model.cardinality > (int64_t{1} << 24)) {
    return fail("--cardinality must be in [1, 16777216]", kExitUsage);
  }
  if (!(f.model.zipf_alpha >= 0 && f.model.zipf_alpha <= 10)) return fail("--zipf-alpha must be in [0, 10]", kExitUsage);
  if (f.model.informative < 0 || f.model.informative > data::kCriteoSparse) {
    return fail("--informative must be in [0, 26]", kExitUsage);
  }
  std::error_code ec;
  if (fs::exists(f.out, ec) && !fs::is_empty(f.out, ec)) {
    return fail(f.out + ": exists and is not empty; give a new directory", kExitFailure);
  }
  const data::PlantedClickModel model(f.model);
  const int64_t total = f.train_samples + f.eval_samples;
  Progress progress(total, !g.json, "datagen ", "samples", "samples");
  int64_t written = 0;
  const auto start = std::chrono::steady_clock::now();
  Status st = WriteSplit(model, fs::path(f.out) / "train", 0, f.train_samples, f.files, f.gzip, progress, &written,
                         total, nullptr, nullptr);
  // Held-out samples continue the stream past the training ones.
  std::vector<float> logits, labels;
  if (st.ok()) {
    st = WriteSplit(model, fs::path(f.out) / "eval", f.train_samples, f.eval_samples, 1, f.gzip, progress, &written,
                    total, &logits, &labels);
  }
  if (!st.ok()) return fail(st.message(), kExitFailure);
  const metrics::BinaryMetrics m = metrics::ComputeBinaryMetrics(logits, labels);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  nlohmann::json planted = {
      {"format", "criteo tsv"}, {"train", "train"}, {"eval", "eval"},
      {"train_samples", f.train_samples}, {"eval_samples", f.eval_samples}, {"files", f.files}, {"gzip", f.gzip},
      {"seed", f.model.seed}, {"cardinality", f.model.cardinality}, {"zipf_alpha", f.model.zipf_alpha},
      {"informative", f.model.informative},
      {"planted_on_eval", {{"auc", m.auc}, {"log_loss", m.log_loss}, {"ne", m.ne}, {"calibration", m.calibration},
                           {"accuracy", m.accuracy}, {"click_rate", m.mean_label}}}};
  st = WriteFileAtomically(fs::path(f.out) / "planted.json", [&](std::ostream& os) { os << planted.dump(1) << "\n"; },
                           std::ios::out);
  if (!st.ok()) return fail(st.message(), kExitFailure);
  if (g.json) {
    std::cout << planted.dump() << "\n";
  } else {
    std::cout << fmt::format("wrote {} training and {} held-out samples to {} in {:.1f} s\n"
                             "planted model on the held-out samples: AUC {:.4f}, log loss {:.4f}, NE {:.4f}, click "
                             "rate {:.3f} ({}/planted.json)\n",
                             f.train_samples, f.eval_samples, f.out, secs, m.auc, m.log_loss, m.ne, m.mean_label, f.out);
  }
  return kExitOk;
}

}  // namespace shardrec::cli
