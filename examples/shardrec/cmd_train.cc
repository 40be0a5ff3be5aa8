// `shardrec train`: trains a ShardedEmbeddingBagCollection on synthetic
// data (train_data.h) across the ranks of a job, and reports throughput,
// where the time went, and memory per rank. With no flags it is the
// embedded default job: 2 ranks as threads (local comm), CPU kernel,
// balanced table-wise plan. `--verify` runs the same steps unsharded on
// rank 0 beside it and prints the largest differences. Tables with managed
// collision (in the tables file or --managed-collision) get raw ids and a
// ShardedManagedCollisionEmbeddingBagCollection; their counters join the
// report.
#include <algorithm>
#include <chrono>
#include <limits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "comm_job.h"
#include "commands.h"
#include "memory_check.h"
#include "progress.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/checkpoint/directory.h"
#include "shardrec/core/launch/dist_env.h"
#include "shardrec/core/managed_collision/managed_collision_embedding.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/core/pipeline/train_pipeline.h"
#include "shardrec/core/qcomm/qcomm_codecs.h"
#include "shardrec/core/resources/memory.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/core/text/byte_size.h"
#include "shardrec/core/text/counted.h"
#include "shardrec/sdk/optimizer.hpp"
#include "planner_inputs.h"
#include "kernel_threads.h"
#include "train_data.h"
#include "train_cache.h"
#include "train_click_log.h"
#include "train_model.h"

