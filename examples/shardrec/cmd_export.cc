// `shardrec export --from-checkpoint DIR --quantize int8 -o MODEL_DIR`: a
// trained checkpoint's tables in their serving types (row-wise int8, int4,
// int2, or fp16/bf16), with the dense half, as a model directory that
// `shardrec infer` serves (served_model.h). Prints each table's
// quantization error (max and mean |served - trained|) and the sizes.
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "comm_job.h"
#include "commands.h"
#include "served_model.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/inference/quant_config.h"
#include "shardrec/core/modules/sharded_tables.h"
#include "shardrec/core/text/byte_size.h"

namespace shardrec::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct ExportFlags {
  std::string from, quantize, per_table, out, kernel = "cpu";
};

struct TableReport {
  std::string name, type;
  int64_t rows = 0, dim = 0, trained_bytes = 0, served_bytes = 0;
  QuantizationError error;
};

// Tables whole on this process's one rank.
StatusOr<ShardingPlan> WholeTables(const HostSession& session, const std::vector<EmbeddingTableConfig>& tables,
                                   const std::string& kernel) {
  PlanRequest req;
  req.tables = tables;
  req.default_kernel = kernel;
  req.sharder = "table_wise";
  req.sharder_options = session.plugin_options.ForKind("sharder");
  return MakePlan(session.registry, req);
}

Status Export(const ProcessGroup& group, const HostSession& session, const ExportFlags& f, const ServedModel& src,
              const QuantConfig& quant, std::vector<TableReport>* report, int64_t* model_bytes) {
  std::vector<EmbeddingTableConfig> trained = src.manifest.tables;
  EmbeddingModuleOptions options;
  options.kernel = f.kernel;  // optimizer none: weights only
  SR_ASSIGN_OR_RETURN(ShardingPlan trained_plan, WholeTables(session, trained, f.kernel));
  SR_ASSIGN_OR_RETURN(ShardingPlan served_plan, WholeTables(session, quant.Apply(trained), f.kernel));
  SR_ASSIGN_OR_RETURN(ShardedTables from, ShardedTables::Create(session.registry, group, trained_plan, options, true));
  SR_ASSIGN_OR_RETURN(ShardedTables to, ShardedTables::Create(session.registry, group, served_plan, options, true));
  std::unique_ptr<ModelTrainer> dense;
  DenseCheckpointState dense_state;
  if (src.model) {
    SR_ASSIGN_OR_RETURN(dense, CreateDenseHalf(*src.model, trained));
    dense_state.params = dense->Parameters();
  }
  CheckpointLoadRequest load;
  load.dir = src.dir;
  load.reset_optimizer = true;  // the weights only
  load.dense = src.model ? &dense_state : nullptr;
  SR_RETURN_IF_ERROR(LoadCheckpoint(from, load).status().WithContext("--from-checkpoint"));
  for (const ShardedTable& t : served_plan.tables) {
    TableReport r;
    r.name = t.config.name;
    r.type = DataTypeName(t.config.data_type);
    r.rows = t.config.num_embeddings;
    r.dim = t.config.embedding_dim;
    r.trained_bytes = r.rows * r.dim * static_cast<int64_t>(sizeof(float));
    r.served_bytes = r.rows * t.config.RowBytes();
    SR_ASSIGN_OR_RETURN(TableContents w, from.ReadTable(t.config.name));
    SR_RETURN_IF_ERROR(to.WriteTable(t.config.name, TableContents{w.weights, Tensor()}));
    SR_ASSIGN_OR_RETURN(TableContents back, to.ReadTable(t.config.name));
    SR_ASSIGN_OR_RETURN(r.error, MeasureQuantizationError(w.weights, back.weights));
    report->push_back(r);
  }
  CheckpointSaveRequest save;
  save.root = f.out;
  save.step = src.manifest.step;
  save.dense = src.model ? &dense_state : nullptr;
  if (src.model) save.extra["model"] = src.model->ToJson();
  json tables = json::object();
  for (const TableReport& r : *report) {
    tables[r.name] = {{"type", r.type}, {"max_abs_error", r.error.max_abs}, {"mean_abs_error", r.error.mean_abs}};
  }
  save.extra["export"] = {{"from", src.dir.string()}, {"step", src.manifest.step}, {"tables", tables}};
  SR_ASSIGN_OR_RETURN(SavedCheckpoint saved, SaveCheckpoint(to, save));
  *model_bytes = saved.bytes;
  return Status::Ok();
}

}  // namespace

