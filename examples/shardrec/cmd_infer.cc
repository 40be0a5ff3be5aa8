// `shardrec infer --model MODEL_DIR --data SPEC -o scores.npy`: serves a
// model directory (`shardrec export`'s, or a `train --model` checkpoint)
// over a click log in batches: the tables through the inference sharding
// (ShardedQuantEmbeddingBagCollection: rank 0 holds each batch, every rank
// looks up its shards, the pooled embeddings come back to rank 0), then the
// dense half. Writes the probabilities (or, for tables alone, the pooled
// embeddings) and prints latency percentiles per batch, throughput and,
// the log having labels, AUC and the other binary metrics.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <mutex>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "comm_job.h"
#include "commands.h"
#include "served_model.h"
#include "train_click_log.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/data/click_log_reader.h"
#include "shardrec/core/inference/quant_embedding_bag_collection.h"
#include "shardrec/core/metrics/binary_metrics.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct InferFlags {
  std::string model, data, out, kernel = "cpu", sharder = "table_wise";
  int64_t batch = 1024, max_batches = 0, warmup = 2;
};

struct InferResult {
  int64_t samples = 0, batches = 0;
  std::vector<double> latency_s;  // per timed batch: ids in hand to scores out
  double served_s = 0;           // every batch's, summed
  double wall_s = 0;
  std::optional<metrics::BinaryMetrics> metrics;
  int64_t invalid_ids = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const auto at = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - (q > 0 ? 1 : 0);
  return v[std::min(at, v.size() - 1)];
}

// One rank's part; rank 0 reads, scores and writes.
Status Serve(const ProcessGroup& group, const HostSession& session, const InferFlags& f, const ServedModel& m,
             InferResult* result) {
  const bool lead = group.rank() == 0;
  const std::vector<EmbeddingTableConfig>& tables = m.manifest.tables;
  PlanRequest req;
  req.tables = tables;
  req.world_size = group.world_size();
  req.ranks_per_host = group.local_world_size();
  req.default_kernel = f.kernel;
  req.sharder = f.sharder;
  req.sharder_options = session.plugin_options.ForKind("sharder");
  SR_ASSIGN_OR_RETURN(ShardingPlan plan, MakePlan(session.registry, req));
  EmbeddingModuleOptions options;
  options.kernel = f.kernel;
  options.kernel_options = session.plugin_options.For("kernel", f.kernel);
  options.bounds_check = SR_BOUNDS_CHECK_IGNORE;
  SR_ASSIGN_OR_RETURN(auto qebc, ShardedQuantEmbeddingBagCollection::Create(session.registry, group, plan, options));
  std::unique_ptr<ModelTrainer> dense;
  DenseCheckpointState dense_state;
  if (m.model) {
    SR_ASSIGN_OR_RETURN(dense, CreateDenseHalf(*m.model, tables));
    dense_state.params = dense->Parameters();
  }
  CheckpointLoadRequest load;
  load.dir = m.dir;
  load.reset_optimizer = true;
  load.dense = m.model ? &dense_state : nullptr;
  SR_RETURN_IF_ERROR(LoadCheckpoint(qebc.tables(), load).status().WithContext("--model"));

  // Rank 0 alone reads and scores: its first error is told to the others
  // at the next batch, so that every rank stops there (none waits in a
  // collective for a rank that left).
  Status lead_error;
  std::unique_ptr<data::ClickLogReader> reader;
  if (lead) {
    lead_error = [&]() -> Status {
      SR_ASSIGN_OR_RETURN(auto spec, data::ClickLogSpec::Parse(f.data));
      data::ClickLogOptions o;
      o.batch = f.batch;
      SR_RETURN_IF_ERROR(ClickLogFeatures(tables, &o.features, &o.num_embeddings).WithContext("--data"));
      SR_ASSIGN_OR_RETURN(reader, data::ClickLogReader::Open(spec, o));
      return Status::Ok();
    }();
  }
  std::vector<float> scores, labels, logits;
  int64_t width = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int64_t b = 0;; ++b) {
    std::optional<data::ClickBatch> batch;
    if (lead && lead_error.ok() && (f.max_batches == 0 || b < f.max_batches)) {
      auto next = reader->Next();
      if (next.ok()) batch = std::move(next).value();
      else lead_error = next.status();
    }
    // Rank 0: 1, a batch follows (the others serve it with their shards);
    // 0, the log is done; -1, it failed.
    SR_ASSIGN_OR_RETURN(auto more, AllGatherValues(group, !lead_error.ok() ? -1 : batch ? 1 : 0));
    if (more[0] < 0) return lead ? lead_error : Status::Ok();  // rank 0 reports it
    if (more[0] == 0) break;
    const auto t0 = std::chrono::steady_clock::now();
    KeyedJaggedTensor sparse;
    if (lead) sparse = batch->sparse;
    if (lead && dense && dense->has_position_weights()) {
      auto processed = dense->ProcessFeatures(batch->sparse);
      if (processed.ok()) sparse = std::move(processed).value();
      else lead_error = processed.status();  // the forward below runs idle on every rank
    }
    int64_t invalid = 0;
    auto pooled = qebc.Forward(lead && lead_error.ok() ? &sparse : nullptr, &invalid);
    if (!pooled.ok()) {
      if (!lead) return pooled.status();
      lead_error = pooled.status();
    }
    result->invalid_ids += invalid;
    if (!lead || !lead_error.ok()) continue;
    const int64_t n = batch->labels.numel();
    if (dense) {
      auto predicted = dense->Predict((*pooled)->values(), batch->dense);
      if (!predicted.ok()) {
        lead_error = predicted.status();
        continue;
      }
      const Tensor& l = predicted.value();
      const float* p = l.data<float>();
      logits.insert(logits.end(), p, p + n);
      for (int64_t i = 0; i < n; ++i) scores.push_back(1.0f / (1.0f + std::exp(-p[i])));
    } else {
      const Tensor& v = (*pooled)->values();
      width = v.size(1);
      scores.insert(scores.end(), v.data<float>(), v.data<float>() + v.numel());
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    result->served_s += secs;
    if (b >= f.warmup) result->latency_s.push_back(secs);
    labels.insert(labels.end(), batch->labels.data<float>(), batch->labels.data<float>() + n);
    result->samples += n;
    ++result->batches;
  }
  result->wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!lead) return Status::Ok();
  if (result->samples == 0) return InvalidArgumentError("--data: the log holds no whole batch of " + std::to_string(f.batch));
  if (dense) result->metrics = metrics::ComputeBinaryMetrics(logits, labels);
  const Tensor out = dense ? Tensor::FromVector(scores) : Tensor::FromVector(scores, {result->samples, width});
  return WriteNpy(f.out, out).WithContext("-o");
}

}  // namespace