namespace shardrec::cli {

namespace {

struct TrainFlags {
  std::string tables = "4x100000x64,2x20000x16";
  std::string plan, plan_out, sharder, kernel = "cpu", optimizer = "adagrad,lr=0.05", ids = "uniform";
  std::string pooling_factor = "8", bounds = "fatal", memory_per_rank, max_memory;
  int64_t batch = 512, steps = 100;
  uint64_t seed = 0;
  bool verify = false, no_fast_paths = false;
  std::string pipeline = "auto";
  PipelineMode pipeline_mode = PipelineMode::kSparseDist;  // unless --pipeline auto
  std::string comm_name;  // --comm, for auto
  std::string qcomm;  // --qcomm, as given
  double tolerance = 1e-5;
  std::vector<std::string> managed_collision;  // TABLE:SPEC
  std::string mc_dist = "fused";               // --mc-dist
  int64_t raw_id_space = 0;                    // 0: 10 x the rows of each managed table
  std::vector<std::string> hashed_ids;         // --hashed-ids TABLE: raw ids folded into its rows
  // Checkpoints (docs/checkpoints.md).
  std::string checkpoint_dir, resume, checkpoint_chunk = "1MiB";
  int64_t save_every = 0, keep_last = 0, chunk_bytes = kDefaultCheckpointChunkBytes;
  bool reset_optimizer = false;
  ModelFlags model;  // --model (docs/models.md)
  ClickDataFlags click;  // --data, --eval-data, metrics (docs/data.md)
  bool planner = false;  // --planner (docs/planner.md)
  PlannerFlags planner_flags;
  double planner_estimate_s = 0;  // the planner's estimated step, for the report
  CacheFlags cache;  // --memory-budget, --cache-dir, --cache-params (docs/cache.md)
};

// What the synthetic stream is, in the manifest: a resumed run that differs
// does not continue the same sequence, and is told so.
nlohmann::json DataRecord(const TrainFlags& f, int world, int64_t position) {
  nlohmann::json record = {{"source", "synthetic"},   {"seed", f.seed},
                           {"ids", f.ids},            {"pooling_factor", f.pooling_factor},
                           {"global_batch", world * f.batch}, {"raw_id_space", f.raw_id_space},
                           {"position", position}};
  // The set of tables, in one order; absent when none (as in checkpoints
  // written before --hashed-ids existed).
  std::set<std::string> hashed(f.hashed_ids.begin(), f.hashed_ids.end());
  if (!hashed.empty()) record["hashed_ids"] = hashed;
  return record;
}

// The largest |got - want|, and the largest |got - want| / max(1, |want|):
// large accumulators (Adagrad's sum of squares) are judged relative to
// their size, everything of size <= 1 absolutely.
struct Diff {
  double abs = 0, scaled = 0;
  void Add(const Tensor& got, const Tensor& want) {
    if (got.shape() != want.shape()) {
      abs = scaled = INFINITY;
      return;
    }
    for (int64_t i = 0; i < got.numel(); ++i) {
      const double w = want.data<float>()[i];
      const double d = std::abs(static_cast<double>(got.data<float>()[i]) - w);
      abs = std::max(abs, d);
      scaled = std::max(scaled, d / std::max(1.0, std::abs(w)));
    }
  }
};

struct RankResult {
  std::string pipeline_mode;  // the train pipeline this rank ran (--pipeline auto resolved)
  std::string kernel_threads;  // the kernel's `threads` option ("" when it sizes its pool itself)
  // Every rank's seconds in its timed steps (forward + backward, managed
  // collision's remap included); all ranks start them together.
  std::vector<double> rank_seconds;
  double seconds = 0;                // the slowest rank's: the job's time
  std::vector<double> step_seconds;  // rank 0's, per step
  std::vector<int64_t> lookups, bytes;
  std::vector<ShardedStepTimes> times;
  std::vector<PipelineTimes> pipeline;  // per rank
  std::vector<double> remap_seconds;  // managed collision, per rank
  std::map<std::string, ManagedCollisionStats> mc_stats;
  std::map<std::string, std::string> mc_dist;  // per table: "fused", or "separate: why"
  std::vector<CachedTableStats> cache_stats;    // the plan's cached tables
  RssMax rss_max;                               // per rank: its process's largest RSS samples in the steps
  std::string cache_io;                         // what moves this rank's cached rows
  std::string output_dist;
  struct Verify {
    Diff output, weights, state;
    bool Within(double tol) const { return output.scaled <= tol && weights.scaled <= tol && state.scaled <= tol; }
  };
  std::optional<Verify> verify;
  struct Saved {
    std::string dir;
    int64_t step, bytes;
    double seconds;
    std::vector<std::string> removed;
  };
  std::vector<Saved> saved;
  std::optional<LoadedCheckpoint> resumed;
  double resume_seconds = 0;
  int64_t first_step = 0;
  // --model: the dense phases per rank (forward, backward, exposed
  // all-reduce, optimizer), the loss over ranks at the first and last step.
  std::vector<DenseStepTimes> dense_times;
  double first_loss = 0, last_loss = 0;
  int buckets = 0;
  std::optional<Diff> dense_verify;
  // --data: the reader's bytes and the steps' time blocked waiting for it
  // (per rank); --eval-data: the last held-out pass; the windowed metric.
  std::vector<int64_t> data_bytes;
  std::vector<double> data_wait;
  int64_t bad_lines = 0, epochs_done = 0;
  std::optional<metrics::BinaryMetrics> eval, windowed;
};

// The mean of one value over the ranks.
StatusOr<double> MeanOverRanks(const ProcessGroup& group, double value) {
  int64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  SR_ASSIGN_OR_RETURN(auto all, AllGatherValues(group, bits));
  double sum = 0;
  for (int64_t b : all) {
    double v = 0;
    std::memcpy(&v, &b, sizeof v);
    sum += v;
  }
  return sum / static_cast<double>(all.size());
}

// --pipeline auto: overlap the input dist where a wire is in between (Gloo
// over TCP, between hosts, NCCL). Ranks that share this host's memory
// (threads with `local`, processes with Gloo's shared-memory transport) copy
// on the cores the step needs: nothing to hide, and the pipeline's thread
// costs (docs/pipeline.md). Decided per job from where its ranks are.
PipelineMode PipelineFor(const TrainFlags& f, const ProcessGroup& group, const HostSession& session) {
  if (f.pipeline != "auto") return f.pipeline_mode;
  bool shared_memory = f.comm_name == "local";
  if (f.comm_name == "gloo" && group.local_world_size() == group.world_size()) {
    // comm.gloo.transport=auto (or shm) takes shared memory on one host.
    const OptionList gloo = session.plugin_options.For("comm", "gloo");
    const auto& items = gloo.items();
    shared_memory = std::none_of(items.begin(), items.end(),
                                 [](const auto& kv) { return kv.first == "transport" && kv.second == "tcp"; });
  }
  return shared_memory ? PipelineMode::kNone : PipelineMode::kSparseDist;
}

// One rank's job. Errors are returned; rank 0 prints them.
StatusOr<RankResult> TrainRank(const ProcessGroup& group, const HostSession& session, const TrainFlags& f,
                               const std::vector<EmbeddingTableConfig>& tables, const SyntheticData& data,
                               const ShardingPlan& plan, const ManagedCollisionConfigs& managed,
                               const EmbeddingModuleOptions& options, bool show) {
  const int me = group.rank(), world = group.world_size();
  ShardedModuleOptions so;
  so.fast_paths = !f.no_fast_paths;
  so.qcomm = plan.qcomm;
  so.codec_options = session.plugin_options.ForKind("codec");
  // With managed tables the module is wrapped; either way `ebc` is the sharded EBC.
  std::optional<ShardedManagedCollisionEmbeddingBagCollection> mc;
  std::optional<ShardedEmbeddingBagCollection> plain;
  if (managed.empty()) {
    SR_ASSIGN_OR_RETURN(auto made, ShardedEmbeddingBagCollection::Create(session.registry, group, plan, options, so));
    plain.emplace(std::move(made));
  } else {
    const auto how = f.mc_dist == "separate" ? ManagedCollisionDist::kSeparate : ManagedCollisionDist::kFused;
    SR_ASSIGN_OR_RETURN(auto made, CreateShardedManagedCollisionEmbeddingBagCollection(session.registry, group, plan,
                                                                                      managed, options, so, how));
    mc.emplace(std::move(made));
  }
  ShardedEmbeddingBagCollection& ebc = mc ? mc->embedding() : *plain;
  std::optional<EmbeddingBagCollection> ref;
  std::optional<ManagedCollisionEmbeddingBagCollection> mc_ref;
  RankResult result;
  result.output_dist = ebc.output_dist();
  if (mc) result.mc_dist = mc->collection().dist();
  if (f.verify) {
    result.verify.emplace();
    if (me == 0 && managed.empty()) {
      SR_ASSIGN_OR_RETURN(auto made, EmbeddingBagCollection::Create(session.registry, tables, options));
      ref.emplace(std::move(made));
    } else if (me == 0) {
      SR_ASSIGN_OR_RETURN(auto made,
                          CreateManagedCollisionEmbeddingBagCollection(session.registry, tables, managed, options));
      mc_ref.emplace(std::move(made));
    }
  }
  int64_t width = 0;
  for (const auto& t : tables) width += t.embedding_dim * static_cast<int64_t>(t.feature_names.size());
  std::unique_ptr<ModelRun> model, model_ref;
  if (!f.model.model.empty()) {
    SR_ASSIGN_OR_RETURN(model, ModelRun::Create(&group, f.model, tables, f.seed, f.batch, world, false));
    if (ref || mc_ref) {
      SR_ASSIGN_OR_RETURN(model_ref, ModelRun::Create(nullptr, f.model, tables, f.seed, f.batch, world, true));
    }
  }
  // The batches: synthetic (a function of the step), or the click log's.
  std::unique_ptr<StepInput> input;
  std::unique_ptr<shardrec::data::ClickLogReader> eval_reader;
  const bool input_is_log = f.click.train.has_value();
  {
    shardrec::data::ClickLogOptions o;
    o.rank = me;
    o.world = world;
    o.batch = f.batch;
    if (input_is_log || f.click.eval) {
      SR_RETURN_IF_ERROR(ClickLogFeatures(tables, &o.features, &o.num_embeddings).WithContext("--data"));
    }
    o.shuffle_buffer = f.click.shuffle_buffer;
    o.seed = f.seed;
    o.skip_bad_lines = f.click.skip_bad_lines;
    o.threads = f.click.reader_threads;
    if (input_is_log) {
      SR_ASSIGN_OR_RETURN(input, StepInput::ClickLog(f.click, o));
    } else {
      SR_ASSIGN_OR_RETURN(input, StepInput::Synthetic(&data, me, f.batch, model ? model->config().dense_in_features : 0));
    }
    if (f.click.eval) {
      o.shuffle_buffer = 0;
      o.skip_bad_lines = f.click.skip_bad_lines;
      SR_ASSIGN_OR_RETURN(eval_reader, shardrec::data::ClickLogReader::Open(*f.click.eval, o));
    }
  }
  // --resume: the tables, the step and the optimizer's iteration; the
  // synthetic stream is a function of the step, so it resumes with it.
  // --verify's unsharded reference resumes from the same checkpoint.
  int64_t iteration = 0;  // the optimizer's steps so far
  if (!f.resume.empty()) {
    const auto start = std::chrono::steady_clock::now();
    CheckpointLoadRequest lr;
    lr.dir = f.resume;
    lr.reset_optimizer = f.reset_optimizer;
    lr.chunk_bytes = f.chunk_bytes;
    // The tables were made for this run and a failed load ends it: one read
    // of every byte, checksums checked as the bytes go.
    lr.verify_before_loading = false;
    // --model: the dense parameters and their optimizer come back too.
    DenseCheckpointState dense, dense_ref;
    if (model) {
      dense = model->CheckpointState();
      lr.dense = &dense;
    }
    SR_ASSIGN_OR_RETURN(LoadedCheckpoint loaded, LoadCheckpoint(ebc.tables(), lr, mc ? &mc->collection() : nullptr));
    if (model_ref) {
      dense_ref = model_ref->CheckpointState();
      lr.dense = &dense_ref;
    }
    if (ref) SR_RETURN_IF_ERROR(LoadCheckpoint(ref->tables(), lr).status().WithContext("the --verify reference"));
    if (mc_ref) {
      SR_RETURN_IF_ERROR(LoadCheckpoint(mc_ref->embedding().tables(), lr, &mc_ref->collection())
                             .status()
                             .WithContext("the --verify reference"));
    }
    result.resume_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    result.first_step = loaded.manifest.step;
    iteration = loaded.optimizer_state_loaded || options.optimizer.optimizer == SR_OPTIMIZER_SGD
                    ? loaded.manifest.optimizer_iteration
                    : 0;
    // The same stream only if it is drawn the same way: say so when not.
    if (show && loaded.manifest.extra.contains("data")) {
      nlohmann::json was = loaded.manifest.extra["data"];
      if (!was.is_object()) was = nlohmann::json::object();
      const nlohmann::json now = input_is_log ? input->Record() : DataRecord(f, world, result.first_step);
      for (const auto& [key, value] : now.items()) {
        if (key != "position" && key != "epoch" && was.value(key, nlohmann::json()) != value) {
          PrintLine(std::cerr, fmt::format("shardrec train: note: --resume: the checkpoint's data had {} {}, this run "
                                           "{}: the run does not continue the same sample sequence",
                                           key, was.value(key, nlohmann::json()).dump(), value.dump()));
        }
      }
    }
    if (input_is_log) {
      SR_RETURN_IF_ERROR(input->Resume(loaded.manifest.extra.value("data", nlohmann::json()))
                             .WithContext("--resume " + f.resume));
    }
    result.resumed.emplace(std::move(loaded));
  }
  // --dump-dir: the initial parameters now, each step's batch, the final ones at the end.
  std::optional<RunDump> dump;
  std::vector<double> losses;
  auto read_table = [&](const std::string& name) { return ebc.ReadTable(name); };
  if (model && !f.model.dump_dir.empty()) {
    Status made = Status::Ok();
    if (me == 0) {
      auto created = RunDump::Create(f.model.dump_dir);
      if (created.ok()) dump.emplace(std::move(created).value());
      made = created.status();
    }
    // Every rank learns whether rank 0 could, before the collective reads.
    SR_ASSIGN_OR_RETURN(auto ok, AllGatherValues(group, made.ok() ? 1 : 0));
    if (!made.ok()) return made;
    if (ok[0] == 0) return InternalError("rank 0 could not create --dump-dir " + f.model.dump_dir);
    SR_RETURN_IF_ERROR(RunDump::Parameters(dump ? &*dump : nullptr, "init", tables, read_table, *model));
  }
  Progress progress(f.steps - result.first_step, show);
  int64_t lookups = 0;
  double my_seconds = 0;
  // Every rank starts its clock together (rank 0 made the reference and
  // printed the plan), so no rank's input dist times a peer's set-up.
  SR_RETURN_IF_ERROR(group.Barrier().WithContext("before the first step"));
  RssSampler rss;  // what tables larger than memory keep resident, in the steps
  rss.Start();
  // --model: the windowed metric (every rank keeps its share of the window)
  // and the CSV, which rank 0 writes.
  std::optional<MetricsLog> metrics_log;
  if (model) {
    SR_ASSIGN_OR_RETURN(auto made, MetricsLog::Create(me == 0 ? f.click.metrics_out : "",
                                                      std::max<int64_t>(1, f.click.metrics_window / world)));
    metrics_log.emplace(std::move(made));
  }
  const auto run_start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - run_start).count(); };
  // A held-out pass: every rank's share of the log through the collection
  // and the model, metrics over all of it.
  auto evaluate = [&](int64_t done) -> Status {
    if (!eval_reader || !model) return Status::Ok();
    Predict predict = [&](const KeyedJaggedTensor& sparse, const Tensor& dense) -> StatusOr<Tensor> {
      KeyedJaggedTensor in = sparse;
      if (model->has_position_weights()) {
        SR_ASSIGN_OR_RETURN(in, model->ProcessFeatures(sparse));
      }
      SR_ASSIGN_OR_RETURN(KeyedTensor pooled, mc ? mc->Forward(in, /*training=*/false) : ebc.Forward(in));
      return model->trainer().Predict(pooled.values(), dense);
    };
    SR_ASSIGN_OR_RETURN(metrics::BinaryMetrics m, EvaluatePass(group, *eval_reader, predict));
    result.eval = m;
    SR_RETURN_IF_ERROR(metrics_log->Write("eval", done, done * world * f.batch, input->epoch(), m.log_loss, m, elapsed()));
    if (show) {
      progress.Note(fmt::format("held-out after step {}: AUC {:.4f}, NE {:.4f}, log loss {:.4f}, calibration {:.3f}, "
                                "accuracy {:.4f} ({} samples)",
                                done, m.auc, m.ne, m.log_loss, m.calibration, m.accuracy, m.samples));
    }
    return Status::Ok();
  };
  // The batches through the train pipeline (docs/pipeline.md): with
  // sparse_dist the next batch's fetch and input dist (managed collision's
  // remap included) run on a thread and a group of their own while this
  // batch trains; the numbers are the same either way.
  std::optional<ProcessGroup> dist_group;
  const PipelineMode pipeline_mode = PipelineFor(f, group, session);
  result.pipeline_mode = PipelineModeName(pipeline_mode);
  if (pipeline_mode == PipelineMode::kSparseDist) {
    auto made = group.Duplicate();
    if (!made.ok()) return made.status().WithContext("--pipeline sparse_dist: the input dist's group");
    dist_group.emplace(std::move(made).value());
  }
  struct Fetched {
    int64_t step = 0;
    StepBatch in;
    KeyedJaggedTensor processed;  // with position weights: the weighted batch
  };
  struct StepDist {
    std::optional<DistributedInput> plain;
    std::optional<ShardedManagedCollisionEmbeddingBagCollection::Prepared> mc;
  };
  // With position weights the collection sees the weighted batch, and
  // hands back each id's weight gradient for the model's update.
  const bool weighted = model && model->has_position_weights();
  int64_t next_fetch = result.first_step;
  TrainPipelineSparseDist<Fetched, StepDist> pipeline(
      pipeline_mode, dist_group ? &*dist_group : nullptr,
      [&]() -> StatusOr<std::optional<Fetched>> {
        if (next_fetch >= f.steps) return std::optional<Fetched>();
        Fetched b;
        b.step = next_fetch;
        SR_ASSIGN_OR_RETURN(b.in, input->Next(next_fetch));
        ++next_fetch;
        return std::optional<Fetched>(std::move(b));
      },
      [&](Fetched& b, const ProcessGroup* via) -> StatusOr<StepDist> {
        if (weighted) {
          SR_ASSIGN_OR_RETURN(b.processed, model->ProcessFeatures(b.in.sparse));
        }
        const KeyedJaggedTensor& kjt = weighted ? b.processed : b.in.sparse;
        StepDist d;
        if (mc) {
          SR_ASSIGN_OR_RETURN(auto prepared, mc->Prepare(kjt, via));
          d.mc.emplace(std::move(prepared));
        } else {
          SR_ASSIGN_OR_RETURN(auto distributed, ebc.DistributeInput(kjt, via));
          // Cached tables asking for prefetch_pipeline read this batch's
          // rows from their files while the step thread trains the last.
          if (pipeline_mode == PipelineMode::kSparseDist) SR_RETURN_IF_ERROR(ebc.tables().Prefetch(distributed));
          d.plain.emplace(std::move(distributed));
        }
        return d;
      });
  using Prefetch = decltype(pipeline)::Prefetch;
  for (int64_t step = result.first_step; step < f.steps; ++step) {
    // What of the next batch may start during this step: nothing before a
    // checkpoint or a held-out pass (they see this step's state and the
    // reader's position after it); with position weights only its fetch
    // (the weights this step updates weight its ids before the dist).
    const int64_t done = step + 1;
    const bool saves = !f.checkpoint_dir.empty() && f.save_every > 0 && done % f.save_every == 0;
    const bool evaluates = eval_reader && f.click.eval_every > 0 && done % f.click.eval_every == 0;
    const Prefetch prefetch = saves || evaluates ? Prefetch::kNothing
                              : weighted         ? Prefetch::kFetch
                                                 : Prefetch::kFetchAndDist;
    const auto start = std::chrono::steady_clock::now();
    const double fetch_before = pipeline.times().exposed_fetch;
    SR_ASSIGN_OR_RETURN(auto stage, pipeline.Next(prefetch));
    if (!stage) return InternalError(fmt::format("the train pipeline ended at step {} of {}", step, f.steps));
    StepBatch& in = stage->batch.in;
    const KeyedJaggedTensor& batch = in.sparse;
    result.bad_lines += in.bad_lines;
    lookups += static_cast<int64_t>(batch.values().size());
    ++iteration;
    SR_ASSIGN_OR_RETURN(KeyedTensor out, mc ? mc->Forward(std::move(*stage->dist.mc))
                                            : ebc.Forward(std::move(*stage->dist.plain)));
    if (model) {
      SR_ASSIGN_OR_RETURN(Tensor dpooled, model->Backward(out.values(), in.dense, in.labels));
      std::vector<float> id_weight_grad;
      SR_RETURN_IF_ERROR(ebc.Backward(dpooled, iteration, std::numeric_limits<double>::quiet_NaN(),
                                      weighted ? &id_weight_grad : nullptr));
      SR_RETURN_IF_ERROR(model->Update(weighted ? &id_weight_grad : nullptr));
    } else {
      SR_RETURN_IF_ERROR(ebc.Backward(data.Gradient(me * f.batch, f.batch, width, step), iteration));
    }
    // The step's clock includes waiting for the click log (time the reader
    // did not hide counts against the step), not making synthetic batches.
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!input_is_log) secs = std::max(0.0, secs - (pipeline.times().exposed_fetch - fetch_before));
    my_seconds += secs;
    result.step_seconds.push_back(secs);
    std::string loss_text;
    if (model) {
      // The mean of the ranks' losses (untimed).
      SR_ASSIGN_OR_RETURN(double loss, MeanOverRanks(group, model->last_loss()));
      if (step == result.first_step) result.first_loss = loss;
      result.last_loss = loss;
      losses.push_back(loss);
      if (dump) {
        SR_RETURN_IF_ERROR(dump->Batch(step, data, world, f.batch, model->config().dense_in_features));
      }
      loss_text = fmt::format("loss {:.4f}", loss);
      // The windowed metric every --metrics-every steps (collective, untimed).
      metrics_log->Add(model->last_logits(), in.labels);
      const int64_t done_steps = step + 1;
      if (done_steps % f.click.metrics_every == 0 || done_steps == f.steps) {
        SR_ASSIGN_OR_RETURN(metrics::BinaryMetrics m, metrics_log->Windowed(group));
        result.windowed = m;
        loss_text += fmt::format(", AUC {:.4f}", m.auc);
        SR_RETURN_IF_ERROR(metrics_log->Write("train", done_steps, done_steps * world * f.batch, in.epoch, loss, m,
                                              elapsed()));
      } else if (result.windowed) {
        loss_text += fmt::format(", AUC {:.4f}", result.windowed->auc);
      }
    }
    progress.Step(step + 1 - result.first_step, static_cast<double>(world * f.batch) / secs, loss_text);
    if (f.click.eval_every > 0 && (step + 1) % f.click.eval_every == 0 && step + 1 != f.steps) {
      SR_RETURN_IF_ERROR(evaluate(step + 1));
    }
    if (f.verify) {
      // Every rank's output to rank 0, which runs the same step unsharded.
      SR_ASSIGN_OR_RETURN(Tensor all,
                          AllGatherRows(group, out.values(), std::vector<int64_t>(static_cast<size_t>(world), f.batch)));
      if (ref || mc_ref) {
        const auto global = data.GlobalBatch(world, step, f.batch);
        const Tensor grad = data.Gradient(0, world * f.batch, width, step);
        KeyedJaggedTensor global_in = global;
        if (weighted) {
          SR_ASSIGN_OR_RETURN(global_in, model_ref->ProcessFeatures(global));
        }
        SR_ASSIGN_OR_RETURN(KeyedTensor want, ref ? ref->Forward(global_in) : mc_ref->Forward(global_in, true));
        result.verify->output.Add(all, want.values());
        Tensor ref_grad = grad;
        if (model_ref) {
          const int64_t rows = world * f.batch;
          const Tensor dense = data.DenseFeatures(step, 0, rows, model_ref->config().dense_in_features);
          SR_ASSIGN_OR_RETURN(ref_grad, model_ref->Backward(want.values(), dense, data.Labels(global, dense, step, 0)));
        }
        std::vector<float> id_weight_grad;
        if (ref) {
          SR_RETURN_IF_ERROR(ref->Backward(global_in, ref_grad, iteration, std::numeric_limits<double>::quiet_NaN(),
                                           weighted ? &id_weight_grad : nullptr));
        } else {
          SR_RETURN_IF_ERROR(mc_ref->Backward(ref_grad, iteration));
        }
        if (model_ref) SR_RETURN_IF_ERROR(model_ref->Update(weighted ? &id_weight_grad : nullptr));
      }
      // The other ranks wait here, untimed, while rank 0 runs the reference.
      SR_RETURN_IF_ERROR(group.Barrier().WithContext("after the reference step"));
    }
    // Checkpoints every --save-every steps and after the last; untimed.
    if (!f.checkpoint_dir.empty() && ((f.save_every > 0 && done % f.save_every == 0) || done == f.steps)) {
      const auto start_save = std::chrono::steady_clock::now();
      CheckpointSaveRequest req;
      req.root = f.checkpoint_dir;
      req.step = done;
      req.optimizer_iteration = iteration;
      req.keep_last = static_cast<int>(f.keep_last);
      req.chunk_bytes = f.chunk_bytes;
      req.extra["data"] = input_is_log ? input->Record() : DataRecord(f, world, done);
      DenseCheckpointState dense;
      if (model) {
        dense = model->CheckpointState();
        req.dense = &dense;
        // What `shardrec export` and `infer` rebuild the dense half from.
        req.extra["model"] = model->config().ToJson();
      }
      SR_ASSIGN_OR_RETURN(SavedCheckpoint saved, SaveCheckpoint(ebc.tables(), req, mc ? &mc->collection() : nullptr));
      const double save_secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_save).count();
      result.saved.push_back({saved.dir.string(), done, saved.bytes, save_secs, saved.removed});
      if (show) progress.Note(fmt::format("saved {} ({}) in {:.2f} s", saved.dir.string(), FormatByteSize(saved.bytes), save_secs));
    }
  }
  SR_RETURN_IF_ERROR(evaluate(f.steps));
  SR_ASSIGN_OR_RETURN(result.data_bytes, AllGatherValues(group, input->bytes_read()));
  SR_ASSIGN_OR_RETURN(auto bad, AllGatherValues(group, result.bad_lines));
  result.bad_lines = 0;
  for (int64_t b : bad) result.bad_lines += b;
  result.epochs_done = input->epoch();
  rss.Stop();
  SR_ASSIGN_OR_RETURN(result.rss_max.all, AllGatherValues(group, rss.max_bytes()));
  SR_ASSIGN_OR_RETURN(result.rss_max.without_files, AllGatherValues(group, rss.max_without_files_bytes()));
  SR_ASSIGN_OR_RETURN(result.cache_stats, GatherCacheStats(group, ebc.tables()));
  result.cache_io = CacheIoBackend(ebc.tables());
  SR_ASSIGN_OR_RETURN(auto ns_per_rank, AllGatherValues(group, static_cast<int64_t>(my_seconds * 1e9)));
  for (int64_t n : ns_per_rank) {
    result.rank_seconds.push_back(static_cast<double>(n) * 1e-9);
    result.seconds = std::max(result.seconds, result.rank_seconds.back());
  }
  if (f.verify) {
    for (size_t t = 0; t < tables.size(); ++t) {
      SR_ASSIGN_OR_RETURN(TableContents got, ebc.ReadTable(tables[t].name));
      if (!ref && !mc_ref) continue;
      const EmbeddingTables& want = ref ? ref->tables() : mc_ref->embedding().tables();
      SR_ASSIGN_OR_RETURN(Tensor w, want.ReadWeights(static_cast<int32_t>(t)));
      SR_ASSIGN_OR_RETURN(Tensor w32, ToFloat32(w, tables[t].name));
      SR_ASSIGN_OR_RETURN(Tensor s, want.ReadState(static_cast<int32_t>(t)));
      result.verify->weights.Add(got.weights, w32);
      result.verify->state.Add(got.state, s);
    }
  }
  if (model && !f.model.dump_dir.empty()) {
    SR_RETURN_IF_ERROR(RunDump::Parameters(dump ? &*dump : nullptr, "final", tables, read_table, *model));
    if (dump) {
      nlohmann::json run = {{"model", model->config().ToJson()}, {"world_size", world}, {"batch_per_rank", f.batch},
                            {"first_step", result.first_step}, {"steps", f.steps}, {"optimizer", f.optimizer},
                            {"dense_optimizer", f.model.dense_optimizer}, {"clip_grad_norm", f.model.clip_grad_norm},
                            {"tables", nlohmann::json::array()}};
      for (const auto& t : tables) {
        run["tables"].push_back({{"name", t.name}, {"rows", t.num_embeddings}, {"dim", t.embedding_dim},
                                 {"features", t.feature_names},
                                 {"pooling", t.pooling == PoolingType::kMean ? "mean" : "sum"}});
      }
      SR_RETURN_IF_ERROR(dump->Finish(losses, run));
    }
  }
  if (model) {
    // Replicas must be bit-identical; rank 0's against the unsharded reference.
    SR_RETURN_IF_ERROR(CheckReplicasIdentical(group, model->trainer().Parameters()));
    if (model_ref) {
      result.dense_verify.emplace();
      const auto got = model->trainer().Parameters(), want = model_ref->trainer().Parameters();
      for (size_t i = 0; i < got.size(); ++i) result.dense_verify->Add(got[i]->value, want[i]->value);
    }
    const DenseStepTimes& t = model->trainer().times();
    const std::vector<double> mine_t = {t.forward, t.backward, t.allreduce, t.optimizer};
    for (size_t k = 0; k < mine_t.size(); ++k) {
      SR_ASSIGN_OR_RETURN(auto ns, AllGatherValues(group, static_cast<int64_t>(mine_t[k] * 1e9)));
      result.dense_times.resize(ns.size());
      for (size_t r = 0; r < ns.size(); ++r) {
        double* slot[] = {&result.dense_times[r].forward, &result.dense_times[r].backward,
                          &result.dense_times[r].allreduce, &result.dense_times[r].optimizer};
        *slot[k] = static_cast<double>(ns[r]) * 1e-9;
      }
    }
    result.buckets = model->trainer().buckets();
  }
  SR_ASSIGN_OR_RETURN(result.lookups, AllGatherValues(group, lookups));
  if (mc) {
    SR_ASSIGN_OR_RETURN(result.mc_stats, mc->collection().Stats());
    SR_ASSIGN_OR_RETURN(auto ns, AllGatherValues(group, static_cast<int64_t>(mc->remap_seconds() * 1e9)));
    for (int64_t n : ns) result.remap_seconds.push_back(static_cast<double>(n) * 1e-9);
  }
  SR_ASSIGN_OR_RETURN(int64_t bytes, ebc.tables().BytesOnRank());
  SR_ASSIGN_OR_RETURN(result.bytes, AllGatherValues(group, bytes));
  // Phase and pipeline times in nanoseconds and the bytes sent, every
  // rank's, in one gather.
  const auto& t = ebc.times();
  const PipelineTimes& p = pipeline.times();
  auto ns_of = [](double seconds) { return static_cast<int64_t>(seconds * 1e9); };
  Tensor mine = Tensor::FromVector(std::vector<int64_t>{
      ns_of(t.input_dist), ns_of(t.lookup), ns_of(t.output_dist), ns_of(t.backward), t.input_dist_bytes,
      t.output_dist_bytes, ns_of(p.fetch), ns_of(p.dist), ns_of(p.exposed_fetch), ns_of(p.exposed_dist),
      ns_of(t.backward_dist)});
  constexpr int kFields = 11;
  Tensor all = Tensor::Empty(dtype::kInt64, {kFields * world});
  SR_RETURN_IF_ERROR(group.AllGatherV(mine, &all, std::vector<int64_t>(static_cast<size_t>(world), kFields)));
  const int64_t* ns = all.data<int64_t>();
  auto seconds = [](int64_t n) { return static_cast<double>(n) * 1e-9; };
  for (int r = 0; r < world; ++r, ns += kFields) {
    ShardedStepTimes times;
    times.input_dist = seconds(ns[0]);
    times.lookup = seconds(ns[1]);
    times.output_dist = seconds(ns[2]);
    times.backward = seconds(ns[3]);
    times.steps = t.steps;
    times.input_dist_bytes = ns[4];
    times.output_dist_bytes = ns[5];
    times.backward_dist = seconds(ns[10]);
    result.times.push_back(times);
    PipelineTimes pt;
    pt.fetch = seconds(ns[6]);
    pt.dist = seconds(ns[7]);
    pt.exposed_fetch = seconds(ns[8]);
    pt.exposed_dist = seconds(ns[9]);
    pt.batches = p.batches;
    result.pipeline.push_back(pt);
    // The steps blocked on the reader: what the pipeline did not hide.
    result.data_wait.push_back(pt.exposed_fetch);
  }
  return result;
}

