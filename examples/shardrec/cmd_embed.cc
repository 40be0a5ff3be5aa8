// `shardrec embed`: one unsharded forward (and optionally one fused
// backward + optimizer step) of the tables in a JSON file over a KJT read
// from a directory of .npy files, through any kernel plugin. This is how a
// user checks our numbers against PyTorch (tests/python/compare_torch.py
// does it). Everything is read and computed before anything is written, so
// bad input leaves --out untouched.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "cli.h"
#include "commands.h"
#include "embed_job.h"
#include "memory_check.h"
#include "planner_inputs.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/checkpoint/directory.h"
#include "shardrec/core/io/batch_dir.h"
#include "shardrec/core/io/names.h"
#include "shardrec/core/io/staged_directory.h"
#include "shardrec/core/launch/dist_env.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/modules/embedding_collection.h"
#include "shardrec/core/modules/table_weights.h"
#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/core/tensor/npy.h"
#include "shardrec/core/text/byte_size.h"
#include "shardrec/core/text/counted.h"

namespace shardrec::cli {

namespace fs = std::filesystem;

CheckpointLoadRequest CheckpointRequestFor(const EmbedFlags& f) {
  CheckpointLoadRequest r;
  r.dir = f.from_checkpoint;
  r.reset_optimizer = f.reset_optimizer;
  r.allow_extra_tables = true;  // pooled and sequence tables load as two groups
  r.verify_before_loading = false;  // into tables made for this run, which a failed load ends
  return r;
}

namespace {

// --weights and --state into an unsharded table group.
Status LoadWeights(const EmbeddingTables& tables, const fs::path& dir) {
  for (size_t t = 0; t < tables.configs().size(); ++t) {
    const auto& config = tables.configs()[t];
    SR_ASSIGN_OR_RETURN(Tensor f32, ReadWeightsFile(dir, config));
    SR_ASSIGN_OR_RETURN(Tensor typed, EncodeWeights(f32, config, config.name));  // quantized tables too
    SR_RETURN_IF_ERROR(tables.WriteWeights(static_cast<int32_t>(t), typed));
  }
  return Status::Ok();
}

Status LoadState(const EmbeddingTables& tables, const fs::path& dir) {
  for (size_t t = 0; t < tables.configs().size(); ++t) {
    SR_ASSIGN_OR_RETURN(auto state, ReadStateFile(dir, tables.configs()[t]));
    if (state) SR_RETURN_IF_ERROR(tables.WriteState(static_cast<int32_t>(t), *state));
  }
  return Status::Ok();
}

StatusOr<std::vector<TableFiles>> SnapshotTables(const EmbeddingTables& tables) {
  std::vector<TableFiles> out;
  for (size_t t = 0; t < tables.configs().size(); ++t) {
    SR_ASSIGN_OR_RETURN(Tensor w, tables.ReadWeights(static_cast<int32_t>(t)));
    SR_ASSIGN_OR_RETURN(Tensor w32, DecodeWeights(w, tables.configs()[t], tables.configs()[t].name));
    SR_ASSIGN_OR_RETURN(Tensor s, tables.ReadState(static_cast<int32_t>(t)));
    out.push_back({tables.configs()[t].name, std::move(w32), std::move(s)});
  }
  return out;
}

int Fail(const std::string& message) {
  std::cerr << "shardrec embed: " << message << "\n";
  return kExitFailure;
}

// --planner: one plan for the job's world, made before the ranks start (every
// process of a launched job plans alike: the planner is deterministic), for
// the traffic of the batch itself unless --stats-from names other data.
StatusOr<PlanSpec> PlanEmbed(const HostSession& session, const PlannerFlags& flags, const CommFlags& comm,
                             const std::vector<EmbeddingTableConfig>& tables, const EmbeddingModuleOptions& options,
                             const KeyedJaggedTensor& kjt, bool print) {
  auto env = ReadDistEnv();
  const bool launched = env.ok() && env->launched();
  const int world = launched ? env->world_size : std::max(comm.world_size, 1);
  PlannerFlags pf = flags;
  pf.hosts = launched ? std::max(1, world / std::max(1, env->local_world_size)) : 1;
  PlannerRequest req;
  req.tables = tables;
  req.batch_per_rank = std::max<int64_t>(1, kjt.stride() / world);
  SR_RETURN_IF_ERROR(FillPlannerRequest(pf, world, 0, &req));
  if (pf.stats_from.empty()) {
    req.workload = MeasureWorkload(tables, {kjt});
  } else {
    SR_ASSIGN_OR_RETURN(req.workload, PlannerWorkload(pf, tables, nullptr, req.batch_per_rank));
  }
  req.kernels = UsableKernels(session.registry, req.topology, options.optimizer.optimizer);
  req.sharder_options = session.plugin_options.ForKind("sharder");
  req.state_bytes_per_row = StateBytesPerRow(options.optimizer.optimizer);
  SR_ASSIGN_OR_RETURN(PlannerResult planned, RunPlanner(session.registry, req));
  if (print && (!launched || env->rank == 0)) std::cout << FormatPlannerResult(planned, req, false);
  return planned.spec;
}

}  // namespace

StatusOr<Tensor> ReadWeightsFile(const fs::path& dir, const EmbeddingTableConfig& config) {
  SR_ASSIGN_OR_RETURN(const fs::path path, PathUnder(dir, "table", config.name, ".npy"));
  SR_ASSIGN_OR_RETURN(Tensor raw, ReadNpy(path));
  SR_ASSIGN_OR_RETURN(Tensor f32, ToFloat32(raw, path.string()));
  if (f32.ndim() != 2 || f32.size(0) != config.num_embeddings || f32.size(1) != config.embedding_dim) {
    return InvalidArgumentError(path.string() + ": expected shape [" + std::to_string(config.num_embeddings) + ", " +
                                std::to_string(config.embedding_dim) + "] for table '" + config.name + "', got " +
                                ShapeString(f32.shape()));
  }
  return f32;
}

StatusOr<std::optional<Tensor>> ReadStateFile(const fs::path& dir, const EmbeddingTableConfig& config) {
  SR_ASSIGN_OR_RETURN(const fs::path path, PathUnder(dir, "table", config.name, ".state.npy"));
  if (!fs::exists(path)) return std::optional<Tensor>();
  SR_ASSIGN_OR_RETURN(Tensor state, ReadNpy(path));
  return std::optional<Tensor>(std::move(state));
}

int RunEmbed(const std::vector<std::string>& args) {
  GlobalOptions g;
  EmbedFlags f;
  CommFlags comm;
  bool planner = false;
  PlannerFlags planner_flags;
  po::options_description desc("embed options");
  AddGlobalOptions(desc, &g);
  AddCommOptions(desc, &comm);
  desc.add_options()
      ("tables", po::value(&f.tables),
       "JSON tables file: {\"tables\": [{\"name\", \"num_embeddings\", \"embedding_dim\", \"feature_names\", "
       "\"pooling\" sum|mean|none, \"data_type\" fp32|fp16|bf16, \"weight_init_min\", \"weight_init_max\", "
       "\"is_weighted\"}]}")
      ("weights", po::value(&f.weights), "directory with one NAME.npy [rows, dim] per table (float32, or "
       "float16 for fp16 tables); without it, tables start from --init-seed")
      ("from-checkpoint", po::value(&f.from_checkpoint),
       "start the tables from a checkpoint (DIR/manifest.json, or a run's --checkpoint-dir: its newest): the "
       "weights, and with --grad the optimizer state when --optimizer is the checkpoint's. Without --tables, "
       "the checkpoint's tables are used")
      ("reset-optimizer", po::bool_switch(&f.reset_optimizer),
       "with --from-checkpoint and --grad: load the weights only (needed when --optimizer differs from the "
       "checkpoint's)")
      ("init-seed", po::value(&f.init_seed)->default_value(0),
       "seed of the initial weights (uniform in each table's init range; the same values on every kernel)")
      ("state", po::value(&f.state), "directory with NAME.state.npy optimizer state to start from")
      ("batch", po::value(&f.batch)->required(),
       "KJT directory: keys.txt, lengths.npy, values.npy, optional weights.npy and stride_per_key.npy")
      ("out", po::value(&f.out)->required(), "output directory (created)")
      ("grad", po::value(&f.grad),
       "gradient of the pooled output, float32 [B, sum of dims]: run one backward + optimizer step")
      ("optimizer", po::value(&f.optimizer)->default_value("sgd,lr=0.01"),
       "with --grad: NAME[,key=value...]; NAME sgd|adagrad|rowwise_adagrad|adam; keys lr (learning_rate), "
       "eps, beta1, beta2, weight_decay, initial_accumulator_value")
      ("iteration", po::value(&f.iteration)->default_value(1), "step number, 1-based (Adam's bias correction)")
      ("kernel", po::value(&f.kernel)->default_value("cpu"), "compute-kernel plugin to run on")
      ("bounds-check", po::value(&f.bounds)->default_value("fatal"),
       "ids outside a table: fatal (error, nothing written), warning (log, treat as absent), ignore (treat as absent), none (as ignore: the kernel skips its check, so the module checks)")
      ("max-memory", po::value(&f.max_memory),
       "the most this machine's ranks may allocate for tables and optimizer state (e.g. 20GiB); default: the "
       "memory available now. A bigger job is refused before allocating")
      ("plan", po::value(&f.plan), "run sharded with this JSON plan file (see docs/sharding.md)")
      ("sharder", po::value(&f.sharder), "run sharded, every table split by this sharder (e.g. row_wise)")
      ("planner", po::bool_switch(&planner),
       "run sharded with the planner's plan for this world: each table's sharder, kernel and ranks chosen for the "
       "batch's own traffic (see `shardrec plan --help` and docs/planner.md)");
  AddPlannerOptions(desc, &planner_flags, /*with_hosts=*/false);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("embed", args, desc, nullptr, &vm, &code,
             "\n\nLooks up a batch in embedding tables and writes the result as .npy files:\n"
             "  OUT/values.npy, OUT/keys.txt, OUT/offset_per_key.npy     pooled tables (a KeyedTensor)\n"
             "  OUT/sequence/FEATURE/{values,lengths}.npy                sequence tables (pooling none)\n"
             "With --grad it then applies one fused backward + optimizer step and writes\n"
             "  OUT/tables/NAME.npy (float32) and OUT/tables/NAME.state.npy (optimizer state).\n"
             "The formats are in docs/file-formats.md.\n\n"
             "Sharded: --plan FILE or --sharder NAME (and --comm/--world-size, or a launcher) split the tables\n"
             "across ranks and the batch into contiguous sample ranges, one per rank; rank 0 gathers the results\n"
             "and writes the same files as the unsharded run. A --world-size alone runs the balanced\n"
             "table-wise plan; --planner plans for the batch's own traffic (docs/planner.md).")) {
    return code;
  }
  auto env = ReadDistEnv();
  const bool sharded = planner || !f.plan.empty() || !f.sharder.empty() || !vm["world-size"].defaulted() ||
                       (env.ok() && env->launched());
  if (static_cast<int>(!f.plan.empty()) + static_cast<int>(!f.sharder.empty()) + static_cast<int>(planner) > 1) {
    std::cerr << "shardrec embed: give --planner, --plan or --sharder, one of them\n";
    return kExitUsage;
  }
  for (const char* flag : {"topology", "constraints", "stats-from", "stats-samples"}) {
    if (vm.count(flag) && !vm[flag].defaulted() && !planner) {
      std::cerr << "shardrec embed: --" << flag << " is the planner's: add --planner\n";
      return kExitUsage;
    }
  }
  HostSession session;
  const PluginKinds kinds = sharded ? PluginKinds{SR_KIND_KERNEL, SR_KIND_SHARDER, SR_KIND_COMM}
                                    : PluginKinds{SR_KIND_KERNEL};
  if (!OpenSession("embed", g, kinds, &session)) return kExitUsage;
  const auto start = std::chrono::steady_clock::now();

