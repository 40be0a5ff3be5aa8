#include "train_click_log.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <fmt/format.h>

#include "plot_metrics_script.h"

namespace shardrec::cli {

namespace po = boost::program_options;

void AddClickDataOptions(po::options_description& desc, ClickDataFlags* f) {
  desc.add_options()
      ("data", po::value(&f->data),
       "--model: train on a click log instead of synthetic batches: criteo:PATH[,PATH...], each PATH a Criteo TSV "
       "file (plain or .gz), or a directory of them, or of TorchRec's day_N_{dense,sparse,labels}.npy "
       "(docs/data.md). The tables must serve 26 features (Criteo's categorical columns, in order)")
      ("eval-data", po::value(&f->eval_data),
       "held-out click log (same forms as --data): AUC, NE, log loss, calibration and accuracy over all of it, every "
       "--eval-every steps and after the last")
      ("epochs", po::value(&f->epochs)->default_value(f->epochs),
       "with --data: passes over it (sets the steps; 0: --steps decides, continuing into the next pass as needed)")
      ("eval-every", po::value(&f->eval_every)->default_value(f->eval_every),
       "steps between held-out passes (0: after the last step only)")
      ("shuffle-buffer", po::value(&f->shuffle_buffer)->default_value(f->shuffle_buffer),
       "with --data: shuffle samples within windows of this many (0: the files' order), the same on every rank")
      ("skip-bad-lines", po::bool_switch(&f->skip_bad_lines),
       "with --data: skip and count malformed lines (default: stop, naming the file and line)")
      ("reader-threads", po::value(&f->reader_threads)->default_value(f->reader_threads),
       "threads parsing each rank's samples (0: all cores)")
      ("metrics-every", po::value(&f->metrics_every)->default_value(f->metrics_every),
       "--model: steps between points of the windowed training metric (AUC on the progress line, a CSV row)")
      ("metrics-window", po::value(&f->metrics_window)->default_value(f->metrics_window),
       "--model: the windowed training metric covers the last this many samples (over all ranks)")
      ("metrics-out", po::value(&f->metrics_out),
       "--model: write the curve (training window and held-out passes) to this CSV")
      ("plot", po::value(&f->plot),
       "--model: draw the curve into this PNG after training (needs --metrics-out; python3-matplotlib)");
}

Status CheckClickDataFlags(ClickDataFlags* f) {
  if (f->epochs < 0 || f->eval_every < 0 || f->shuffle_buffer < 0 || f->reader_threads < 0) {
    return InvalidArgumentError("--epochs, --eval-every, --shuffle-buffer and --reader-threads must be >= 0");
  }
  if (f->metrics_every < 1 || f->metrics_window < 1) return InvalidArgumentError("--metrics-every and --metrics-window must be >= 1");
  if (!f->plot.empty() && f->metrics_out.empty()) return InvalidArgumentError("--plot draws the --metrics-out CSV: give both");
  if (f->data.empty() && (f->epochs > 0 || f->skip_bad_lines)) {
    return InvalidArgumentError("--epochs and --skip-bad-lines need --data");
  }
  if (!f->data.empty()) {
    auto spec = data::ClickLogSpec::Parse(f->data);
    if (!spec.ok()) return spec.status().WithContext("--data");
    f->train = spec.value();
    auto n = data::ClickLogReader::CountSamples(*f->train);
    if (!n.ok()) return n.status().WithContext("--data");
    f->train_samples = n.value();
  }
  if (!f->eval_data.empty()) {
    auto spec = data::ClickLogSpec::Parse(f->eval_data);
    if (!spec.ok()) return spec.status().WithContext("--eval-data");
    f->eval = spec.value();
  }
  return Status::Ok();
}

Status ClickLogFeatures(const std::vector<EmbeddingTableConfig>& tables, std::vector<std::string>* features,
                        std::vector<int64_t>* num_embeddings) {
  features->clear();
  num_embeddings->clear();
  for (const auto& t : tables) {
    if (t.pooling == PoolingType::kNone) continue;
    for (const auto& name : t.feature_names) {
      features->push_back(name);
      num_embeddings->push_back(t.managed_collision.empty() ? t.num_embeddings : 0);
    }
  }
  if (features->size() != static_cast<size_t>(data::kCriteoSparse)) {
    return InvalidArgumentError(fmt::format("a Criteo click log has {} categorical columns, the tables serve {} "
                                            "features: give 26 (e.g. --tables 26x100000x64)",
                                            data::kCriteoSparse, features->size()));
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<StepInput>> StepInput::Synthetic(const SyntheticData* data, int rank, int64_t batch,
                                                          int64_t dense_in) {
  auto in = std::make_unique<StepInput>();
  in->synthetic_ = data;
  in->rank_ = rank;
  in->batch_ = batch;
  in->dense_in_ = dense_in;
  return in;
}

StatusOr<std::unique_ptr<StepInput>> StepInput::ClickLog(const ClickDataFlags& f, const data::ClickLogOptions& o) {
  auto in = std::make_unique<StepInput>();
  SR_ASSIGN_OR_RETURN(in->reader_, data::ClickLogReader::Open(*f.train, o));
  in->spec_ = f.data;
  in->global_batch_ = o.batch * o.world;
  in->shuffle_ = o.shuffle_buffer;
  in->seed_ = o.seed;
  return in;
}

StatusOr<StepBatch> StepInput::Next(int64_t step) {
  StepBatch b;
  if (synthetic_ != nullptr) {
    const int64_t first = rank_ * batch_;
    b.sparse = synthetic_->Batch(rank_, step, batch_);
    if (dense_in_ > 0) {
      b.dense = synthetic_->DenseFeatures(step, first, batch_, dense_in_);
      b.labels = synthetic_->Labels(b.sparse, b.dense, step, first);
    }
    return b;
  }
  for (int attempt = 0; attempt < 2; ++attempt) {
    SR_ASSIGN_OR_RETURN(auto next, reader_->Next());
    if (next) {
      position_ = next->position;
      b.sparse = std::move(next->sparse);
      b.dense = std::move(next->dense);
      b.labels = std::move(next->labels);
      b.bad_lines = next->bad_lines;
      b.epoch = epoch_;
      return b;
    }
    // The epoch's end: the next one, reshuffled.
    ++epoch_;
    position_ = 0;
    SR_RETURN_IF_ERROR(reader_->StartEpoch(epoch_, 0));
  }
  return InvalidArgumentError(fmt::format("--data {}: fewer samples than one global batch ({})", spec_, global_batch_));
}

nlohmann::json StepInput::Record() const {
  if (synthetic_ != nullptr) return nlohmann::json();
  return {{"source", spec_}, {"epoch", epoch_}, {"position", position_}, {"global_batch", global_batch_},
          {"shuffle_buffer", shuffle_}, {"seed", seed_}};
}

Status StepInput::Resume(const nlohmann::json& record) {
  if (synthetic_ != nullptr) return Status::Ok();
  if (!record.is_object() || !record.value("epoch", nlohmann::json()).is_number_integer() ||
      !record.value("position", nlohmann::json()).is_number_integer()) {
    return InvalidArgumentError("the checkpoint has no click-log position (it was saved by a run without --data)");
  }
  epoch_ = record["epoch"].get<int64_t>();
  position_ = record["position"].get<int64_t>();
  if (epoch_ < 0 || position_ < 0) return InvalidArgumentError("the checkpoint's click-log position is negative");
  return reader_->StartEpoch(epoch_, position_);
}

StatusOr<MetricsLog> MetricsLog::Create(const std::string& path, int64_t window_per_rank) {
  std::unique_ptr<std::ofstream> out;
  if (!path.empty()) {
    out = std::make_unique<std::ofstream>(path);
    if (!*out) return InvalidArgumentError("--metrics-out " + path + ": cannot create");
    *out << "split,step,samples,epoch,loss,auc,ne,log_loss,calibration,accuracy,window_samples,seconds\n";
  }
  return MetricsLog(std::move(out), window_per_rank);
}

StatusOr<metrics::BinaryMetrics> MetricsLog::Windowed(const ProcessGroup& group) {
  return metrics::ComputeOverRanks(&group, window_.logits(), window_.labels());
}

Status MetricsLog::Write(const std::string& split, int64_t step, int64_t samples, int64_t epoch, double loss,
                         const metrics::BinaryMetrics& m, double seconds) {
  if (!out_) return Status::Ok();
  *out_ << fmt::format("{},{},{},{},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{:.6f},{},{:.3f}\n", split, step, samples, epoch,
                       loss, m.auc, m.ne, m.log_loss, m.calibration, m.accuracy, m.samples, seconds)
        << std::flush;
  if (!*out_) return InternalError("--metrics-out: write failed");
  return Status::Ok();
}

StatusOr<metrics::BinaryMetrics> EvaluatePass(const ProcessGroup& group, data::ClickLogReader& reader,
                                              const Predict& predict) {
  SR_RETURN_IF_ERROR(reader.StartEpoch(0, 0));
  std::vector<float> logits, labels;
  for (;;) {
    SR_ASSIGN_OR_RETURN(auto batch, reader.Next());
    if (!batch) break;
    SR_ASSIGN_OR_RETURN(Tensor l, predict(batch->sparse, batch->dense));
    logits.insert(logits.end(), l.data<float>(), l.data<float>() + l.numel());
    labels.insert(labels.end(), batch->labels.data<float>(), batch->labels.data<float>() + batch->labels.numel());
  }
  return metrics::ComputeOverRanks(&group, logits, labels);
}

double PlantedAuc(const std::string& data_spec) {
  namespace fs = std::filesystem;
  auto spec = data::ClickLogSpec::Parse(data_spec);
  if (!spec.ok() || spec->files.empty()) return std::nan("");
  std::error_code ec;
  fs::path dir = fs::absolute(spec->files[0], ec);
  for (int up = 0; up < 3 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (!fs::exists(dir / "planted.json", ec)) continue;
    std::ifstream in(dir / "planted.json");
    const auto j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && j.contains("planted_on_eval") && j["planted_on_eval"].is_object() &&
        j["planted_on_eval"].value("auc", nlohmann::json()).is_number()) {
      return j["planted_on_eval"]["auc"].get<double>();
    }
    return std::nan("");
  }
  return std::nan("");
}

Status PlotMetrics(const std::string& csv, const std::string& png, double reference_auc, const std::string& title) {
  namespace fs = std::filesystem;
  const fs::path script = fs::temp_directory_path() / fmt::format("shardrec_plot_{}.py", getpid());
  {
    std::ofstream out(script);
    out << kPlotMetricsScript;
    if (!out) return InternalError(script.string() + ": cannot write the plotting script");
  }
  const fs::path err = fs::temp_directory_path() / fmt::format("shardrec_plot_{}.err", getpid());
  // Debian's interpreter has matplotlib (python3-matplotlib); another
  // python3 first on PATH may not.
  const std::string python = fs::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3";
  auto quote = [](const std::string& s) {
    std::string q = "'";
    for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    return q + "'";
  };
  const std::string cmd = fmt::format("{} {} {} {} {} {} 2> {}", python, quote(script.string()), quote(csv), quote(png),
                                      quote(std::isnan(reference_auc) ? "" : fmt::format("{}", reference_auc)),
                                      quote(title.empty() ? csv : title), quote(err.string()));
  const int rc = std::system(cmd.c_str());
  std::string why;
  {
    std::ifstream in(err);
    std::string line;
    while (std::getline(in, line)) why = line;  // the last line says it
  }
  std::error_code ec;
  fs::remove(script, ec);
  fs::remove(err, ec);
  if (rc != 0) {
    return InternalError(fmt::format("plotting {} failed ({}){}", csv, why.empty() ? "exit " + std::to_string(rc) : why,
                                     why.find("matplotlib") != std::string::npos
                                         ? "; install it with: apt-get install python3-matplotlib"
                                         : ""));
  }
  return Status::Ok();
}

}  // namespace shardrec::cli