int RunExport(const std::vector<std::string>& args) {
  GlobalOptions g;
  ExportFlags f;
  po::options_description desc("export options");
  AddGlobalOptions(desc, &g);
  desc.add_options()
      ("from-checkpoint", po::value(&f.from), "a checkpoint of `train` (or a run's --checkpoint-dir: its newest)")
      ("quantize", po::value(&f.quantize),
       "the tables' serving type: int8, int4, int2 (row-wise: a fp16 scale and bias per row, FBGEMM's layout), "
       "fp16, bf16 or fp32")
      ("per-table", po::value(&f.per_table), "types of single tables, overriding --quantize: t0=int4,t3=fp16")
      ("output,o", po::value(&f.out), "the model directory to write (new, or empty); `shardrec infer --model` serves it")
      ("kernel", po::value(&f.kernel)->default_value(f.kernel), "the compute kernel that holds the tables meanwhile");
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("export", args, desc, nullptr, &vm, &code,
             "\n\nWrites a trained checkpoint's tables in their serving types, with the dense model, as a model\n"
             "directory that `shardrec infer` serves. Each table is quantized row by row as FBGEMM's IntN\n"
             "TBE does; the error it took (max and mean |served - trained| over its values) and the sizes\n"
             "are printed. The directory is a checkpoint (`shardrec checkpoint inspect` reads it).\n\n"
             "examples:\n"
             "  shardrec export --from-checkpoint ckpt --quantize int8 -o model-int8\n"
             "  shardrec export --from-checkpoint ckpt --quantize int4 --per-table t0=int8,t1=fp16 -o model-mixed")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit_code) {
    std::cerr << "shardrec export: " << m << "\n";
    return exit_code;
  };
  if (f.from.empty()) return fail("--from-checkpoint is required (see --help)", kExitUsage);
  if (f.quantize.empty()) return fail("--quantize is required: int8, int4, int2, fp16, bf16 or fp32", kExitUsage);
  if (f.out.empty()) return fail("-o MODEL_DIR is required", kExitUsage);
  auto quant = QuantConfig::Parse(f.quantize, f.per_table);
  if (!quant.ok()) return fail(quant.status().message(), kExitUsage);
  std::error_code ec;
  if (fs::exists(f.out, ec) && (!fs::is_directory(f.out, ec) || !fs::is_empty(f.out, ec))) {
    return fail(f.out + ": exists and is not an empty directory (the export never overwrites)", kExitUsage);
  }
  auto src = OpenServedModel(f.from);
  if (!src.ok()) return fail(src.status().message(), kExitFailure);
  if (Status st = quant->CheckTables(src->manifest.tables); !st.ok()) return fail("--per-table: " + st.message(), kExitUsage);
  HostSession session;
  if (!OpenSession("export", g, {SR_KIND_SHARDER, SR_KIND_KERNEL, SR_KIND_COMM}, &session)) return kExitUsage;

  std::vector<TableReport> report;
  int64_t model_bytes = 0;
  CommFlags comm;
  comm.world_size = 1;
  const int rc = RunOnRanks("export", args, comm, session, [&](const ProcessGroup& group) {
    Status st = Export(group, session, f, src.value(), quant.value(), &report, &model_bytes);
    if (!st.ok()) {
      std::cerr << "shardrec export: " << st.message() << "\n";
      return kExitFailure;
    }
    return kExitOk;
  });
  if (rc != kExitOk) return rc;

  int64_t trained = 0, served = 0;
  json tables = json::array();
  std::string text = fmt::format("exported {} -> {}\n", src->dir.string(), f.out);
  for (const TableReport& r : report) {
    trained += r.trained_bytes;
    served += r.served_bytes;
    tables.push_back({{"name", r.name}, {"type", r.type}, {"rows", r.rows}, {"dim", r.dim},
                      {"trained_bytes", r.trained_bytes}, {"served_bytes", r.served_bytes},
                      {"max_abs_error", r.error.max_abs}, {"mean_abs_error", r.error.mean_abs}});
    text += fmt::format("  table {}: {} x {} {}: {} -> {}; error max {:.3g}, mean {:.3g}\n", r.name, r.rows, r.dim,
                        r.type, FormatByteSize(r.trained_bytes), FormatByteSize(r.served_bytes), r.error.max_abs,
                        r.error.mean_abs);
  }
  const double ratio = trained > 0 ? static_cast<double>(served) / static_cast<double>(trained) : 0.0;
  text += fmt::format("tables: {} as fp32 -> {} served ({:.3f}x); the model directory holds {}{}\n",
                      FormatByteSize(trained), FormatByteSize(served), ratio, FormatByteSize(model_bytes),
                      src->model ? fmt::format(" (with the {} dense half)", src->model->model) : " (tables only)");
  if (g.json) {
    std::cout << json{{"from", src->dir.string()}, {"output", f.out}, {"tables", tables},
                      {"trained_table_bytes", trained}, {"served_table_bytes", served}, {"size_ratio", ratio},
                      {"model_bytes", model_bytes}, {"dense", src->model ? src->model->model : ""}}
                     .dump()
              << "\n";
  } else {
    std::cout << text;
  }
  return kExitOk;
}

}  // namespace shardrec::cli
