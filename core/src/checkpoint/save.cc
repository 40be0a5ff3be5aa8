// SaveCheckpoint (checkpoint.h): every rank streams its parts to .npy files
// in a hidden staging directory; rank 0 writes the manifest and publishes.
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "dense_state.h"
#include "file_io.h"
#include "managed_collision_state.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/checkpoint/checksum.h"
#include "shardrec/core/checkpoint/directory.h"
#include "shardrec/core/io/leftovers.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/core/tensor/npy.h"
#include "shardrec/core/version.h"
#include "table_parts.h"

namespace shardrec {

namespace fs = std::filesystem;
using json = nlohmann::json;
using checkpoint::FileHandle;
using checkpoint::NpyStream;
using checkpoint::TablePart;

namespace {

// Writes one part's files under `staging`; their manifest entries go to *files.
Status SavePart(const TablePart& part, int32_t optimizer, const fs::path& staging, int64_t chunk_bytes,
                std::vector<CheckpointFile>* files, int64_t* bytes) {
  const EmbeddingTableConfig& t = *part.table;
  const std::string dir = "tables/" + t.name + "/";
  std::error_code ec;
  fs::create_directories(staging / dir, ec);
  if (!fs::is_directory(staging / dir, ec)) return InternalError((staging / dir).string() + ": cannot create");

  // Rows go in ascending global order. A range part's local order is that
  // already; a self-routed part's may be anything, so it is sorted (its
  // row map is held anyway, so the order costs no more than it).
  const bool listed = !part.global_rows.empty();
  std::vector<int64_t> order;
  if (listed) {
    order.resize(static_cast<size_t>(part.rows));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return part.GlobalRow(a) < part.GlobalRow(b); });
  }
  auto local_at = [&](int64_t i) { return listed ? order[static_cast<size_t>(i)] : i; };
  const int64_t first = part.GlobalRow(local_at(0)), last = part.GlobalRow(local_at(part.rows - 1)) + 1;
  auto name_of = [&](const std::string& kind, int64_t c0, int64_t c1) {
    return listed ? fmt::format("{}{}.shard{}.npy", dir, kind, part.shard)
                  : fmt::format("{}{}.r{}-{}.c{}-{}.npy", dir, kind, first, last, c0, c1);
  };
  struct Out {
    CheckpointFile entry;
    std::optional<NpyStream> stream;
    int64_t state_offset = -1;  // -1: weights
    int64_t width = 0;
  };
  std::vector<Out> outs;
  auto open = [&](const std::string& kind, const std::string& descr, int64_t width, int64_t state_offset) -> Status {
    Out o;
    o.entry.path = name_of(kind, part.col_begin, part.col_begin + part.cols);
    o.entry.table = t.name;
    o.entry.kind = kind;
    o.entry.row_begin = first;
    o.entry.row_end = last;
    o.entry.col_begin = part.col_begin;
    o.entry.col_end = part.col_begin + part.cols;
    o.entry.dtype = descr;
    o.entry.shape = {part.rows, width};
    o.state_offset = state_offset;
    o.width = width;
    SR_ASSIGN_OR_RETURN(NpyStream s, NpyStream::Create(staging / o.entry.path, descr, o.entry.shape));
    o.stream.emplace(std::move(s));
    outs.push_back(std::move(o));
    return Status::Ok();
  };
  // A quantized table's rows are bytes, saved whole (its shards are never
  // split by column).
  const int64_t wcols = FileWidth(t, "weights", part.col_begin, part.col_begin + part.cols);
  SR_RETURN_IF_ERROR(open("weights", CheckpointDtype(t, "weights"), wcols, -1));
  const auto slices = part.state_dim > 0 ? checkpoint::StateSlices(optimizer, part.cols) : std::vector<checkpoint::StateSlice>{};
  for (const auto& s : slices) SR_RETURN_IF_ERROR(open(s.kind, CheckpointDtype(t, s.kind), s.width, s.offset));
  std::optional<NpyStream> ids;
  CheckpointFile::RowIds ids_entry;
  if (listed) {
    ids_entry.path = fmt::format("{}row_ids.shard{}.npy", dir, part.shard);
    SR_ASSIGN_OR_RETURN(NpyStream s, NpyStream::Create(staging / ids_entry.path, "<i8", {part.rows}));
    ids.emplace(std::move(s));
  }