int RunInfer(const std::vector<std::string>& args) {
  GlobalOptions g;
  InferFlags f;
  CommFlags comm;
  po::options_description desc("infer options");
  AddGlobalOptions(desc, &g);
  AddCommOptions(desc, &comm);
  desc.add_options()
      ("model", po::value(&f.model), "a model directory of `shardrec export` (or a checkpoint of `train --model`)")
      ("data", po::value(&f.data), "the click log to score: criteo:PATH[,PATH...] (TSV, gzip, or the NumPy layout)")
      ("output,o", po::value(&f.out), "the .npy to write: one probability per sample (float32), or, for a model of "
                                      "tables alone, the pooled embeddings [samples, features x dim]")
      ("batch", po::value(&f.batch)->default_value(f.batch), "samples per batch (a tail shorter than it is dropped)")
      ("max-batches", po::value(&f.max_batches)->default_value(f.max_batches), "stop after this many batches (0: the whole log)")
      ("warmup", po::value(&f.warmup)->default_value(f.warmup), "first batches left out of the latency percentiles")
      ("sharder", po::value(&f.sharder)->default_value(f.sharder),
       "how the tables are sharded over --world-size ranks: table_wise, row_wise, table_row_wise or data_parallel "
       "(a quantized row is never split by column)")
      ("kernel", po::value(&f.kernel)->default_value(f.kernel), "the compute kernel serving the tables");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("infer", args, desc, nullptr, &vm, &code,
             "\n\nScores a click log with a model directory in batches: the tables sharded over the ranks\n"
             "(rank 0 holds each batch; its ids go to the shards, the pooled embeddings come back), then\n"
             "the dense model. Prints latency per batch (p50, p99), throughput and, the log having labels,\n"
             "AUC, NE, log loss, calibration and accuracy.\n\n"
             "examples:\n"
             "  shardrec export --from-checkpoint ckpt --quantize int8 -o model-int8\n"
             "  shardrec infer --model model-int8 --data criteo:clicks/eval -o scores.npy\n"
             "  shardrec infer --model model-int8 --data criteo:clicks/eval -o scores.npy --world-size 2 --sharder row_wise\n"
             "  shardrec infer --model model-int8 --data criteo:clicks/eval -o s.npy --batch 1 --max-batches 2000")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit_code) {
    std::cerr << "shardrec infer: " << m << "\n";
    return exit_code;
  };
  if (f.model.empty()) return fail("--model is required (see --help)", kExitUsage);
  if (f.data.empty()) return fail("--data is required: criteo:PATH", kExitUsage);
  if (f.out.empty()) return fail("-o scores.npy is required", kExitUsage);
  if (f.batch < 1 || f.batch > (int64_t{1} << 24)) return fail("--batch must be in [1, 16777216]", kExitUsage);
  if (f.max_batches < 0 || f.warmup < 0) return fail("--max-batches and --warmup must be >= 0", kExitUsage);
  auto model = OpenServedModel(f.model);
  if (!model.ok()) return fail(model.status().message(), kExitFailure);
  HostSession session;
  if (!OpenSession("infer", g, kAllPluginKinds, &session)) return kExitUsage;

  InferResult result;
  bool lead_here = false;  // rank 0 runs in this process (not so for the other processes of a Gloo job)
  std::mutex failed;
  const int rc = RunOnRanks("infer", args, comm, session, [&](const ProcessGroup& group) {
    InferResult mine;
    Status st = Serve(group, session, f, model.value(), &mine);
    if (!st.ok()) {
      PrintLine(std::cerr, fmt::format("shardrec infer: rank {}: {}", group.rank(), st.message()));
      return kExitFailure;
    }
    if (group.rank() == 0) {
      std::lock_guard<std::mutex> lock(failed);
      result = std::move(mine);
      lead_here = true;
    }
    return kExitOk;
  });
  if (rc != kExitOk || !lead_here) return rc;

  const double p50 = Percentile(result.latency_s, 0.5), p99 = Percentile(result.latency_s, 0.99);
  const double rate = result.served_s > 0 ? static_cast<double>(result.samples) / result.served_s : 0.0;
  json types = json::object();
  for (const auto& t : model->manifest.tables) types[t.name] = DataTypeName(t.data_type);
  json j = {{"model", model->dir.string()}, {"data", f.data}, {"output", f.out}, {"samples", result.samples},
            {"batches", result.batches}, {"batch", f.batch}, {"world_size", comm.world_size}, {"sharder", f.sharder},
            {"latency_p50_ms", p50 * 1e3}, {"latency_p99_ms", p99 * 1e3}, {"timed_batches", result.latency_s.size()},
            {"samples_per_s", rate}, {"wall_s", result.wall_s}, {"invalid_ids", result.invalid_ids}, {"types", types}};
  std::string text = fmt::format(
      "served {} samples in {} batches of {} from {} ({}): p50 {:.3f} ms, p99 {:.3f} ms per batch ({} timed), "
      "{:.1f}k samples/s\n",
      result.samples, result.batches, f.batch, model->dir.string(), model->model ? model->model->model : "tables only",
      p50 * 1e3, p99 * 1e3, result.latency_s.size(), rate / 1e3);
  if (result.metrics) {
    const auto& mm = *result.metrics;
    j["metrics"] = {{"auc", mm.auc}, {"ne", mm.ne}, {"log_loss", mm.log_loss}, {"calibration", mm.calibration},
                    {"accuracy", mm.accuracy}};
    text += fmt::format("AUC {:.4f}, NE {:.4f}, log loss {:.4f}, calibration {:.3f}, accuracy {:.4f}\n", mm.auc, mm.ne,
                        mm.log_loss, mm.calibration, mm.accuracy);
  }
  text += fmt::format("wrote {}\n", f.out);
  if (g.json) std::cout << j.dump() << "\n";
  else std::cout << text;
  return kExitOk;
}

}  // namespace shardrec::cli