// Each rank's own work in the steps: its lookups and its backward less the
// gradient's return dist (comm, and waiting for the slowest rank). The
// rank with the most is the one the others wait for; the spread is what a
// better placement could win (a replica's all-reduce stays in backward).
double OwnWork(const ShardedStepTimes& t) { return t.lookup + t.backward - t.backward_dist; }

nlohmann::json PerRankSplit(const RankResult& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (size_t i = 0; i < r.times.size(); ++i) {
    const auto& t = r.times[i];
    ranks.push_back({{"lookup", t.lookup}, {"output_dist", t.output_dist}, {"backward", t.backward},
                     {"backward_dist", t.backward_dist}, {"own_work", OwnWork(t)},
                     {"input_dist_exposed", i < r.pipeline.size() ? r.pipeline[i].exposed_dist : 0.0},
                     {"seconds", i < r.rank_seconds.size() ? r.rank_seconds[i] : 0.0}});
  }
  return ranks;
}

std::string PerRankWorkLine(const RankResult& r) {
  std::string line = "  each rank's own work (lookup + backward, less the gradient's dist):";
  double most = 0, least = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < r.times.size(); ++i) {
    const double w = OwnWork(r.times[i]);
    most = std::max(most, w);
    least = std::min(least, w);
    line += fmt::format(" [{}] {:.3f} s", i, w);
  }
  if (most > 0) line += fmt::format("; the least is {:.0f}% of the most", 100.0 * least / most);
  return line + "\n";
}

