// LoadCheckpoint (checkpoint.h): check every file first (shared out over the
// ranks), agree, then each rank reads the rows and columns of its parts.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "dense_state.h"
#include "file_io.h"
#include "managed_collision_state.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/checkpoint/checksum.h"
#include "shardrec/core/checkpoint/directory.h"
#include "shardrec/core/tensor/npy.h"
#include "table_parts.h"

namespace shardrec {

namespace fs = std::filesystem;
using checkpoint::FileHandle;
using checkpoint::TablePart;

namespace {

// Checks an .npy against what the manifest says of it.
Status VerifyNpy(const fs::path& path, const std::string& descr, const std::vector<int64_t>& shape, int64_t bytes,
                 const std::string& xxh3, bool checksum, int64_t* hashed) {
  auto layout = ReadNpyLayout(path);
  if (!layout.ok()) {
    if (layout.status().code() == SR_NOT_FOUND) return Status(SR_NOT_FOUND, path.string() + ": missing");
    return layout.status();
  }
  if (layout->file_bytes != bytes) {
    return InvalidArgumentError(fmt::format("{}: {} bytes, the manifest says {} (truncated or rewritten)", path.string(),
                                            layout->file_bytes, bytes));
  }
  if (layout->descr != descr || layout->shape != shape) {
    return InvalidArgumentError(fmt::format("{}: holds {} {}, the manifest says {} {}", path.string(), layout->descr,
                                            ShapeString(layout->shape), descr, ShapeString(shape)));
  }
  if (layout->data_offset + layout->payload_bytes != layout->file_bytes) {
    return InvalidArgumentError(path.string() + ": has bytes after its array");
  }
  if (!checksum) return Status::Ok();
  int64_t read = 0;
  SR_ASSIGN_OR_RETURN(uint64_t digest, Xxh3OfFile(path, &read));
  *hashed += read;
  if (Xxh3Hex(digest) != xxh3) {
    return DataLossError(fmt::format("{}: checksum mismatch (XXH3 {}, the manifest says {}): the file changed after it "
                                     "was saved", path.string(), Xxh3Hex(digest), xxh3));
  }
  return Status::Ok();
}

// A row-ids file shared by a shard's kinds is checked with each: it is
// 8 bytes a row, small beside the data.
Status VerifyRowIds(const fs::path& dir, const CheckpointFile& file, bool checksum, int64_t* hashed) {
  return VerifyNpy(dir / file.row_ids->path, "<i8", {file.shape[0]}, file.row_ids->bytes, file.row_ids->xxh3_64,
                   checksum, hashed);
}

// An open data file and where its array starts; when hashing as it is
// read, the hash of its bytes [0, hashed_to), while every read so far has
// continued where the one before it ended.
struct OpenFile {
  FileHandle handle;
  int64_t data_offset = 0;
  const CheckpointFile* meta = nullptr;
  std::unique_ptr<Xxh3Stream> hash;
  int64_t hashed_to = 0;
};

class PartLoader {
 public:
  // hash_while_reading: see CheckpointLoadRequest::verify_before_loading.
  PartLoader(const fs::path& dir, const CheckpointManifest& manifest, int32_t optimizer, bool load_state,
             int64_t chunk_bytes, bool hash_while_reading)
      : dir_(dir), manifest_(manifest), optimizer_(optimizer), load_state_(load_state), chunk_bytes_(chunk_bytes),
        hash_while_reading_(hash_while_reading) {
    for (size_t i = 0; i < manifest.files.size(); ++i) {
      by_kind_[{manifest.files[i].table, manifest.files[i].kind}].push_back(i);
    }
  }

  int64_t bytes_read() const { return bytes_read_; }

  // The files read whole and in order, checked against their checksums
  // (their paths, into *verified); a mismatch is an error naming the file.
  Status CheckHashed(std::set<std::string>* verified, int64_t* hashed) const {
    for (const auto& [path, file] : open_) {
      if (!file.hash || file.hashed_to != file.meta->bytes) continue;
      *hashed += file.hashed_to;
      const std::string digest = Xxh3Hex(file.hash->Digest());
      if (digest != file.meta->xxh3_64) {
        return DataLossError(fmt::format("{}: checksum mismatch (XXH3 {}, the manifest says {}): the file changed "
                                         "after it was saved", (dir_ / path).string(), digest, file.meta->xxh3_64));
      }
      verified->insert(path);
    }
    return Status::Ok();
  }