  const int64_t row_bytes = wcols * static_cast<int64_t>(DTypeSize(part.weight_dtype)) +
                            part.state_dim * static_cast<int64_t>(sizeof(float));
  // Rows go in pieces of at most 1 MiB (or the chunk size, when smaller),
  // which stay in the cache from the kernel's read_rows through the hash to
  // write(2): 64 MiB pieces crossed memory three times and made the save
  // about 2x slower whenever the disk was not the limit.
  const int64_t piece_bytes = std::min(chunk_bytes, kCheckpointPieceBytes);
  const int64_t chunk = std::clamp<int64_t>(piece_bytes / std::max<int64_t>(row_bytes, 1), 1, part.rows);
  Tensor w = Tensor::Empty(part.weight_dtype, {chunk, wcols});
  Tensor s = Tensor::Empty(dtype::kFloat32, {chunk, std::max<int64_t>(part.state_dim, 1)});
  std::vector<float> slice_buf;
  std::vector<int64_t> id_buf, range_rows;
  for (int64_t begin = 0; begin < part.rows; begin += chunk) {
    const int64_t n = std::min(chunk, part.rows - begin);
    std::span<const int64_t> rows;
    if (listed) {
      rows = std::span<const int64_t>(order.data() + begin, static_cast<size_t>(n));
    } else {
      range_rows.resize(static_cast<size_t>(n));
      std::iota(range_rows.begin(), range_rows.end(), begin);
      rows = range_rows;
    }
    Tensor wn = n == chunk ? w : Tensor::Empty(part.weight_dtype, {n, wcols});
    Tensor sn = n == chunk ? s : Tensor::Empty(dtype::kFloat32, {n, std::max<int64_t>(part.state_dim, 1)});
    SR_RETURN_IF_ERROR(part.read_rows(rows, &wn, slices.empty() ? nullptr : &sn)
                           .WithContext(fmt::format("reading rows of table '{}' to save them", t.name)));
    for (Out& o : outs) {
      if (o.state_offset < 0) {
        SR_RETURN_IF_ERROR(o.stream->Append(wn.raw_data(), wn.nbytes()));
        continue;
      }
      const float* src = sn.data<float>();
      if (o.width == part.state_dim) {
        SR_RETURN_IF_ERROR(o.stream->Append(src, static_cast<size_t>(n * o.width) * sizeof(float)));
        continue;
      }
      slice_buf.resize(static_cast<size_t>(n * o.width));
      for (int64_t i = 0; i < n; ++i) {
        std::memcpy(slice_buf.data() + i * o.width, src + i * part.state_dim + o.state_offset,
                    static_cast<size_t>(o.width) * sizeof(float));
      }
      SR_RETURN_IF_ERROR(o.stream->Append(slice_buf.data(), slice_buf.size() * sizeof(float)));
    }
    if (ids) {
      id_buf.clear();
      for (int64_t r : rows) id_buf.push_back(part.GlobalRow(r));
      SR_RETURN_IF_ERROR(ids->Append(id_buf.data(), id_buf.size() * sizeof(int64_t)));
    }
  }
  if (ids) {
    SR_RETURN_IF_ERROR(ids->Finish());
    ids_entry.bytes = ids->bytes();
    ids_entry.xxh3_64 = ids->checksum();
    *bytes += ids->bytes();
  }
  for (Out& o : outs) {
    SR_RETURN_IF_ERROR(o.stream->Finish());
    o.entry.bytes = o.stream->bytes();
    o.entry.xxh3_64 = o.stream->checksum();
    if (ids) o.entry.row_ids = ids_entry;
    *bytes += o.entry.bytes;
    files->push_back(std::move(o.entry));
  }
  return Status::Ok();
}

