// Managed-collision state in a checkpoint (managed_collision_state.h).
#include "managed_collision_state.h"

#include <algorithm>
#include <map>

#include <fmt/format.h>

#include "file_io.h"
#include "shardrec/core/managed_collision/managed_collision_config.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec::checkpoint {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

json Counters(const ManagedCollisionStats& s) {
  return {{"lookups", s.lookups},       {"hits", s.hits},           {"defaulted", s.defaulted},
          {"residual", s.residual},     {"admissions", s.admissions}, {"refusals", s.refusals},
          {"evictions", s.evictions},   {"rounds", s.rounds}};
}

StatusOr<ManagedCollisionStats> CountersFrom(const json& j, const std::string& where) {
  ManagedCollisionStats s;
  if (!j.is_object()) return InvalidArgumentError(where + ": \"counters\" must be an object");
  for (auto [key, field] : std::initializer_list<std::pair<const char*, int64_t*>>{
           {"lookups", &s.lookups}, {"hits", &s.hits}, {"defaulted", &s.defaulted}, {"residual", &s.residual},
           {"admissions", &s.admissions}, {"refusals", &s.refusals}, {"evictions", &s.evictions}, {"rounds", &s.rounds}}) {
    if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() < 0) {
      return InvalidArgumentError(fmt::format("{}: counters.{} must be an integer >= 0", where, key));
    }
    *field = j[key].get<int64_t>();
  }
  return s;
}

Status WriteInt64(const fs::path& staging, const std::string& rel, const std::vector<int64_t>& values,
                  std::vector<int64_t> shape, CheckpointFile entry, std::vector<CheckpointFile>* files, int64_t* bytes) {
  SR_ASSIGN_OR_RETURN(NpyStream s, NpyStream::Create(staging / rel, "<i8", shape));
  SR_RETURN_IF_ERROR(s.Append(values.data(), values.size() * sizeof(int64_t)));
  SR_RETURN_IF_ERROR(s.Finish());
  entry.path = rel;
  entry.dtype = "<i8";
  entry.shape = std::move(shape);
  entry.bytes = s.bytes();
  entry.xxh3_64 = s.checksum();
  *bytes += entry.bytes;
  files->push_back(std::move(entry));
  return Status::Ok();
}

}  // namespace

StatusOr<json> SaveManagedCollision(const std::vector<MchManagedCollisionModule>& modules, const fs::path& staging,
                                    std::vector<CheckpointFile>* files, int64_t* bytes) {
  json summary = json::object();
  for (const auto& m : modules) {
    if (m.staged()) {  // its window holds a step that may yet be undone
      return InternalError("managed collision: table " + m.table() +
                           " is in the middle of a step; a checkpoint is taken between steps");
    }
    summary[m.table()] = {{"config", ManagedCollisionSpec(m.config())}, {"state_width", m.StateWidth()},
                          {"iteration", m.iteration()}, {"last_round", m.last_round()},
                          {"counters", Counters(m.stats())}};
    if (m.NumRows() == 0) continue;  // no buckets on this rank
    std::vector<int64_t> rows, candidates;
    m.ExportState(&rows, &candidates);
    const int64_t r0 = m.FirstRow(), r1 = r0 + m.NumRows();
    std::error_code ec;
    fs::create_directories(staging / "tables" / m.table(), ec);
    CheckpointFile entry;
    entry.table = m.table();
    entry.row_begin = r0;
    entry.row_end = r1;
    entry.col_begin = 0;
    entry.col_end = 1;
    entry.kind = kMcSlots;
    SR_RETURN_IF_ERROR(WriteInt64(staging, fmt::format("tables/{}/{}.r{}-{}.npy", m.table(), kMcSlots, r0, r1), rows,
                                  {m.NumRows(), m.StateWidth()}, entry, files, bytes));
    entry.kind = kMcWindow;
    SR_RETURN_IF_ERROR(WriteInt64(staging, fmt::format("tables/{}/{}.r{}-{}.npy", m.table(), kMcWindow, r0, r1),
                                  candidates, {static_cast<int64_t>(candidates.size() / 4), 4}, entry, files, bytes));
  }
  return summary;
}

json MergeManagedCollision(const std::vector<json>& summaries) {
  json merged = json::object();
  for (const json& s : summaries) {
    for (const auto& [table, t] : s.items()) {
      if (!merged.contains(table)) {
        merged[table] = t;
        continue;
      }
      for (const auto& [key, value] : t["counters"].items()) {
        merged[table]["counters"][key] = merged[table]["counters"][key].get<int64_t>() + value.get<int64_t>();
      }
    }
  }
  return merged;
}