  Status Load(const TablePart& part) {
    const EmbeddingTableConfig& t = *part.table;
    const auto slices = load_state_ && part.state_dim > 0 ? checkpoint::StateSlices(optimizer_, part.cols)
                                                          : std::vector<checkpoint::StateSlice>{};
    const int64_t wsize = static_cast<int64_t>(DTypeSize(part.weight_dtype));
    // A quantized table's rows are bytes, loaded whole.
    const int64_t wcols = FileWidth(t, "weights", part.col_begin, part.col_begin + part.cols);
    const int64_t row_bytes = wcols * wsize + part.state_dim * static_cast<int64_t>(sizeof(float));
    // Rows go through a buffer of at most 1 MiB (or the chunk size, when
    // smaller), which stays in the cache from the read to the copy into the
    // table: a 64 MiB buffer took 1.5x as long with the page cache hot.
    const int64_t buffer_bytes = std::min(chunk_bytes_, kCheckpointPieceBytes);
    const int64_t chunk = std::clamp<int64_t>(buffer_bytes / std::max<int64_t>(row_bytes, 1), 1, part.rows);
    std::vector<int64_t> local(static_cast<size_t>(chunk)), global(static_cast<size_t>(chunk));
    // One chunk's buffers for the whole part: a fresh allocation per chunk
    // would fault its pages in again every time.
    const Tensor w_chunk = Tensor::Empty(part.weight_dtype, {chunk, wcols});
    const Tensor s_chunk = Tensor::Empty(dtype::kFloat32, {slices.empty() ? 0 : chunk, part.state_dim});
    for (int64_t begin = 0; begin < part.rows; begin += chunk) {
      const int64_t n = std::min(chunk, part.rows - begin);
      local.resize(static_cast<size_t>(n));
      global.resize(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) {
        local[static_cast<size_t>(i)] = begin + i;
        global[static_cast<size_t>(i)] = part.GlobalRow(begin + i);
      }
      Tensor w = n == chunk ? w_chunk : Tensor::Empty(part.weight_dtype, {n, wcols});
      SR_RETURN_IF_ERROR(Fill(part, "weights", global, static_cast<char*>(w.raw_data()), wsize, wcols, 0, wcols));
      std::optional<Tensor> s;
      if (!slices.empty()) {
        s = n == chunk ? s_chunk : Tensor::Empty(dtype::kFloat32, {n, part.state_dim});
        for (const auto& slice : slices) {
          SR_RETURN_IF_ERROR(Fill(part, slice.kind, global, static_cast<char*>(s->raw_data()), sizeof(float),
                                  part.state_dim, slice.offset, slice.width));
        }
      }
      SR_RETURN_IF_ERROR(part.write_rows(local, &w, s ? &*s : nullptr)
                             .WithContext(fmt::format("writing loaded rows of table '{}'", t.name)));
    }
    return Status::Ok();
  }