// --json's kernel_threads: a number (0: all cores), the user's text if it
// is not one (the kernel refuses it first), or null for a kernel that sizes
// its pool itself.
nlohmann::json KernelThreadsJson(const std::string& threads) {
  if (threads.empty()) return nullptr;
  if (const auto n = ThreadsCount(threads)) return *n;
  return threads;
}

void Report(const RankResult& r, const TrainFlags& f, const ProcessGroup& group, const ShardingPlan& plan, bool json,
            const std::string& data_desc) {
  const int world = group.world_size();
  const int64_t steps = f.steps - r.first_step;
  const double samples = static_cast<double>(world * f.batch * steps);
  nlohmann::json checkpoints = nlohmann::json::array();
  for (const auto& c : r.saved) {
    checkpoints.push_back({{"dir", c.dir}, {"step", c.step}, {"bytes", c.bytes}, {"seconds", c.seconds},
                           {"bytes_per_s", c.bytes / std::max(c.seconds, 1e-9)}, {"removed", c.removed}});
  }
  if (steps <= 0) {
    const std::string m = fmt::format("nothing to train: the checkpoint {} is at step {}, and --steps is {}",
                                      r.resumed ? r.resumed->dir.string() : "", r.first_step, f.steps);
    if (json) std::cout << nlohmann::json{{"steps", 0}, {"first_step", r.first_step}, {"note", m}}.dump() << "\n";
    else std::cout << m << "\n";
    return;
  }
  int64_t lookups = 0;
  for (int64_t l : r.lookups) lookups += l;
  // The split: each phase's mean over ranks, as a share of the ranks' mean
  // timed seconds; "other" is what no phase covers (resetting evicted rows,
  // assembling outputs), so the shares add to 100%.
  ShardedStepTimes mean;
  double mean_seconds = 0;
  // The input dist the steps waited for (unpipelined: all of it; managed
  // collision's remap included) and what the pipeline hid.
  PipelineTimes pipe;
  for (const auto& p : r.pipeline) {
    pipe.dist += p.dist / world;
    pipe.exposed_dist += p.exposed_dist / world;
    pipe.fetch += p.fetch / world;
    pipe.exposed_fetch += p.exposed_fetch / world;
  }
  const double dist_hidden = std::max(0.0, pipe.dist - pipe.exposed_dist);
  const double data_exposed = f.click.train ? pipe.exposed_fetch : 0.0;
  for (size_t i = 0; i < r.times.size(); ++i) {
    const auto& t = r.times[i];
    mean.lookup += t.lookup / world;
    mean.output_dist += t.output_dist / world;
    mean.backward += t.backward / world;
    mean_seconds += r.rank_seconds[i] / world;
  }
  mean.input_dist = pipe.exposed_dist;
  // Bytes each rank sent to the others per step, mean over ranks.
  int64_t bytes_in = 0, bytes_out = 0;
  for (const auto& t : r.times) {
    bytes_in += t.input_dist_bytes / std::max<int64_t>(1, steps) / world;
    bytes_out += t.output_dist_bytes / std::max<int64_t>(1, steps) / world;
  }
  DenseStepTimes dense;  // --model's phases, mean over ranks
  for (const auto& t : r.dense_times) {
    dense.forward += t.forward / world;
    dense.backward += t.backward / world;
    dense.allreduce += t.allreduce / world;
    dense.optimizer += t.optimizer / world;
  }
  const double dense_sum = dense.forward + dense.backward + dense.allreduce + dense.optimizer;
  const double other = std::max(0.0, mean_seconds - (mean.input_dist + mean.lookup + mean.output_dist + mean.backward +
                                                     dense_sum + data_exposed));
  const bool dense_ok = !r.dense_verify || r.dense_verify->scaled <= f.tolerance;
  auto pct = [&](double x) { return mean_seconds > 0 ? 100.0 * x / mean_seconds : 0.0; };
  if (json) {
    nlohmann::json j = {{"world_size", world},
                        {"comm", group.backend()},
                        {"kernel", f.kernel},
                        {"kernel_threads", KernelThreadsJson(r.kernel_threads)},
                        {"tables", plan.tables.size()},
                        {"batch_per_rank", f.batch},
                        {"steps", steps},
                        {"first_step", r.first_step},
                        {"checkpoints", checkpoints},
                        {"data", data_desc},
                        {"output_dist", r.output_dist},
                        {"seconds", r.seconds},
                        {"samples_per_s", samples / r.seconds},
                        {"lookups_per_s", static_cast<double>(lookups) / r.seconds},
                        {"step_samples_per_s", nlohmann::json::array()},
                        {"seconds_per_rank", r.rank_seconds},
                        {"time_split_s_per_rank", PerRankSplit(r)},
                        {"pipeline", r.pipeline_mode},
                        {"time_split_s", {{"input_dist", mean.input_dist}, {"lookup", mean.lookup},
                                          {"output_dist", mean.output_dist}, {"backward", mean.backward},
                                          {"other", other}, {"rank_mean", mean_seconds}}},
                        {"input_dist_s", {{"total", pipe.dist}, {"exposed", pipe.exposed_dist},
                                          {"hidden", dist_hidden}}},
                        {"bytes_per_step", {{"input_dist", bytes_in}, {"output_dist", bytes_out}}},
                        {"qcomm", plan.qcomm.ToString()},
                        {"bytes_per_rank", r.bytes},
                        {"plan", nlohmann::json::parse(PlanToJson(plan))}};
    if (f.planner) {
      j["planner"] = {{"estimated_step_s", f.planner_estimate_s},
                      {"estimated_samples_per_s", static_cast<double>(world * f.batch) / f.planner_estimate_s}};
    }
    for (double s : r.step_seconds) j["step_samples_per_s"].push_back(static_cast<double>(world * f.batch) / s);
    if (!r.dense_times.empty()) {
      auto& split = j["time_split_s"];
      split["dense_forward"] = dense.forward;
      split["dense_backward"] = dense.backward;
      split["allreduce_exposed"] = dense.allreduce;
      split["dense_optimizer"] = dense.optimizer;
      j["model"] = {{"name", f.model.model}, {"first_loss", r.first_loss}, {"last_loss", r.last_loss},
                    {"dense_optimizer", f.model.dense_optimizer}, {"buckets", r.buckets}};
    }
    auto metrics_json = [](const metrics::BinaryMetrics& m) {
      return nlohmann::json{{"samples", m.samples}, {"auc", m.auc}, {"ne", m.ne}, {"log_loss", m.log_loss},
                            {"calibration", m.calibration}, {"accuracy", m.accuracy}};
    };
    if (r.eval) j["eval"] = metrics_json(*r.eval);
    if (r.windowed) j["train_window"] = metrics_json(*r.windowed);
    if (f.click.train) {
      j["time_split_s"]["data_wait"] = data_exposed;
      j["data_bytes_per_rank"] = r.data_bytes;
      j["data_wait_s_per_rank"] = r.data_wait;
      j["bad_lines"] = r.bad_lines;
    }
    if (r.resumed) {
      j["resumed_from"] = {{"dir", r.resumed->dir.string()}, {"step", r.first_step}, {"seconds", r.resume_seconds},
                           {"optimizer_state_loaded", r.resumed->optimizer_state_loaded}};
    }
    if (!r.mc_stats.empty()) {
      double remap = 0;
      for (double s : r.remap_seconds) remap += s / world;
      j["managed_collision_s"] = remap;
      for (const auto& [table, s] : r.mc_stats) {
        j["managed_collision"][table] = {{"lookups", s.lookups},       {"hits", s.hits},
                                         {"hit_rate", s.hit_rate()},   {"defaulted", s.defaulted},
                                         {"default_rate", s.default_rate()}, {"residual", s.residual},
                                         {"admissions", s.admissions}, {"refusals", s.refusals},
                                         {"evictions", s.evictions},   {"rounds", s.rounds},
                                         {"occupied", s.occupied},     {"capacity", s.capacity},
                                         {"occupancy", s.occupancy()}, {"dist", r.mc_dist.at(table)}};
      }
    }
    if (!r.cache_stats.empty()) j["cache"] = CacheReportJson(r.cache_stats, r.rss_max, f.cache.budget_bytes, f.cache.cache_dir, r.cache_io);
    if (r.verify) {
      const auto& v = *r.verify;
      j["verify"] = {{"max_abs_diff_output", v.output.abs}, {"max_abs_diff_weights", v.weights.abs},
                     {"max_abs_diff_optimizer_state", v.state.abs},
                     {"max_scaled_diff", std::max({v.output.scaled, v.weights.scaled, v.state.scaled})},
                     {"tolerance", f.tolerance}, {"ok", v.Within(f.tolerance) && dense_ok}};
      if (r.dense_verify) j["verify"]["max_abs_diff_dense"] = r.dense_verify->abs;
    }
    std::cout << j.dump() << "\n";
    return;
  }
  std::string out;
  if (r.resumed) {
    out += fmt::format("resumed from {} (step {}{}) in {:.2f} s\n", r.resumed->dir.string(), r.first_step,
                       r.resumed->optimizer_state_loaded ? ", with the optimizer state" : ", weights only",
                       r.resume_seconds);
  }
  out += fmt::format("done: {} in {:.3f} s (the slowest rank): {} samples/s, {} lookups/s ({} together)\n",
                     Counted(steps, "step"), r.seconds, Rate(samples / r.seconds),
                     Rate(static_cast<double>(lookups) / r.seconds), Counted(world, "rank"));
  out += fmt::format("time split (mean over ranks, {:.3f} s): input dist {:.1f}% ({:.3f} s), lookup {:.1f}% ({:.3f} s), "
                     "output dist {:.1f}% ({:.3f} s), backward {:.1f}% ({:.3f} s), {}other {:.1f}% ({:.3f} s); "
                     "output dist: {}\n",
                     mean_seconds, pct(mean.input_dist), mean.input_dist, pct(mean.lookup), mean.lookup,
                     pct(mean.output_dist), mean.output_dist, pct(mean.backward), mean.backward,
                     f.click.train ? fmt::format("data wait {:.1f}% ({:.3f} s), ", pct(data_exposed), data_exposed) : "",
                     pct(other), other, r.output_dist);
  if (world > 1) out += PerRankWorkLine(r);
  out += fmt::format("  on the wire per step and rank: input dist {}, output dist {} (forward + backward{})\n",
                     FormatByteSize(bytes_in), FormatByteSize(bytes_out),
                     plan.qcomm.empty() ? ", float32" : ", codecs " + plan.qcomm.ToString());
  out += fmt::format("  pipeline {}: input dist {:.3f} s per rank{}, {:.3f} s exposed, {:.3f} s hidden ({:.0f}%)\n",
                     r.pipeline_mode, pipe.dist, r.mc_stats.empty() ? "" : " (managed collision's remap included)",
                     pipe.exposed_dist, dist_hidden, pipe.dist > 0 ? 100.0 * dist_hidden / pipe.dist : 0.0);
  if (!r.dense_times.empty()) {
    out += fmt::format("  dense ({}): forward {:.1f}% ({:.3f} s), backward {:.1f}% ({:.3f} s), all-reduce not hidden by "
                       "backward {:.1f}% ({:.3f} s, {} bucket(s)), optimizer {:.1f}% ({:.3f} s); loss {:.4f} -> {:.4f}\n",
                       f.model.model, pct(dense.forward), dense.forward, pct(dense.backward), dense.backward,
                       pct(dense.allreduce), dense.allreduce, r.buckets, pct(dense.optimizer), dense.optimizer,
                       r.first_loss, r.last_loss);
  }
  if (!r.mc_stats.empty()) {
    double remap = 0;
    for (double s : r.remap_seconds) remap += s / world;
    out += fmt::format("managed collision ({:.3f} s per rank remapping and resetting, {:.1f}% of the steps):\n",
                       remap, 100.0 * remap / r.seconds);
    for (const auto& [table, s] : r.mc_stats) {
      out += fmt::format("  {}: hit rate {:.1f}%, default row {:.1f}%, residual {}, admissions {}, evictions {}, "
                         "refusals {}, occupancy {}/{} ({:.1f}%), {} rounds; {}\n",
                         table, 100 * s.hit_rate(), 100 * s.default_rate(), s.residual, s.admissions, s.evictions,
                         s.refusals, s.occupied, s.capacity, 100 * s.occupancy(), s.rounds,
                         r.mc_dist.at(table) == "fused" ? "fused into the input dist" : r.mc_dist.at(table));
    }
  }
  out += FormatCacheReport(r.cache_stats, r.rss_max, f.cache.budget_bytes, f.cache.cache_dir, r.cache_io);
  for (const auto& c : r.saved) {
    out += fmt::format("checkpoint {}: {} in {:.2f} s ({}B/s){}\n", c.dir, FormatByteSize(c.bytes), c.seconds,
                       Rate(static_cast<double>(c.bytes) / std::max(c.seconds, 1e-9)),
                       c.removed.empty() ? "" : "; removed by --keep-last: " + fmt::format("{}", fmt::join(c.removed, ", ")));
  }
  if (!r.data_bytes.empty() && f.click.train) {
    int64_t bytes = 0;
    double wait = 0;
    for (size_t i = 0; i < r.data_bytes.size(); ++i) {
      bytes = std::max(bytes, r.data_bytes[i]);
      wait += r.data_wait[i] / world;
    }
    out += fmt::format("data: {} ({} read per rank, {} epoch(s) begun{}); waiting for it {:.3f} s per rank, {:.1f}% of "
                       "the steps\n",
                       f.click.data, FormatByteSize(bytes), r.epochs_done + 1,
                       r.bad_lines > 0 ? fmt::format(", {} bad line(s) skipped", r.bad_lines) : "", wait,
                       mean_seconds > 0 ? 100.0 * wait / mean_seconds : 0.0);
  }
  if (r.windowed) {
    out += fmt::format("training window (last {} samples): AUC {:.4f}, NE {:.4f}, log loss {:.4f}, calibration {:.3f}\n",
                       r.windowed->samples, r.windowed->auc, r.windowed->ne, r.windowed->log_loss, r.windowed->calibration);
  }
  if (r.eval) {
    out += fmt::format("held-out ({} samples): AUC {:.4f}, NE {:.4f}, log loss {:.4f}, calibration {:.3f}, accuracy "
                       "{:.4f}\n",
                       r.eval->samples, r.eval->auc, r.eval->ne, r.eval->log_loss, r.eval->calibration, r.eval->accuracy);
  }
  out += "memory per rank (weights + optimizer state):";
  for (size_t i = 0; i < r.bytes.size(); ++i) out += fmt::format(" [{}] {}", i, FormatByteSize(r.bytes[i]));
  out += "\n";
  if (r.verify) {
    const auto& v = *r.verify;
    out += fmt::format("verify against the unsharded run: max |diff| outputs {:.3g}, weights {:.3g}, optimizer state "
                       "{:.3g}{}; relative to max(1, |value|) at most {:.3g} (tolerance {:.3g}): {}\n",
                       v.output.abs, v.weights.abs, v.state.abs,
                       r.dense_verify ? fmt::format(", dense parameters {:.3g}", r.dense_verify->abs) : "",
                       std::max({v.output.scaled, v.weights.scaled, v.state.scaled,
                                 r.dense_verify ? r.dense_verify->scaled : 0.0}),
                       f.tolerance, v.Within(f.tolerance) && dense_ok ? "OK" : "DIFFERENT");
    out += "  (with --verify, rank 0 runs the unsharded steps between the timed sharded ones; they are not timed)\n";
  }
  std::cout << out << std::flush;
}

}  // namespace