Status CheckManagedCollision(const std::vector<MchManagedCollisionModule>& modules, const CheckpointManifest& m,
                             const std::string& source) {
  const json saved = m.extra.value("managed_collision", json::object());
  std::string problems;
  for (const auto& mod : modules) {
    if (!saved.is_object() || !saved.contains(mod.table())) {
      problems += "\n  table '" + mod.table() + "' is managed here, but the checkpoint has no managed-collision state "
                  "for it";
      continue;
    }
    const json& t = saved[mod.table()];
    const std::string want = ManagedCollisionSpec(mod.config());
    if (!t.is_object() || t.value("config", json()) != want) {
      problems += fmt::format("\n  table '{}': managed collision {}, the checkpoint's {}", mod.table(), want,
                              t.is_object() ? t.value("config", json()).dump() : t.dump());
    } else if (t.value("state_width", json()) != mod.StateWidth()) {
      problems += fmt::format("\n  table '{}': the eviction policy keeps {} metadata column(s), the checkpoint's {}",
                              mod.table(), mod.StateWidth() - 6, t.value("state_width", json()).dump());
    }
  }
  if (saved.is_object()) {
    for (const auto& item : saved.items()) {
      const std::string table = item.key();  // not a structured binding: clang 14 cannot capture one
      if (std::none_of(modules.begin(), modules.end(), [&](const auto& mod) { return mod.table() == table; })) {
        problems += "\n  the checkpoint's table '" + table + "' has managed-collision state, but is not managed here";
      }
    }
  }
  if (problems.empty()) return Status::Ok();
  return FailedPreconditionError(source + ": managed collision differs from this run's:" + problems);
}

Status LoadManagedCollision(std::vector<MchManagedCollisionModule>& modules, const fs::path& dir,
                            const CheckpointManifest& m) {
  const json& saved = m.extra["managed_collision"];
  for (auto& mod : modules) {
    const std::string where = (dir / "manifest.json").string() + ": managed_collision." + mod.table();
    const json& t = saved[mod.table()];
    const json iteration = t.value("iteration", json()), last_round = t.value("last_round", json());
    if (!iteration.is_number_integer() || !last_round.is_number_integer()) {
      return InvalidArgumentError(where + ": \"iteration\" and \"last_round\" must be integers");
    }
    SR_ASSIGN_OR_RETURN(ManagedCollisionStats counters, CountersFrom(t.value("counters", json()), where));
    // The counters were summed over the ranks that saved: one module per table takes them.
    if (mod.NumRows() == 0 || mod.buckets().first != 0) counters = ManagedCollisionStats{};
    const int64_t width = mod.StateWidth(), r0 = mod.FirstRow(), r1 = r0 + mod.NumRows();
    std::vector<int64_t> rows(static_cast<size_t>(mod.NumRows() * width)), candidates;
    std::vector<int64_t> covered(static_cast<size_t>(mod.NumRows()), 0);
    for (const auto& f : m.files) {
      if (f.table != mod.table() || f.row_end <= r0 || f.row_begin >= r1 || f.kind.rfind("mc.", 0) != 0) continue;
      const bool slots = f.kind == kMcSlots;
      if (!slots && f.kind != kMcWindow) continue;
      const fs::path path = dir / f.path;
      SR_ASSIGN_OR_RETURN(NpyLayout layout, ReadNpyLayout(path));
      const int64_t file_width = slots ? width : 4;
      if (layout.descr != "<i8" || layout.shape.size() != 2 || layout.shape[1] != file_width ||
          (slots && layout.shape[0] != f.row_end - f.row_begin)) {
        return InvalidArgumentError(fmt::format("{}: expected int64 [{}, {}], holds {} {}", path.string(),
                                                slots ? f.row_end - f.row_begin : layout.shape[0], file_width,
                                                layout.descr, ShapeString(layout.shape)));
      }
      SR_ASSIGN_OR_RETURN(FileHandle file, FileHandle::OpenForReading(path));
      if (slots) {
        const int64_t a = std::max(r0, f.row_begin), b = std::min(r1, f.row_end);
        SR_RETURN_IF_ERROR(file.ReadAt(rows.data() + (a - r0) * width, static_cast<size_t>((b - a) * width) * 8,
                                       layout.data_offset + (a - f.row_begin) * width * 8));
        for (int64_t r = a; r < b; ++r) ++covered[static_cast<size_t>(r - r0)];
      } else {
        const size_t at = candidates.size();
        candidates.resize(at + static_cast<size_t>(layout.shape[0] * 4));
        SR_RETURN_IF_ERROR(file.ReadAt(candidates.data() + at, static_cast<size_t>(layout.shape[0]) * 32, layout.data_offset));
      }
    }
    for (size_t r = 0; r < covered.size(); ++r) {
      if (covered[r] != 1) {
        return InvalidArgumentError(fmt::format("{}: row {} of table '{}' is in {} {} files, not 1", dir.string(),
                                                r0 + static_cast<int64_t>(r), mod.table(), covered[r], kMcSlots));
      }
    }
    SR_RETURN_IF_ERROR(mod.ImportState(rows, candidates, iteration.get<int64_t>(), last_round.get<int64_t>(), counters)
                           .WithContext((dir / "manifest.json").string()));
  }
  return Status::Ok();
}

}  // namespace shardrec::checkpoint