 private:
  // Fills columns [offset, offset + width) of the rows `global` of `out`
  // (rows of `stride` elements of `elem` bytes) from the files of `kind`.
  Status Fill(const TablePart& part, const std::string& kind, const std::vector<int64_t>& global, char* out,
              int64_t elem, int64_t stride, int64_t offset, int64_t width) {
    const EmbeddingTableConfig& t = *part.table;
    const bool per_column = KindIsPerColumn(kind);
    // Packed rows (a quantized table's weights) are read whole: their file
    // and the part both cover every column (the manifest and the plan
    // check it), and widths count bytes, not columns.
    const bool packed = KindIsPackedRows(t, kind);
    const int64_t c0 = part.col_begin, c1 = part.col_begin + part.cols;
    std::vector<int64_t> covered(global.size(), 0);
    auto it = by_kind_.find({t.name, kind});
    if (it == by_kind_.end()) return InvalidArgumentError(fmt::format("{}: no {} files for table '{}'", dir_.string(), kind, t.name));
    for (size_t index : it->second) {
      const CheckpointFile& f = manifest_.files[index];
      // The columns this file gives the part: per-column kinds their
      // overlap; row-wise Adagrad the block holding the part's first column.
      int64_t fc0, fc1;
      if (packed) {
        fc0 = 0;
        fc1 = width;
      } else if (per_column) {
        fc0 = std::max(c0, f.col_begin);
        fc1 = std::min(c1, f.col_end);
        if (fc0 >= fc1) continue;
      } else {
        if (c0 < f.col_begin || c0 >= f.col_end) continue;
        fc0 = 0;
        fc1 = 1;
      }
      const int64_t file_width = packed ? width : per_column ? f.col_end - f.col_begin : 1;
      const bool sliced = per_column && !packed;
      const int64_t skip = sliced ? fc0 - f.col_begin : 0;          // file columns before ours
      const int64_t at = offset + (sliced ? fc0 - c0 : 0);           // where they go in `out`
      const int64_t take = fc1 - fc0;
      // (row in `global`, row in the file), in order of both.
      std::vector<std::pair<int64_t, int64_t>> rows;
      if (f.row_ids) {
        SR_ASSIGN_OR_RETURN(const std::vector<int64_t>* ids, RowIds(f));
        for (size_t i = 0; i < global.size(); ++i) {
          auto pos = std::lower_bound(ids->begin(), ids->end(), global[i]);
          if (pos != ids->end() && *pos == global[i]) rows.emplace_back(static_cast<int64_t>(i), pos - ids->begin());
        }
      } else {
        for (size_t i = 0; i < global.size(); ++i) {
          if (global[i] >= f.row_begin && global[i] < f.row_end) rows.emplace_back(static_cast<int64_t>(i), global[i] - f.row_begin);
        }
      }
      if (rows.empty()) continue;
      SR_ASSIGN_OR_RETURN(OpenFile* file, Open(f));
      const int64_t file_row_bytes = file_width * elem;
      for (size_t r = 0; r < rows.size();) {
        // A run of consecutive file rows: one read when it is whole rows.
        size_t e = r + 1;
        while (e < rows.size() && rows[e].second == rows[e - 1].second + 1) ++e;
        const int64_t run = static_cast<int64_t>(e - r);
        const bool consecutive = rows[e - 1].first - rows[r].first == run - 1;
        if (take == file_width && stride == take && consecutive) {
          // Whole rows landing whole in `out`: straight in, no copy.
          SR_RETURN_IF_ERROR(Read(file, out + rows[r].first * stride * elem, run * file_row_bytes,
                                  file->data_offset + rows[r].second * file_row_bytes));
        } else if (take == file_width) {
          scratch_.resize(static_cast<size_t>(run * file_row_bytes));
          SR_RETURN_IF_ERROR(Read(file, scratch_.data(), static_cast<int64_t>(scratch_.size()),
                                  file->data_offset + rows[r].second * file_row_bytes));
          for (size_t k = r; k < e; ++k) {
            std::memcpy(out + (rows[k].first * stride + at) * elem, scratch_.data() + (k - r) * file_row_bytes,
                        static_cast<size_t>(take * elem));
          }
        } else {
          for (size_t k = r; k < e; ++k) {
            SR_RETURN_IF_ERROR(Read(file, out + (rows[k].first * stride + at) * elem, take * elem,
                                    file->data_offset + rows[k].second * file_row_bytes + skip * elem));
          }
        }
        for (size_t k = r; k < e; ++k) covered[static_cast<size_t>(rows[k].first)] += take;
        r = e;
      }
    }
    for (size_t i = 0; i < global.size(); ++i) {
      if (covered[i] != width) {
        return InvalidArgumentError(fmt::format(
            "{}: row {} of table '{}': its {} files give {} of the {} value(s) it needs (rows missing from, or listed "
            "twice in, the files' row_ids)", dir_.string(), global[i], t.name, kind, covered[i], width));
      }
    }
    return Status::Ok();
  }

  StatusOr<OpenFile*> Open(const CheckpointFile& f) {
    auto it = open_.find(f.path);
    if (it != open_.end()) return &it->second;
    SR_ASSIGN_OR_RETURN(NpyLayout layout, ReadNpyLayout(dir_ / f.path));
    SR_ASSIGN_OR_RETURN(FileHandle handle, FileHandle::OpenForReading(dir_ / f.path));
    // Files stay open for the load: a part's chunks come back to them.
    OpenFile& file = open_.emplace(f.path, OpenFile{std::move(handle), layout.data_offset, &f, nullptr, 0}).first->second;
    if (hash_while_reading_) {
      // The checksum covers the header too.
      std::vector<char> header(static_cast<size_t>(layout.data_offset));
      SR_RETURN_IF_ERROR(file.handle.ReadAt(header.data(), header.size(), 0));
      file.hash = std::make_unique<Xxh3Stream>();
      file.hash->Update(header.data(), header.size());
      file.hashed_to = layout.data_offset;
    }
    return &file;
  }