// --verify's default tolerance with quantized comm codecs (docs/comm.md):
// the worst codec's, measured over 30 SGD steps of the default tables; an
// adaptive optimizer (Adagrad, Adam) divides by the gradients' own size, so
// a gradient near zero that a codec rounds differently moves its weight by
// up to the learning rate, twice: 2 x lr is added.
double VerifyToleranceWithCodecs(const QCommConfig& qcomm, const OptimizerSpec& optimizer) {
  auto codec_tolerance = [](const std::string& name) {
    if (IsNoOpCodec(name)) return 0.0;
    if (name == "fp16") return 2e-3;
    if (name == "bf16") return 1e-2;
    if (name == "int8") return 2e-2;
    return 1.5e-1;  // fp8 and plugins' codecs
  };
  double tol = 1e-5;
  for (const auto& [op, c] : qcomm.ops) {
    tol = std::max({tol, codec_tolerance(c.forward), codec_tolerance(c.backward)});
  }
  if (optimizer.optimizer != SR_OPTIMIZER_SGD) {
    double lr = 0.01;
    for (const auto& [key, value] : optimizer.params.items()) {
      if (key == "lr" || key == "learning_rate") lr = std::strtod(value.c_str(), nullptr);
    }
    tol += 2 * std::fabs(lr);
  }
  return tol;
}