  if (f.tables.empty() && f.from_checkpoint.empty()) {
    std::cerr << "shardrec embed: give --tables (or --from-checkpoint, whose tables are used)\n";
    return kExitUsage;
  }
  if (!f.from_checkpoint.empty() && (vm.count("weights") || vm.count("state"))) {
    std::cerr << "shardrec embed: give --from-checkpoint or --weights/--state, not both\n";
    return kExitUsage;
  }
  StatusOr<std::vector<EmbeddingTableConfig>> tables = std::vector<EmbeddingTableConfig>{};
  if (!f.tables.empty()) {
    tables = LoadTablesFile(f.tables);
  } else {
    auto dir = ResolveCheckpoint(f.from_checkpoint);
    if (!dir.ok()) return Fail("--from-checkpoint: " + dir.status().message());
    auto manifest = LoadCheckpointManifest(dir.value());
    if (!manifest.ok()) return Fail("--from-checkpoint: " + manifest.status().message());
    tables = manifest->tables;
  }
  if (!tables.ok()) return Fail(tables.status().message());
  EmbeddingModuleOptions options;
  options.kernel = f.kernel;
  options.kernel_options = session.plugin_options.For("kernel", f.kernel);
  options.init_seed = f.init_seed;
  auto bounds = ParseBoundsCheckMode(f.bounds);
  if (!bounds.ok()) return Fail("--bounds-check: " + bounds.status().message());
  options.bounds_check = bounds.value();
  if (vm.count("grad")) {
    auto spec = OptimizerSpec::Parse(f.optimizer);
    if (!spec.ok()) return Fail("--optimizer: " + spec.status().message());
    options.optimizer = spec.value();
    if (Status st = CheckKernelsUsable(session.registry, {f.kernel}, options.optimizer.optimizer); !st.ok()) {
      return Fail(st.message());
    }
  }
  if (!f.max_memory.empty()) {
    auto bytes = ParseByteSize(f.max_memory);
    if (!bytes.ok()) return Fail("--max-memory: " + bytes.status().message());
    f.memory_limit = MemoryLimitFor(bytes.value(), "--max-memory");
  } else {
    f.memory_limit = MemoryLimitFor(0, "--max-memory");
  }
  auto kjt = ReadKjtDir(f.batch);
  if (!kjt.ok()) return Fail(kjt.status().message());
  if (sharded) {
    if (planner) {
      auto spec = PlanEmbed(session, planner_flags, comm, tables.value(), options, kjt.value(), !g.json);
      if (!spec.ok()) return Fail("--planner: " + spec.status().message());
      f.planned = std::move(spec).value();
    }
    return RunShardedEmbed(args, f, g, comm, session, tables.value(), options, kjt.value(), vm.count("grad") > 0);
  }