  // `size` bytes at `offset` into `out`; hashed when they continue the
  // file's hash, and the file left to the pass after loading otherwise.
  Status Read(OpenFile* file, char* out, int64_t size, int64_t offset) {
    bytes_read_ += size;
    if (!file->hash || offset != file->hashed_to) {
      file->hash.reset();
      return file->handle.ReadAt(out, static_cast<size_t>(size), offset);
    }
    for (int64_t done = 0; done < size;) {
      const int64_t piece = std::min(kCheckpointPieceBytes, size - done);
      SR_RETURN_IF_ERROR(file->handle.ReadAt(out + done, static_cast<size_t>(piece), offset + done));
      file->hash->Update(out + done, static_cast<size_t>(piece));
      done += piece;
    }
    file->hashed_to += size;
    return Status::Ok();
  }

  StatusOr<const std::vector<int64_t>*> RowIds(const CheckpointFile& f) {
    auto it = row_ids_.find(f.row_ids->path);
    if (it != row_ids_.end()) return &it->second;
    SR_ASSIGN_OR_RETURN(Tensor ids, ReadNpy(dir_ / f.row_ids->path));
    if (!SameDType(ids.dtype(), dtype::kInt64) || ids.ndim() != 1 || ids.size(0) != f.shape[0]) {
      return InvalidArgumentError(fmt::format("{}: expected int64 [{}] row ids", (dir_ / f.row_ids->path).string(), f.shape[0]));
    }
    std::vector<int64_t> v(ids.data<int64_t>(), ids.data<int64_t>() + ids.numel());
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] < f.row_begin || v[i] >= f.row_end || (i > 0 && v[i] <= v[i - 1])) {
        return InvalidArgumentError(fmt::format("{}: row ids must ascend strictly within rows [{}, {}); entry {} is {}",
                                                (dir_ / f.row_ids->path).string(), f.row_begin, f.row_end, i, v[i]));
      }
    }
    return &row_ids_.emplace(f.row_ids->path, std::move(v)).first->second;
  }

  fs::path dir_;
  const CheckpointManifest& manifest_;
  int32_t optimizer_;
  bool load_state_;
  int64_t chunk_bytes_;
  bool hash_while_reading_;
  std::map<std::pair<std::string, std::string>, std::vector<size_t>> by_kind_;
  std::map<std::string, OpenFile> open_;
  std::map<std::string, std::vector<int64_t>> row_ids_;
  std::vector<char> scratch_;
  int64_t bytes_read_ = 0;
};

// What every rank does alike: this rank's outcome to all; the first
// failures, named by rank, if any rank failed.
Status Agree(const ProcessGroup* group, const Status& mine, const std::string& what) {
  if (group == nullptr) return mine.ok() ? mine : Status(mine.code(), what + ":\n  " + mine.message());
  const std::string text = mine.ok() ? "" : fmt::format("{}\x1f{}", static_cast<int>(mine.code()), mine.message());
  SR_ASSIGN_OR_RETURN(auto all, AllGatherStrings(*group, text));
  std::string errors;
  int code = SR_OK;
  std::set<std::string> seen;
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].empty()) continue;
    const size_t sep = all[r].find('\x1f');
    if (code == SR_OK) code = std::stoi(all[r].substr(0, sep));
    const std::string message = all[r].substr(sep + 1);
    if (!seen.insert(message).second) continue;  // the same file, reported by several ranks
    errors += (group->world_size() > 1 ? fmt::format("\n  rank {}: ", r) : std::string("\n  ")) + message;
  }
  if (errors.empty()) return Status::Ok();
  return Status(static_cast<int32_t>(code), what + ":" + errors);
}