int RunTrain(const std::vector<std::string>& args) {
  GlobalOptions g;
  CommFlags comm;
  TrainFlags f;
  po::options_description desc("train options");
  AddGlobalOptions(desc, &g);
  AddCommOptions(desc, &comm);
  desc.add_options()
      ("tables", po::value(&f.tables)->default_value(f.tables),
       "a tables JSON file (see `shardrec embed --help`), or a spec: comma-separated [COUNTx]ROWSxDIM[:sum|mean], "
       "table i named t<i> with feature f<i>")
      ("plan", po::value(&f.plan), "a JSON plan file in the seeds' vocabulary (per table: sharding_type, "
       "compute_kernel, ranks, sharder_options, shards); see docs/sharding.md")
      ("sharder", po::value(&f.sharder),
       "one sharder for every table: table_wise, row_wise, column_wise, table_row_wise, data_parallel, or a "
       "plugin's (default without --plan: balance table bytes across ranks, table-wise)")
      ("plan-out", po::value(&f.plan_out), "write the plan in effect as a plan file (explicit shards), to repeat a run")
      ("planner", po::bool_switch(&f.planner),
       "plan before running: the planner chooses each table's sharder, kernel and ranks for this world, from "
       "--topology, --constraints and the run's own traffic (--ids, --pooling-factor, or --stats-from); see "
       "`shardrec plan --help` and docs/planner.md")
      ("kernel", po::value(&f.kernel)->default_value(f.kernel), "compute-kernel plugin for tables the plan leaves open")
      ("memory-per-rank", po::value(&f.memory_per_rank),
       "bytes of weights + optimizer state each rank may hold (e.g. 512MiB, 2GiB); a plan over it is refused")
      ("max-memory", po::value(&f.max_memory),
       "the most this machine's ranks may allocate for tables and optimizer state (e.g. 20GiB); default: the "
       "memory available now (MemAvailable, or the cgroup's limit). A bigger job is refused before allocating")
      ("batch", po::value(&f.batch)->default_value(f.batch), "samples per rank per step")
      ("steps", po::value(&f.steps)->default_value(f.steps), "training steps")
      ("seed", po::value(&f.seed)->default_value(f.seed), "seed of the initial weights and the synthetic data")
      ("optimizer", po::value(&f.optimizer)->default_value(f.optimizer),
       "fused optimizer NAME[,key=value...]: sgd, adagrad, rowwise_adagrad, adam; keys lr, eps, beta1, beta2, "
       "weight_decay")
      ("ids", po::value(&f.ids)->default_value(f.ids), "id distribution: uniform, or zipf:ALPHA (small ids hot)")
      ("pooling-factor", po::value(&f.pooling_factor)->default_value(f.pooling_factor),
       "mean ids per bag (lengths uniform in [0, 2P]): one value, or comma-separated, one per feature")
      ("bounds-check", po::value(&f.bounds)->default_value(f.bounds), "ids outside a table: fatal, warning, ignore")
      ("no-fast-paths", po::bool_switch(&f.no_fast_paths),
       "use the generic output dist even for pure table-wise / row-wise plans")
      ("qcomm", po::value(&f.qcomm),
       "quantized comm codecs of the output dist, OP=CODEC or OP=FORWARD:BACKWARD, comma-separated: OP is "
       "pooled_embeddings_all_to_all, pooled_embeddings_reduce_scatter, sequence_embeddings_all_to_all or all; "
       "CODEC fp32 (none), fp16, bf16, int8, fp8 or a codec plugin's. Wins over the plan file's qcomm_codecs "
       "(docs/comm.md)")
      ("pipeline", po::value(&f.pipeline)->default_value(f.pipeline),
       "sparse_dist: the next batch's reading and input dist (managed collision's remap included) run on a thread of "
       "their own while this batch trains; none: one after another; auto: none where the ranks share one "
       "host's memory (--comm local, and gloo on one host, which then exchanges through shared memory: nothing to "
       "hide, and the thread takes a core), sparse_dist otherwise. The numbers are the same bit for bit "
       "(docs/pipeline.md)")
      ("verify", po::bool_switch(&f.verify),
       "also run every step unsharded on rank 0 and print the largest |difference| of outputs, weights and "
       "optimizer state (exit 1 when one exceeds --tolerance x max(1, |value|))")
      ("tolerance", DoubleValue(&f.tolerance),
       "--verify's allowed difference (default 1e-5; with --qcomm codecs the codecs' own, docs/comm.md)")
      ("managed-collision", po::value(&f.managed_collision)->composing(),
       "TABLE:KEY=VALUE,... managed collision for a table (repeatable): zch_size (default: the table's rows "
       "less mch_size), eviction_interval, policy (lru, lfu, distance_lfu, a component name or path/to/lib.so), "
       "mch_size, buckets, input_hash, input_hash_size, threshold, decay_exponent and other policy options; "
       "see docs/managed_collision.md")
      ("mc-dist", po::value(&f.mc_dist)->default_value(f.mc_dist),
       "how a sharded managed table meets the input dist: fused (where the plan puts each bucket's rows on one "
       "rank: table_wise, or row_wise with mch_size=0 and zch_size and buckets multiples of the world size, raw ids "
       "ride the embedding's input dist and are remapped where their rows live; other tables separate) or "
       "separate (the collection's own collectives for every table)")
      ("raw-id-space", po::value(&f.raw_id_space)->default_value(f.raw_id_space),
       "distinct raw ids a managed (or --hashed-ids) table's feature draws from (0: 10 x the table's rows)")
      ("hashed-ids", po::value(&f.hashed_ids)->composing(),
       "TABLE (repeatable): a table without managed collision draws raw ids as a managed one would (from "
       "--raw-id-space) and folds them into its rows (raw id mod rows), as a model without managed collision "
       "does. The baseline for managed collision's cost: the same ids, no remap (docs/managed_collision.md)")
      ("checkpoint-dir", po::value(&f.checkpoint_dir),
       "save checkpoints here, as DIR/step-NNNNNNNN (every --save-every steps, and after the last step); they load "
       "under any plan and world size (docs/checkpoints.md)")
      ("save-every", po::value(&f.save_every)->default_value(f.save_every),
       "steps between checkpoints (0: only after the last step)")
      ("keep-last", po::value(&f.keep_last)->default_value(f.keep_last),
       "keep only the newest K checkpoints in --checkpoint-dir (0: keep all)")
      ("resume", po::value(&f.resume),
       "continue from a checkpoint: DIR is one (DIR/manifest.json), or a --checkpoint-dir (its newest). Restores "
       "the tables, the optimizer state, the step and the data stream's position; --steps is the step to reach")
      ("reset-optimizer", po::bool_switch(&f.reset_optimizer),
       "with --resume: load the weights only and start the optimizer afresh (needed when --optimizer differs "
       "from the checkpoint's)")
      ("checkpoint-chunk", po::value(&f.checkpoint_chunk)->default_value(f.checkpoint_chunk),
       "rows are saved and loaded in pieces of at most this many bytes per rank, and of at most 1 MiB (larger pieces leave "
       "the CPU cache and are slower): a smaller value bounds the extra memory of a save or load further");
  AddModelOptions(desc, &f.model);
  AddClickDataOptions(desc, &f.click);
  AddPlannerOptions(desc, &f.planner_flags, /*with_hosts=*/false);
  AddCacheOptions(desc, f.cache);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("train", args, desc, nullptr, &vm, &code,
             "\n\nTrains sharded embedding tables on synthetic data and reports samples/s, lookups/s, the time\n"
             "split (input dist / lookup / output dist / backward) and memory per rank. With no flags: the\n"
             "default tables on 2 ranks as threads (local comm), CPU kernel, the balanced table-wise plan.\n\n"
             "examples:\n"
             "  shardrec train                                              # the embedded default job\n"
             "  shardrec train --sharder row_wise --world-size 4 --verify   # 4 threads, row-wise, checked\n"
             "  shardrec train --comm gloo --world-size 2 --ids zipf:1.05   # 2 processes (shared memory)\n"
             "  shardrec train --tables 8x1000000x128 --plan plan.json --json\n"
             "  shardrec train --model dlrm --tables 26x20000x64 --sharder row_wise --verify   # a whole DLRM\n"
             "  shardrec train --tables 1x32000000x64 --memory-budget 2GiB --cache-dir /mnt/ssd/cache   # 8 GiB table, 2 GiB RAM\n"
             "  shardrec train --steps 1000 --checkpoint-dir ckpt --save-every 100 --keep-last 3\n"
             "  shardrec train --steps 2000 --resume ckpt --checkpoint-dir ckpt --sharder row_wise --world-size 4\n"
             "  shardrec launch --nproc-per-node 4 -- shardrec train --comm gloo --sharder table_row_wise")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit_code = kExitUsage) {
    std::cerr << "shardrec train: " << m << "\n";
    return exit_code;
  };
  if (f.batch <= 0 || f.steps <= 0) return fail("--batch and --steps must be positive");
  if (!f.plan.empty() && !f.sharder.empty()) return fail("give --plan or --sharder, not both");
  if (f.planner && (!f.plan.empty() || !f.sharder.empty())) return fail("give --planner, --plan or --sharder, one of them");
  for (const char* flag : {"topology", "constraints", "stats-from"}) {
    if (vm.count(flag) && !f.planner) return fail(std::string("--") + flag + " is the planner's: add --planner");
  }
  if (!(f.tolerance >= 0)) return fail("--tolerance must be >= 0");
  if (f.save_every < 0 || f.keep_last < 0) return fail("--save-every and --keep-last must be >= 0");
  if ((f.save_every > 0 || f.keep_last > 0) && f.checkpoint_dir.empty()) {
    return fail("--save-every and --keep-last need --checkpoint-dir");
  }
  if (f.reset_optimizer && f.resume.empty()) return fail("--reset-optimizer needs --resume");
  // auto is resolved per job once its ranks are placed (PipelineFor).
  f.comm_name = comm.comm;
  if (f.pipeline != "auto") {
    auto mode = ParsePipelineMode(f.pipeline);
    if (!mode.ok()) return fail("--pipeline: " + mode.status().message() + " (or auto)");
    f.pipeline_mode = mode.value();
  }
  if (auto chunk = ParseByteSize(f.checkpoint_chunk); !chunk.ok() || chunk.value() <= 0) {
    return fail("--checkpoint-chunk: " + (chunk.ok() ? std::string("must be positive") : chunk.status().message()));
  } else {
    f.chunk_bytes = chunk.value();
  }
  if (std::error_code ec; !f.checkpoint_dir.empty() &&
                          std::filesystem::exists(std::filesystem::path(f.checkpoint_dir) / "manifest.json", ec)) {
    // Its own checkpoints would nest in it, and --resume DIR would keep finding this one.
    return fail("--checkpoint-dir " + f.checkpoint_dir + " is a checkpoint itself; keep the run's checkpoints in a "
                "directory of their own");
  }
  if (!f.checkpoint_dir.empty() && f.resume.empty()) {
    // A directory with another run's checkpoints is not silently mixed into.
    for (const auto& e : ListCheckpoints(f.checkpoint_dir)) {
      if (e.published) {
        return fail("--checkpoint-dir " + f.checkpoint_dir + " holds checkpoints already (" + e.name +
                    "); continue that run with --resume " + f.checkpoint_dir + ", or choose another directory");
      }
    }
  }
  if (f.model.model.empty() && !f.model.dump_dir.empty()) return fail("--dump-dir needs --model");
  if (f.model.model.empty() && f.model.position_weighted != 0) return fail("--position-weighted needs --model");
  if (Status s = CheckClickDataFlags(&f.click); !s.ok()) return fail(s.message());
  if (f.model.model.empty() && (f.click.train || f.click.eval || !f.click.metrics_out.empty())) {
    return fail("--data, --eval-data and --metrics-out need --model (a click log trains a whole model)");
  }
  if (f.click.train && f.verify) {
    return fail("--verify replays synthetic batches on rank 0; with --data, judge the model with --eval-data");
  }
  if (f.click.train && !f.model.dump_dir.empty()) return fail("--dump-dir replays synthetic batches; not with --data");
  if (f.click.train && !f.hashed_ids.empty()) {
    return fail("--hashed-ids shapes the synthetic ids; with --data the log's ids are what the tables get");
  }
  if (f.click.epochs > 0 && !vm["steps"].defaulted()) return fail("give --epochs or --steps, not both");
  if (f.click.train || f.click.eval) {
    auto config = LoadModelConfig(f.model);
    if (config.ok() && config->dense_in_features != shardrec::data::kCriteoDense) {
      return fail(fmt::format("--data: a Criteo log has {} dense features, the model's dense_in_features is {}",
                              shardrec::data::kCriteoDense, config->dense_in_features));
    }
  }
  if (!f.model.model.empty()) {
    if (Status s = CheckModelFlags(&f.model); !s.ok()) return fail(s.message());
    if (vm["tables"].defaulted()) {
      auto spec = DefaultModelTables(f.model.model);
      if (!spec.ok()) return fail(spec.status().message());
      f.tables = spec.value();
    }
  }
  // The default job is two ranks; a launcher's world wins.
  auto env = ReadDistEnv();
  if (vm["world-size"].defaulted() && env.ok() && !env->launched()) comm.world_size = 2;

  auto tables = TablesFromFileOrSpec(f.tables);
  if (!tables.ok()) return fail("--tables: " + tables.status().message());
  std::vector<double> pooling;
  for (size_t start = 0; start <= f.pooling_factor.size();) {
    const size_t end = std::min(f.pooling_factor.find(',', start), f.pooling_factor.size());
    try {
      pooling.push_back(std::stod(f.pooling_factor.substr(start, end - start)));
    } catch (...) {
      return fail("--pooling-factor '" + f.pooling_factor + "': expected numbers separated by commas");
    }
    start = end + 1;
  }
  // Managed collision: the tables file's, then --managed-collision (which wins).
  auto managed = ManagedCollisionFromTables(tables.value());
  if (!managed.ok()) return fail("--tables: " + managed.status().message());
  for (const std::string& item : f.managed_collision) {
    const size_t colon = item.find(':');
    if (colon == std::string::npos || colon == 0) {
      return fail("--managed-collision '" + item + "': expected TABLE:KEY=VALUE,... (e.g. t0:zch_size=100000,policy=lru)");
    }
    const std::string name = item.substr(0, colon);
    auto it = std::find_if(tables->begin(), tables->end(), [&](const auto& t) { return t.name == name; });
    if (it == tables->end()) {
      std::string names;
      for (const auto& t : tables.value()) names += (names.empty() ? "" : ", ") + t.name;
      return fail("--managed-collision: no table '" + name + "' (tables: " + names + ")");
    }
    auto parsed = ParseManagedCollision(name, item.substr(colon + 1), it->num_embeddings);
    if (!parsed.ok()) return fail("--managed-collision: " + parsed.status().message());
    (*managed)[name] = parsed.value();
    it->managed_collision = ManagedCollisionSpec(parsed.value());
  }
  if (!f.model.dump_dir.empty() && !managed->empty()) {
    return fail("--dump-dir with managed collision: the dump holds raw ids, which a reference cannot remap");
  }
  if (Status st = ValidateManagedTables(tables.value(), managed.value()); !st.ok()) return fail(st.message());
  if (!f.model.model.empty()) {
    if (Status st = MarkPositionWeightedTables(f.model, &tables.value()); !st.ok()) return fail(st.message());
  }
  if (f.raw_id_space < 0) return fail("--raw-id-space must be >= 0");
  if (f.mc_dist != "fused" && f.mc_dist != "separate") {
    return fail("--mc-dist '" + f.mc_dist + "': expected fused or separate");
  }
  std::vector<int64_t> raw_space;
  std::vector<uint8_t> hashed(tables->size(), 0);
  for (const std::string& name : f.hashed_ids) {
    auto it = std::find_if(tables->begin(), tables->end(), [&](const auto& t) { return t.name == name; });
    if (it == tables->end()) return fail("--hashed-ids: no table '" + name + "'");
    if (managed->count(name)) {
      return fail("--hashed-ids " + name + ": the table has managed collision, which maps its raw ids itself");
    }
    hashed[static_cast<size_t>(it - tables->begin())] = 1;
  }
  for (size_t t = 0; t < tables->size(); ++t) {
    const auto& table = tables.value()[t];
    const bool raw = managed->count(table.name) || hashed[t];
    raw_space.push_back(raw ? (f.raw_id_space > 0 ? f.raw_id_space : 10 * table.num_embeddings) : 0);
  }
  auto data = SyntheticData::Create(tables.value(), f.ids, pooling, f.seed, raw_space, hashed);
  if (!data.ok()) return fail(data.status().message());
  EmbeddingModuleOptions options;
  options.kernel = f.kernel;
  options.init_seed = f.seed;
  auto optimizer = OptimizerSpec::Parse(f.optimizer);
  if (!optimizer.ok()) return fail("--optimizer: " + optimizer.status().message());
  options.optimizer = optimizer.value();
  auto bounds = ParseBoundsCheckMode(f.bounds);
  if (!bounds.ok()) return fail("--bounds-check: " + bounds.status().message());
  options.bounds_check = bounds.value();
  int64_t memory_per_rank = 0;
  if (Status st = ParseCacheFlags(f.cache); !st.ok()) return fail(st.message());
  if (f.cache.budget_bytes > 0 && !f.memory_per_rank.empty()) {
    return fail("give --memory-budget (tables over it are cached) or --memory-per-rank (a plan over it is refused), "
                "not both");
  }
  options.cache_dir = f.cache.cache_dir;
  if (!f.memory_per_rank.empty()) {
    auto bytes = ParseByteSize(f.memory_per_rank);
    if (!bytes.ok()) return fail("--memory-per-rank: " + bytes.status().message());
    memory_per_rank = bytes.value();
  }
  int64_t max_memory = 0;
  if (!f.max_memory.empty()) {
    auto bytes = ParseByteSize(f.max_memory);
    if (!bytes.ok()) return fail("--max-memory: " + bytes.status().message());
    max_memory = bytes.value();
  }
  // Read once, before ranks start: ranks as threads judge by one figure.
  const MemoryLimit memory_limit = MemoryLimitFor(max_memory, "--max-memory");
  std::optional<PlanSpec> spec;
  QCommConfig qcomm;  // the plan file's codecs, then --qcomm's
  if (!f.plan.empty()) {
    auto loaded = LoadPlanFile(f.plan);
    if (!loaded.ok()) return fail(loaded.status().message());
    spec = std::move(loaded).value();
    auto codecs = LoadPlanQComm(f.plan);
    if (!codecs.ok()) return fail(codecs.status().message());
    qcomm = std::move(codecs).value();
  }
  if (!f.qcomm.empty()) {
    auto codecs = ParseQCommFlag(f.qcomm);
    if (!codecs.ok()) return fail(codecs.status().message());
    qcomm.Merge(codecs.value());
  }
  // The verify line shows the tolerance in effect.
  if (f.verify && vm["tolerance"].defaulted() && !qcomm.empty()) {
    f.tolerance = VerifyToleranceWithCodecs(qcomm, options.optimizer);
  }

  // --epochs: the steps that many passes over --data take at this world size.
  if (f.click.epochs > 0) {
    const int world = env.ok() && env->launched() ? env->world_size : comm.world_size;
    const int64_t per_epoch = f.click.train_samples / (std::max(world, 1) * f.batch);
    if (per_epoch == 0) {
      return fail(fmt::format("--data holds {} samples, fewer than one global batch ({} ranks x {})",
                              f.click.train_samples, world, f.batch));
    }
    f.steps = f.click.epochs * per_epoch;
  }

  HostSession session;
  if (!OpenSession("train", g, kAllPluginKinds, &session)) return kExitUsage;
  // Every codec named must exist, said once, before ranks start.
  if (auto codecs = QCommCodecs::Create(session.registry, qcomm, session.plugin_options.ForKind("codec"));
      !codecs.ok()) {
    return fail("--qcomm: " + codecs.status().message());
  }
  options.kernel_options = session.plugin_options.For("kernel", f.kernel);
  std::vector<std::string> kernels{f.kernel};
  if (spec) {
    for (const auto& [table, sharding] : *spec) {
      const std::string& k = sharding.compute_kernel;
      if (!k.empty() && k != kFusedKernel && !IsCachedKernel(k)) kernels.push_back(k);
    }
  }
  // Caches' eviction policies: by name or by a plugin's path, with
  // --plugin-opt eviction.NAME.KEY=VALUE joining their options.
  auto resolve_cache_policy = [&](CacheParams& c, const std::string& where) -> Status {
    auto policy = ResolveEvictionPolicy(session.registry, c.algorithm);
    if (!policy.ok()) return policy.status().WithContext(where + ": eviction policy");
    c.algorithm = policy.value();
    const OptionList extra = session.plugin_options.For("eviction", c.algorithm);
    for (const auto& [k, v] : extra.items()) c.algorithm_options.Set(k, v);
    return Status::Ok();
  };
  if (Status st = resolve_cache_policy(f.cache.defaults, "--cache-params"); !st.ok()) return fail(st.message());
  if (spec) {
    for (auto& [table, sharding] : *spec) {
      if (!sharding.cache_params) continue;
      if (Status st = resolve_cache_policy(*sharding.cache_params, "--plan: table '" + table + "'"); !st.ok()) {
        return fail(st.message());
      }
    }
  }
  if (Status st = CheckKernelsUsable(session.registry, kernels, options.optimizer.optimizer); !st.ok()) {
    return fail(st.message());
  }
  for (auto& [name, config] : managed.value()) {
    auto policy = ResolveEvictionPolicy(session.registry, config.policy);
    if (!policy.ok()) return fail("table " + name + ": eviction policy: " + policy.status().message());
    config.policy = policy.value();
    // --plugin-opt eviction.NAME.KEY=VALUE joins the table's own options.
    const OptionList extra = session.plugin_options.For("eviction", config.policy);
    for (const auto& [k, v] : extra.items()) config.policy_options.Set(k, v);
  }

  if (f.planner) {
    // Planned once here, before ranks start (every process of a job plans
    // alike: the planner is deterministic), then run as a plan file would be.
    const bool launched = env.ok() && env->launched();
    const int world = launched ? env->world_size : std::max(comm.world_size, 1);
    PlannerRequest preq;
    preq.tables = tables.value();
    preq.batch_per_rank = f.batch;
    PlannerFlags pf = f.planner_flags;
    pf.hosts = launched ? std::max(1, world / std::max(1, env->local_world_size)) : 1;
    if (pf.stats_from.empty() && f.click.train) pf.stats_from = f.click.data;
    if (Status st = FillPlannerRequest(pf, world, memory_per_rank, &preq); !st.ok()) return fail(st.message());
    auto workload = PlannerWorkload(pf, preq.tables, f.click.train ? nullptr : &data.value(), f.batch);
    if (!workload.ok()) return fail(workload.status().message());
    preq.workload = std::move(workload).value();
    preq.kernels = UsableKernels(session.registry, preq.topology, options.optimizer.optimizer);
    preq.sharder_options = session.plugin_options.ForKind("sharder");
    preq.state_bytes_per_row = StateBytesPerRow(options.optimizer.optimizer);
    PlanUnderMemoryBudget(session.registry, f.cache.budget_bytes, &preq);
    auto planned = RunPlanner(session.registry, preq);
    if (!planned.ok()) return fail("--planner: " + planned.status().message(), kExitFailure);
    spec = planned->spec;
    f.planner_estimate_s = planned->step_seconds;
    if (!g.json && (!launched || env->rank == 0)) std::cout << FormatPlannerResult(planned.value(), preq, false);
  }

  std::mutex out;
  return RunOnRanks("train", args, comm, session, [&](const ProcessGroup& group) {
    const bool lead = group.rank() == 0;
    const std::string data_desc = f.click.train ? fmt::format("{} ({} samples per epoch)", f.click.data,
                                                              f.click.train_samples)
                                                : data->Describe();
    // The plan, made the same way on every rank, before any work.
    PlanRequest req;
    req.tables = tables.value();
    req.world_size = group.world_size();
    req.ranks_per_host = group.local_world_size();
    req.default_kernel = f.kernel;
    req.spec = spec;
    req.sharder = f.sharder;
    req.sharder_options = session.plugin_options.ForKind("sharder");
    req.qcomm = qcomm;
    ApplyCacheFlags(f.cache, StepIdsBound(group.world_size(), f.batch, req.tables, pooling, f.click.train.has_value()), req);
    if (memory_per_rank > 0) req.memory_bytes_per_rank.assign(static_cast<size_t>(group.world_size()), memory_per_rank);
    const int32_t opt = options.optimizer.optimizer;
    req.state_bytes_per_row = [opt](const EmbeddingTableConfig& t) {
      return sdk::StateDim(opt, t.embedding_dim) * static_cast<int64_t>(sizeof(float));
    };
    auto plan = MakePlan(session.registry, req);
    if (!plan.ok()) return lead ? fail(plan.status().message()) : kExitUsage;
    if (PlanCachesTables(plan.value())) {
      if (Status st = PrepareCacheDir(f.cache.cache_dir); !st.ok()) return lead ? fail(st.message()) : kExitUsage;
    }
    // Before anything is allocated. --verify's unsharded copy lives on rank
    // 0, which is in this process when it is the lead or the ranks are threads
    // (then every rank counts it, so that all of them decide alike).
    const bool copy_here = f.verify && (lead || group.backend() == "local");
    const int64_t unsharded = copy_here ? UnshardedTableBytes(tables.value(), opt) : 0;
    if (Status s = CheckMemory(PlanBytesInThisProcess(plan.value(), group) + unsharded, memory_limit,
                               "the tables and their optimizer state on this machine", "--max-memory");
        !s.ok()) {
      if (lead) return fail(s.message(), kExitFailure);
      if (group.backend() != "local") PrintLine(std::cerr, "shardrec train: rank " + std::to_string(group.rank()) + ": " + s.message());
      return kExitFailure;
    }
    // This rank's kernel gets its share of the host's cores (kernel_threads.h).
    EmbeddingModuleOptions rank_options = options;
    const std::string kernel_threads =
        ShareCoresAmongRanks(session.registry, f.kernel, group.local_world_size(), rank_options.kernel_options);
    if (lead) {
      std::lock_guard<std::mutex> lock(out);
      if (!f.plan_out.empty()) {
        std::ofstream file(f.plan_out);
        file << PlanToJson(plan.value()) << "\n";
        if (!file) return fail("--plan-out: cannot write " + f.plan_out, kExitFailure);
      }
      if (!g.json) {
        std::cout << fmt::format("shardrec train: {} ({}), kernel {}{}, {}, {} of {} per rank, {}, optimizer {}\n",
                                 Counted(group.world_size(), "rank"), group.backend(), f.kernel,
                                 kernel_threads.empty() ? "" : fmt::format(" ({} a rank)", DescribeThreads(kernel_threads)),
                                 Counted(static_cast<int64_t>(tables->size()), "table"), Counted(f.steps, "step"),
                                 Counted(f.batch, "sample"), data_desc, options.optimizer.ToString())
                  << FormatPlan(plan.value()) << std::flush;
      }
    }
    auto result =
        TrainRank(group, session, f, tables.value(), data.value(), plan.value(), managed.value(), rank_options, lead);
    if (!result.ok()) {
      std::lock_guard<std::mutex> lock(out);
      PrintLine(std::cerr, "shardrec train: rank " + std::to_string(group.rank()) + ": " + result.status().message());
      return kExitFailure;
    }
    if (!lead) return kExitOk;
    result->kernel_threads = kernel_threads;
    Report(result.value(), f, group, plan.value(), g.json, data_desc);
    if (!f.click.plot.empty()) {
      if (Status st = PlotMetrics(f.click.metrics_out, f.click.plot, PlantedAuc(f.click.eval_data.empty() ? f.click.data : f.click.eval_data));
          !st.ok()) {
        return fail(st.message(), kExitFailure);
      }
      if (!g.json) std::cout << "plot: " << f.click.plot << "\n";
    }
    if (result->verify && !result->verify->Within(f.tolerance)) return kExitFailure;
    if (result->dense_verify && result->dense_verify->scaled > f.tolerance) return kExitFailure;
    return kExitOk;
  });
}

}  // namespace shardrec::cli