// Every directory under `dir` (and `dir`), synced, so the new entries are on disk.
Status SyncTree(const fs::path& dir) {
  std::error_code ec;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec)) SR_RETURN_IF_ERROR(checkpoint::SyncDirectory(it->path()));
  }
  if (ec) return InternalError(dir.string() + ": cannot list: " + ec.message());
  return checkpoint::SyncDirectory(dir);
}

// rename(2) that never replaces: the published name must be new.
Status PublishDirectory(const fs::path& from, const fs::path& to) {
#ifdef RENAME_NOREPLACE
  if (::renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), RENAME_NOREPLACE) == 0) return Status::Ok();
  if (errno == EEXIST) return FailedPreconditionError(to.string() + " appeared while saving; the new checkpoint is left in " + from.string());
  if (errno != EINVAL && errno != ENOSYS) return InternalError(to.string() + ": cannot publish: " + std::strerror(errno));
#endif
  std::error_code ec;
  if (fs::exists(to, ec)) return FailedPreconditionError(to.string() + " appeared while saving");
  fs::rename(from, to, ec);
  if (ec) return InternalError(to.string() + ": cannot publish: " + ec.message());
  return Status::Ok();
}

}  // namespace

StatusOr<SavedCheckpoint> SaveCheckpoint(const ShardedTables& tables, const CheckpointSaveRequest& request,
                                         const ShardedManagedCollisionCollection* mc) {
  const ProcessGroup& group = tables.group();
  const auto& plan = tables.layout().plan();
  const fs::path root = request.root;
  const std::string name = CheckpointName(request.step);
  if (request.step < 0) return InvalidArgumentError("checkpoint step must be >= 0");
  if (request.chunk_bytes <= 0) return InvalidArgumentError("checkpoint chunk size must be positive");

  // Rank 0 makes the staging directory; every rank learns its name (or the error).
  SR_ASSIGN_OR_RETURN(std::string staging_name, group.InvokeOnRankAndBroadcastResult(0, [&]() -> StatusOr<std::string> {
    std::error_code ec;
    fs::create_directories(root, ec);
    if (!fs::is_directory(root, ec)) return InvalidArgumentError(root.string() + ": cannot create the checkpoint directory");
    RemoveLeftoversOfDeadProcesses(root, kPartialCheckpointPrefix);
    if (fs::exists(root / name, ec)) {
      return FailedPreconditionError((root / name).string() +
                                     " exists already: a checkpoint of another run? Resume from it, or save elsewhere");
    }
    const std::string staging = fmt::format("{}{}-{}", kPartialCheckpointPrefix, ::getpid(), name);
    if (!fs::create_directory(root / staging, ec) || ec) {
      return InternalError((root / staging).string() + ": cannot create: " + (ec ? ec.message() : "exists"));
    }
    return staging;
  }));
  const fs::path staging = root / staging_name;

  // Every rank writes its parts; the outcome (files, or an error) goes to every rank.
  SavedCheckpoint saved;
  std::vector<CheckpointFile> mine;
  json mc_summary = json::object();
  json dense_summary;  // rank 0's, with request.dense
  Status written = [&]() -> Status {
    // Cached tables' changed rows onto their files first: the file is then
    // as current as the cache, and rows stream out of either.
    SR_RETURN_IF_ERROR(tables.Flush());
    SR_ASSIGN_OR_RETURN(auto parts, checkpoint::PartsOf(tables));
    for (const TablePart& part : parts) {
      if (!part.saved_here || part.rows == 0 || part.cols == 0) continue;
      SR_RETURN_IF_ERROR(SavePart(part, tables.options().optimizer.optimizer, staging, request.chunk_bytes, &mine,
                                  &saved.bytes_here));
    }
    if (mc != nullptr) {
      SR_ASSIGN_OR_RETURN(mc_summary, checkpoint::SaveManagedCollision(mc->modules(), staging, &mine, &saved.bytes_here));
    }
    // Replicas are identical: rank 0 writes the dense half once.
    if (request.dense != nullptr && group.rank() == 0) {
      SR_ASSIGN_OR_RETURN(dense_summary, checkpoint::SaveDense(*request.dense, staging, &saved.bytes_here));
    }
    return Status::Ok();
  }();
  json report = {{"error", written.ok() ? "" : written.message()}, {"files", json::array()}, {"mc", mc_summary},
                 {"dense", dense_summary}};
  for (const auto& f : mine) report["files"].push_back(CheckpointFileToJson(f));
  SR_ASSIGN_OR_RETURN(auto reports, AllGatherStrings(group, report.dump()));

  SR_ASSIGN_OR_RETURN(std::string published, group.InvokeOnRankAndBroadcastResult(0, [&]() -> StatusOr<std::string> {
    std::error_code ec;
    json files = json::array();
    std::vector<json> mc_summaries;
    std::string errors;
    for (size_t r = 0; r < reports.size(); ++r) {
      json j = json::parse(reports[r]);
      if (!j["error"].get<std::string>().empty()) errors += fmt::format("\n  rank {}: {}", r, j["error"].get<std::string>());
      for (auto& f : j["files"]) files.push_back(std::move(f));
      mc_summaries.push_back(std::move(j["mc"]));
    }
    if (!errors.empty()) {
      fs::remove_all(staging, ec);
      return InternalError("saving checkpoint " + (root / name).string() + " failed; nothing was published:" + errors);
    }
    std::vector<EmbeddingTableConfig> configs;
    for (const auto& t : plan.tables) configs.push_back(t.config);
    json doc = request.extra.is_object() ? request.extra : json::object();
    doc["format"] = "shardrec-checkpoint";
    doc["format_version"] = kCheckpointFormatVersion;
    doc["shardrec_version"] = kShardrecVersion;
    doc["step"] = request.step;
    doc["tables"] = json::parse(TablesToJson(configs))["tables"];
    doc["optimizer"] = {{"spec", tables.options().optimizer.ToString()}, {"iteration", request.optimizer_iteration}};
    doc["plan"] = json::parse(PlanToJson(plan));
    doc["files"] = std::move(files);
    if (mc != nullptr) doc["managed_collision"] = checkpoint::MergeManagedCollision(mc_summaries);
    const json dense = json::parse(reports[0])["dense"];
    if (!dense.is_null()) doc["dense"] = dense;
    // Read back through the loader's own checks: a manifest this build
    // writes must be one it loads.
    auto manifest = ParseCheckpointManifest(doc.dump(), (root / name / "manifest.json").string());
    if (!manifest.ok()) {
      fs::remove_all(staging, ec);
      return InternalError("the checkpoint being saved is inconsistent (a bug): " + manifest.status().message());
    }
    int64_t total = 0;
    for (const auto& f : manifest->files) total += f.bytes;
    if (!dense.is_null()) {
      for (const auto& f : dense["files"]) total += f["bytes"].get<int64_t>();
    }
    SR_RETURN_IF_ERROR(SyncTree(staging));
    SR_RETURN_IF_ERROR(WriteFileAtomically(staging / "manifest.json",
                                           [&](std::ostream& out) { out << CheckpointManifestToJson(*manifest); }));
    SR_RETURN_IF_ERROR(PublishDirectory(staging, root / name));
    SR_RETURN_IF_ERROR(checkpoint::SyncDirectory(root));
    std::vector<std::string> removed;
    SR_RETURN_IF_ERROR(PruneCheckpoints(root, request.keep_last, &removed));
    return json{{"bytes", total}, {"removed", removed}}.dump();
  }));
  const json result = json::parse(published);
  saved.dir = root / name;
  saved.bytes = result["bytes"].get<int64_t>();
  saved.removed = result["removed"].get<std::vector<std::string>>();
  return saved;
}

}  // namespace shardrec