StatusOr<LoadedCheckpoint> LoadParts(const std::vector<TablePart>& parts, const std::vector<EmbeddingTableConfig>& tables,
                                     const OptimizerSpec& optimizer, const CheckpointLoadRequest& request,
                                     const ProcessGroup* group, std::vector<MchManagedCollisionModule>* mc) {
  if (request.chunk_bytes <= 0) return InvalidArgumentError("checkpoint chunk size must be positive");
  const int me = group ? group->rank() : 0, world = group ? group->world_size() : 1;
  LoadedCheckpoint loaded;
  // Which checkpoint: rank 0 picks, so that a save publishing a newer one
  // meanwhile cannot give the ranks different ones. Then every rank reads
  // the manifest and judges it against the run alike.
  if (group != nullptr) {
    SR_ASSIGN_OR_RETURN(std::string dir, group->InvokeOnRankAndBroadcastResult(0, [&]() -> StatusOr<std::string> {
      SR_ASSIGN_OR_RETURN(fs::path resolved, ResolveCheckpoint(request.dir));
      return resolved.string();
    }));
    loaded.dir = dir;
  } else {
    SR_ASSIGN_OR_RETURN(loaded.dir, ResolveCheckpoint(request.dir));
  }
  SR_ASSIGN_OR_RETURN(loaded.manifest, LoadCheckpointManifest(loaded.dir));
  const CheckpointManifest& m = loaded.manifest;
  const std::string source = (loaded.dir / "manifest.json").string();
  SR_RETURN_IF_ERROR(CheckTablesMatch(m, tables, source, request.allow_extra_tables));
  SR_ASSIGN_OR_RETURN(OptimizerSpec saved, OptimizerSpec::Parse(m.optimizer));
  const bool load_state = optimizer.optimizer != SR_OPTIMIZER_NONE && !request.reset_optimizer;
  if (load_state && saved.optimizer != optimizer.optimizer) {
    return FailedPreconditionError(fmt::format(
        "{}: the checkpoint's optimizer is {}, this run's is {}: its state cannot carry over. Train with the same "
        "optimizer, or pass --reset-optimizer to load the weights only and start the optimizer afresh",
        source, m.optimizer, optimizer.ToString()));
  }
  loaded.optimizer_state_loaded = load_state && optimizer.optimizer != SR_OPTIMIZER_SGD;
  if (mc != nullptr) SR_RETURN_IF_ERROR(checkpoint::CheckManagedCollision(*mc, m, source));
  // The dense half: every rank reads all of it (a replica each), so every
  // rank checks it all, before anything changes.
  if (request.dense != nullptr) {
    SR_RETURN_IF_ERROR(checkpoint::CheckDense(*request.dense, m.extra, loaded.dir, request.reset_optimizer, source));
  }

  // Check every file that will be read, each by one rank (the largest
  // first, to the rank with the fewest bytes so far), then agree.
  std::set<std::string> kinds = {"weights"};
  if (mc != nullptr) kinds.insert({checkpoint::kMcSlots, checkpoint::kMcWindow});
  if (load_state) {
    for (const auto& k : CheckpointKinds(saved.optimizer)) kinds.insert(k);
  }
  std::set<std::string> run_tables;
  for (const auto& t : tables) run_tables.insert(t.name);
  std::vector<const CheckpointFile*> files;
  for (const auto& f : m.files) {
    if (kinds.contains(f.kind) && run_tables.contains(f.table)) files.push_back(&f);
  }
  std::sort(files.begin(), files.end(), [](auto* a, auto* b) { return a->bytes != b->bytes ? a->bytes > b->bytes : a->path < b->path; });
  // Each file to one rank (the largest first, to the rank with the fewest
  // bytes so far); `check` runs on this rank's share, then all agree.
  auto for_my_share = [&](const std::function<Status(const CheckpointFile&)>& check) {
    std::vector<int64_t> load(static_cast<size_t>(world), 0);
    for (const CheckpointFile* f : files) {
      const int r = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
      load[static_cast<size_t>(r)] += f->bytes;
      if (r != me) continue;
      SR_RETURN_IF_ERROR(check(*f));
    }
    return Status::Ok();
  };
  const bool hash_first = request.verify_before_loading || !request.verify_checksums;
  const Status checked = for_my_share([&](const CheckpointFile& f) {
    return VerifyCheckpointFile(loaded.dir, f, request.verify_checksums && hash_first, &loaded.bytes_checked_here);
  });
  SR_RETURN_IF_ERROR(Agree(group, checked, "checkpoint " + loaded.dir.string() + " is damaged; nothing was loaded"));

  PartLoader loader(loaded.dir, m, saved.optimizer, load_state, request.chunk_bytes, !hash_first);
  Status done = Status::Ok();
  for (const TablePart& part : parts) {
    if (part.rows == 0 || part.cols == 0) continue;
    done = loader.Load(part);
    if (!done.ok()) break;
  }
  if (done.ok() && mc != nullptr) done = checkpoint::LoadManagedCollision(*mc, loaded.dir, m);
  if (done.ok() && request.dense != nullptr) {
    done = checkpoint::LoadDense(*request.dense, m.extra, loaded.dir, request.reset_optimizer);
  }
  loaded.bytes_read_here = loader.bytes_read();
  const std::string mixed = "; the tables hold a mix of loaded and earlier rows";
  SR_RETURN_IF_ERROR(Agree(group, done, "loading checkpoint " + loaded.dir.string() + " failed part way" + mixed));
  if (hash_first) return loaded;

  // Checksums not yet checked: files no rank read whole and in order, and
  // the row ids of those that were.
  std::set<std::string> hashed;
  Status after = loader.CheckHashed(&hashed, &loaded.bytes_checked_here);
  std::string mine;
  for (const auto& path : hashed) mine += path + "\n";
  SR_ASSIGN_OR_RETURN(std::vector<std::string> all, group ? AllGatherStrings(*group, mine) : std::vector<std::string>{mine});
  for (const auto& text : all) {
    for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) hashed.insert(text.substr(at, end - at));
  }
  if (after.ok()) {
    after = for_my_share([&](const CheckpointFile& f) {
      if (!hashed.contains(f.path)) return VerifyCheckpointFile(loaded.dir, f, true, &loaded.bytes_checked_here);
      if (!f.row_ids) return Status::Ok();
      return VerifyRowIds(loaded.dir, f, true, &loaded.bytes_checked_here);
    });
  }
  SR_RETURN_IF_ERROR(Agree(group, after, "checkpoint " + loaded.dir.string() + " is damaged" + mixed + " (discard them)"));
  return loaded;
}