  if (Status s = CheckMemory(UnshardedTableBytes(tables.value(), options.optimizer.optimizer), f.memory_limit,
                             "the tables and their optimizer state", "--max-memory");
      !s.ok()) {
    return Fail(s.message());
  }
  std::vector<EmbeddingTableConfig> pooled, sequence;
  for (const auto& t : tables.value()) (t.pooling == PoolingType::kNone ? sequence : pooled).push_back(t);
  std::optional<EmbeddingBagCollection> ebc;
  std::optional<EmbeddingCollection> ec;
  if (!pooled.empty()) {
    auto made = EmbeddingBagCollection::Create(session.registry, pooled, options);
    if (!made.ok()) return Fail(made.status().message());
    ebc.emplace(std::move(made).value());
  }
  if (!sequence.empty()) {
    auto made = EmbeddingCollection::Create(session.registry, sequence, options);
    if (!made.ok()) return Fail(made.status().message());
    ec.emplace(std::move(made).value());
  }
  for (const EmbeddingTables* group : {ebc ? &ebc->tables() : nullptr, ec ? &ec->tables() : nullptr}) {
    if (group == nullptr) continue;
    if (vm.count("weights")) {
      if (Status s = LoadWeights(*group, f.weights); !s.ok()) return Fail(s.message());
    }
    if (vm.count("state")) {
      if (Status s = LoadState(*group, f.state); !s.ok()) return Fail(s.message());
    }
    if (!f.from_checkpoint.empty()) {
      auto loaded = LoadCheckpoint(*group, CheckpointRequestFor(f));
      if (!loaded.ok()) return Fail(loaded.status().message());
    }
  }
  spdlog::info("embed: {} on kernel '{}'", kjt->DebugString(), f.kernel);