std::vector<EmbeddingTableConfig> PlanTables(const ShardedTables& tables) {
  std::vector<EmbeddingTableConfig> configs;
  for (const auto& t : tables.layout().plan().tables) configs.push_back(t.config);
  return configs;
}

}  // namespace

Status CheckTablesMatch(const CheckpointManifest& manifest, const std::vector<EmbeddingTableConfig>& tables,
                        const std::string& source, bool allow_extra_tables) {
  std::map<std::string, const EmbeddingTableConfig*> saved;
  for (const auto& t : manifest.tables) saved[t.name] = &t;
  std::string problems;
  std::set<std::string> run;
  for (const auto& t : tables) {
    run.insert(t.name);
    auto it = saved.find(t.name);
    if (it == saved.end()) {
      problems += "\n  table '" + t.name + "' is not in the checkpoint";
      continue;
    }
    const EmbeddingTableConfig& s = *it->second;
    if (s.num_embeddings != t.num_embeddings) problems += fmt::format("\n  table '{}': {} rows, the checkpoint's has {}", t.name, t.num_embeddings, s.num_embeddings);
    if (s.embedding_dim != t.embedding_dim) problems += fmt::format("\n  table '{}': dim {}, the checkpoint's has {}", t.name, t.embedding_dim, s.embedding_dim);
    if (s.data_type != t.data_type) problems += fmt::format("\n  table '{}': {}, the checkpoint's is {}", t.name, DataTypeName(t.data_type), DataTypeName(s.data_type));
  }
  for (const auto& t : manifest.tables) {
    if (!run.contains(t.name) && !allow_extra_tables) problems += "\n  the checkpoint's table '" + t.name + "' is not in this run";
  }
  if (problems.empty()) return Status::Ok();
  return FailedPreconditionError(source + ": the checkpoint's tables differ from this run's:" + problems);
}

Status VerifyCheckpointFile(const fs::path& dir, const CheckpointFile& file, bool checksum, int64_t* hashed) {
  int64_t ignored = 0;
  if (hashed == nullptr) hashed = &ignored;
  SR_RETURN_IF_ERROR(VerifyNpy(dir / file.path, file.dtype, file.shape, file.bytes, file.xxh3_64, checksum, hashed));
  if (!file.row_ids) return Status::Ok();
  return VerifyRowIds(dir, file, checksum, hashed);
}

StatusOr<LoadedCheckpoint> LoadCheckpoint(const ShardedTables& tables, const CheckpointLoadRequest& request,
                                          ShardedManagedCollisionCollection* mc) {
  SR_ASSIGN_OR_RETURN(auto parts, checkpoint::PartsOf(tables));
  // A replica is loaded by every rank that holds it.
  return LoadParts(parts, PlanTables(tables), tables.options().optimizer, request, &tables.group(),
                   mc ? &mc->modules() : nullptr);
}

StatusOr<LoadedCheckpoint> LoadCheckpoint(const EmbeddingTables& tables, const CheckpointLoadRequest& request,
                                          ManagedCollisionCollection* mc) {
  SR_ASSIGN_OR_RETURN(auto parts, checkpoint::PartsOf(tables));
  return LoadParts(parts, tables.configs(), tables.options().optimizer, request, nullptr,
                   mc ? &mc->modules() : nullptr);
}

}  // namespace shardrec