  EmbedOutputs r;
  if (ebc) {
    int64_t invalid = 0;
    auto out = ebc->Forward(kjt.value(), &invalid);
    if (!out.ok()) return Fail(out.status().message());
    r.pooled.emplace(std::move(out).value());
    r.invalid += invalid;
  }
  if (ec) {
    int64_t invalid = 0;
    auto out = ec->Forward(kjt.value(), &invalid);
    if (!out.ok()) return Fail(out.status().message());
    r.sequence = std::move(out).value();
    r.invalid += invalid;
  }
  if (vm.count("grad")) {
    if (!ebc) return Fail("--grad is the gradient of the pooled output, but no table pools");
    auto grad = ReadNpy(f.grad);
    if (!grad.ok()) return Fail(grad.status().message());
    if (Status s = ebc->Backward(kjt.value(), grad.value(), f.iteration); !s.ok()) {
      return Fail(s.WithContext(f.grad).message());
    }
    auto snapshot = SnapshotTables(ebc->tables());
    if (!snapshot.ok()) return Fail(snapshot.status().message());
    r.updated = std::move(snapshot).value();
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WriteEmbedOutputs(r, f, g, kjt.value(), options, seconds, "kernel '" + f.kernel + "'");
}

int WriteEmbedOutputs(const EmbedOutputs& r, const EmbedFlags& f, const GlobalOptions& g, const KeyedJaggedTensor& kjt,
                      const EmbeddingModuleOptions& options, double seconds, const std::string& how) {
  // Everything is computed: now write, into a staging directory beside
  // --out that replaces it as a whole once every file is written, so an
  // error while writing (a full disk, a name that cannot be a file) leaves
  // --out as it was.
  // "out/" and "out" name the same directory: print "out/values.npy", never "out//values.npy".
  const fs::path out_dir = fs::path(f.out).lexically_normal();
  auto staged = StagedDirectory::Begin(out_dir, {"values.npy", "keys.txt", "offset_per_key.npy", "sequence", "tables"});
  if (!staged.ok()) return Fail("--out: " + staged.status().message());
  const fs::path& dir = staged->staging();
  if (r.pooled) {
    if (Status s = WriteKeyedTensorDir(dir, *r.pooled); !s.ok()) return Fail(s.message());
  }
  for (const auto& [feature, jt] : r.sequence) {
    auto path = PathUnder(dir / "sequence", "feature", feature);
    if (!path.ok()) return Fail(path.status().message());
    if (Status s = WriteJaggedDir(*path, jt); !s.ok()) return Fail(s.message());
  }
  for (const auto& t : r.updated) {
    std::error_code ec_dir;
    fs::create_directories(dir / "tables", ec_dir);
    auto weights = PathUnder(dir / "tables", "table", t.name, ".npy");
    auto state = PathUnder(dir / "tables", "table", t.name, ".state.npy");
    if (!weights.ok()) return Fail(weights.status().message());
    if (Status s = WriteNpy(*weights, t.weights); !s.ok()) return Fail(s.message());
    if (t.state.size(1) > 0) {
      if (Status s = WriteNpy(*state, t.state); !s.ok()) return Fail(s.message());
    }
  }
  if (Status s = staged->Commit(); !s.ok()) return Fail("--out: " + s.message());
  const int64_t batch = r.pooled ? r.pooled->batch_size() : kjt.stride();
  if (g.json) {
    nlohmann::json j{{"batch_size", batch},
                     {"features", kjt.keys()},
                     {"num_ids", kjt.values().size()},
                     {"invalid_ids", r.invalid},
                     {"kernel", f.kernel},
                     {"run", how},
                     {"out", out_dir.string()},
                     {"seconds", seconds}};
    if (r.pooled) {
      j["pooled_shape"] = r.pooled->values().shape();
      j["offset_per_key"] = r.pooled->offset_per_key();
    }
    j["sequence_features"] = nlohmann::json::array();
    for (const auto& [feature, jt] : r.sequence) j["sequence_features"].push_back(feature);
    j["updated_tables"] = nlohmann::json::array();
    for (const auto& t : r.updated) j["updated_tables"].push_back(t.name);
    if (!r.updated.empty()) j["optimizer"] = options.optimizer.ToString();
    std::cout << j.dump() << "\n";
  } else {
    if (r.pooled) {
      std::printf("pooled: %s values %s -> %s\n", ShapeString(r.pooled->offset_per_key()).c_str(),
                  ShapeString(r.pooled->values().shape()).c_str(), (out_dir / "values.npy").c_str());
    }
    for (const auto& [feature, jt] : r.sequence) {
      std::printf("sequence %s: values %s -> %s\n", feature.c_str(), ShapeString(jt.values.shape()).c_str(),
                  (out_dir / "sequence" / feature).c_str());
    }
    if (!r.updated.empty()) {
      std::printf("one %s step on %s -> %s\n", options.optimizer.ToString().c_str(),
                  Counted(static_cast<int64_t>(r.updated.size()), "table").c_str(), (out_dir / "tables/").c_str());
    }
    if (r.invalid > 0) {
      std::printf("%lld id(s) outside their table were treated as absent (--bounds-check %s)\n",
                  static_cast<long long>(r.invalid), f.bounds.c_str());
    }
    std::printf("done in %.3f s (%s)\n", seconds, how.c_str());
  }
  return kExitOk;
}

}  // namespace shardrec::cli
