// Reading and writing a checkpoint's manifest.json (see manifest.h and
// docs/checkpoints.md).
#include "shardrec/core/checkpoint/manifest.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "../io/json_number.h"
#include "shardrec/core/modules/optimizer_spec.h"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec {

namespace {

using json = nlohmann::json;

constexpr char kFormatName[] = "shardrec-checkpoint";
// Cells of the grid the files of one (table, kind) cut a table into: more
// is a manifest too fragmented to check, and refused.
constexpr int64_t kMaxGridCells = int64_t{1} << 22;
constexpr size_t kMaxFiles = size_t{1} << 20;

// The kinds of files a table needs under `optimizer` (SR_OPTIMIZER_*).
}  // namespace

std::vector<std::string> CheckpointKinds(int32_t optimizer) {
  switch (optimizer) {
    case SR_OPTIMIZER_ADAGRAD: return {"weights", "adagrad.sum"};
    case SR_OPTIMIZER_ROWWISE_ADAGRAD: return {"weights", "rowwise_adagrad.sum"};
    case SR_OPTIMIZER_ADAM: return {"weights", "adam.m", "adam.v"};
    default: return {"weights"};
  }
}

namespace {

bool KnownKind(const std::string& kind) {
  static const std::set<std::string> known = {"weights", "adagrad.sum", "rowwise_adagrad.sum", "adam.m", "adam.v"};
  return known.contains(kind) || kind.rfind("mc.", 0) == 0;
}

// A relative path of plain parts: no "..", no absolute path, no empty or
// hidden part, nothing but [A-Za-z0-9_.@-] in a part.
bool IsXxh3Hex(const std::string& s) {
  return s.size() == 16 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

bool SafeRelativePath(const std::string& path) {
  if (path.empty() || path.size() > 4096 || path.front() == '/') return false;
  std::stringstream parts(path);
  std::string part;
  while (std::getline(parts, part, '/')) {
    if (part.empty() || part.front() == '.') return false;
    for (unsigned char c : part) {
      if (!(std::isalnum(c) || c == '_' || c == '.' || c == '@' || c == '-')) return false;
    }
  }
  return path.back() != '/';
}

StatusOr<std::pair<int64_t, int64_t>> Range(const json& v, const std::string& what, int64_t limit) {
  if (!v.is_array() || v.size() != 2) return InvalidArgumentError(what + " must be [begin, end]");
  SR_ASSIGN_OR_RETURN(int64_t begin, JsonInteger(v[0], what + "[0]", 0, limit));
  SR_ASSIGN_OR_RETURN(int64_t end, JsonInteger(v[1], what + "[1]", 0, limit));
  if (begin >= end) return InvalidArgumentError(fmt::format("{} [{}, {}] is empty", what, begin, end));
  return std::make_pair(begin, end);
}

StatusOr<CheckpointFile> ParseFile(const json& e, const std::string& where,
                                   const std::map<std::string, const EmbeddingTableConfig*>& tables) {
  if (!e.is_object()) return InvalidArgumentError(where + ": expected an object");
  static const std::set<std::string> keys = {"path", "table", "kind", "rows", "cols",
                                             "dtype", "shape", "bytes", "xxh3_64", "row_ids"};
  for (const auto& [key, value] : e.items()) {
    if (!keys.contains(key)) return InvalidArgumentError(where + ": unknown key '" + key + "'");
  }
  for (const char* key : {"path", "table", "kind", "dtype", "xxh3_64"}) {
    if (!e.contains(key) || !e[key].is_string()) {
      return InvalidArgumentError(where + ": \"" + key + "\" must be a string");
    }
  }
  CheckpointFile f;
  f.path = e["path"].get<std::string>();
  f.table = e["table"].get<std::string>();
  f.kind = e["kind"].get<std::string>();
  f.dtype = e["dtype"].get<std::string>();
  f.xxh3_64 = e["xxh3_64"].get<std::string>();
  if (!SafeRelativePath(f.path)) {
    return InvalidArgumentError(where + ": path '" + f.path + "' is not a plain relative path inside the checkpoint");
  }
  auto table = tables.find(f.table);
  if (table == tables.end()) return InvalidArgumentError(where + ": table '" + f.table + "' is not in \"tables\"");
  const EmbeddingTableConfig& t = *table->second;
  if (!KnownKind(f.kind)) return InvalidArgumentError(where + ": unknown kind '" + f.kind + "'");
  if (!IsXxh3Hex(f.xxh3_64)) return InvalidArgumentError(where + ": xxh3_64 must be 16 lowercase hex digits");
  if (!e.contains("rows") || !e.contains("cols")) return InvalidArgumentError(where + ": \"rows\" and \"cols\" are required");
  SR_ASSIGN_OR_RETURN(auto rows, Range(e["rows"], where + ": rows", t.num_embeddings));
  SR_ASSIGN_OR_RETURN(auto cols, Range(e["cols"], where + ": cols", t.embedding_dim));
  std::tie(f.row_begin, f.row_end) = rows;
  std::tie(f.col_begin, f.col_end) = cols;
  if (!e.contains("shape") || !e["shape"].is_array() || e["shape"].size() != 2) {
    return InvalidArgumentError(where + ": \"shape\" must be [rows, cols]");
  }
  for (size_t i = 0; i < 2; ++i) {
    SR_ASSIGN_OR_RETURN(int64_t n, JsonInteger(e["shape"][i], where + ": shape", 0, kMaxTableElements));
    f.shape.push_back(n);
  }
  SR_ASSIGN_OR_RETURN(f.bytes, JsonInteger(e.value("bytes", json()), where + ": bytes", 0));
  if (e.contains("row_ids")) {
    const json& ids = e["row_ids"];
    const std::string at = where + ": row_ids";
    if (!ids.is_object() || !ids.contains("path") || !ids["path"].is_string() || !ids.contains("xxh3_64") ||
        !ids["xxh3_64"].is_string() || ids.size() != 3) {
      return InvalidArgumentError(at + " must be {\"path\": ..., \"bytes\": N, \"xxh3_64\": ...}");
    }
    CheckpointFile::RowIds r;
    r.path = ids["path"].get<std::string>();
    r.xxh3_64 = ids["xxh3_64"].get<std::string>();
    SR_ASSIGN_OR_RETURN(r.bytes, JsonInteger(ids.value("bytes", json()), at + ": bytes", 0));
    if (!SafeRelativePath(r.path)) {
      return InvalidArgumentError(at + ": path '" + r.path + "' is not a plain relative path inside the checkpoint");
    }
    if (!IsXxh3Hex(r.xxh3_64)) return InvalidArgumentError(at + ": xxh3_64 must be 16 lowercase hex digits");
    f.row_ids = std::move(r);
  }
  if (f.kind.rfind("mc.", 0) != 0) {
    if (KindIsPackedRows(t, f.kind) && (f.col_begin != 0 || f.col_end != t.embedding_dim)) {
      return InvalidArgumentError(fmt::format("{}: columns [{}, {}) of an {} table: its quantized rows are saved whole, "
                                              "columns [0, {})", where, f.col_begin, f.col_end,
                                              DataTypeName(t.data_type), t.embedding_dim));
    }
    const int64_t width = FileWidth(t, f.kind, f.col_begin, f.col_end);
    const bool rows_match = f.row_ids ? f.shape[0] >= 1 && f.shape[0] <= f.row_end - f.row_begin
                                      : f.shape[0] == f.row_end - f.row_begin;
    if (!rows_match || f.shape[1] != width) {
      return InvalidArgumentError(fmt::format("{}: shape [{}, {}] does not match rows [{}, {}) and {} column(s)", where,
                                              f.shape[0], f.shape[1], f.row_begin, f.row_end, width));
    }
    if (f.dtype != CheckpointDtype(t, f.kind)) {
      return InvalidArgumentError(fmt::format("{}: dtype {} for {} of a {} table, expected {}", where, f.dtype, f.kind,
                                              DataTypeName(t.data_type), CheckpointDtype(t, f.kind)));
    }
  }
  return f;
}

// The files of one (table, kind) must cover every cell of the table once.
Status CheckTiling(const std::vector<const CheckpointFile*>& files, const EmbeddingTableConfig& t,
                   const std::string& kind, const std::string& source) {
  const std::string what = fmt::format("{}: the {} files of table '{}'", source, kind, t.name);
  if (files.empty()) return InvalidArgumentError(what + " are missing");
  // Files with row_ids cover rows only their id lists name: here their
  // cells must add up with the others' to the table's; that each row is
  // in exactly one file is checked where the id lists are read (loading).
  std::vector<const CheckpointFile*> listed;
  int64_t listed_cells = 0;
  for (const CheckpointFile* f : files) {
    if (!f->row_ids) continue;
    listed.push_back(f);
    listed_cells += f->shape[0] * (f->col_end - f->col_begin);
  }
  if (!listed.empty()) {
    int64_t cells = listed_cells;
    for (const CheckpointFile* f : files) {
      if (!f->row_ids) cells += (f->row_end - f->row_begin) * (f->col_end - f->col_begin);
    }
    const int64_t want = t.num_embeddings * t.embedding_dim;
    if (cells != want) {
      return InvalidArgumentError(fmt::format("{} hold {} cells; the table has {} ({} x {})", what, cells, want,
                                              t.num_embeddings, t.embedding_dim));
    }
  }
  std::vector<int64_t> row_cuts = {0, t.num_embeddings}, col_cuts = {0, t.embedding_dim};
  for (const CheckpointFile* f : files) {
    row_cuts.insert(row_cuts.end(), {f->row_begin, f->row_end});
    col_cuts.insert(col_cuts.end(), {f->col_begin, f->col_end});
  }
  for (auto* cuts : {&row_cuts, &col_cuts}) {
    std::sort(cuts->begin(), cuts->end());
    cuts->erase(std::unique(cuts->begin(), cuts->end()), cuts->end());
  }
  const int64_t nr = static_cast<int64_t>(row_cuts.size()) - 1, nc = static_cast<int64_t>(col_cuts.size()) - 1;
  if (nr * nc > kMaxGridCells) return InvalidArgumentError(what + " cut the table into too many pieces to check");
  std::vector<const CheckpointFile*> owner(static_cast<size_t>(nr * nc), nullptr);
  auto index = [](const std::vector<int64_t>& cuts, int64_t v) {
    return std::lower_bound(cuts.begin(), cuts.end(), v) - cuts.begin();
  };
  for (const CheckpointFile* f : files) {
    if (f->row_ids) continue;
    for (int64_t r = index(row_cuts, f->row_begin); r < index(row_cuts, f->row_end); ++r) {
      for (int64_t c = index(col_cuts, f->col_begin); c < index(col_cuts, f->col_end); ++c) {
        const CheckpointFile*& cell = owner[static_cast<size_t>(r * nc + c)];
        if (cell != nullptr) {
          return InvalidArgumentError(fmt::format("{} overlap: {} and {} both hold rows [{}, {}) columns [{}, {})",
                                                  what, cell->path, f->path, row_cuts[r], row_cuts[r + 1],
                                                  col_cuts[c], col_cuts[c + 1]));
        }
        cell = f;
      }
    }
  }
  for (int64_t r = 0; r < nr && listed.empty(); ++r) {
    for (int64_t c = 0; c < nc; ++c) {
      if (owner[static_cast<size_t>(r * nc + c)] == nullptr) {
        return InvalidArgumentError(fmt::format("{} leave rows [{}, {}) columns [{}, {}) uncovered", what,
                                                row_cuts[r], row_cuts[r + 1], col_cuts[c], col_cuts[c + 1]));
      }
    }
  }
  return Status::Ok();
}

}  // namespace

std::string CheckpointDtype(const EmbeddingTableConfig& t, const std::string& kind) {
  if (kind != "weights") return "<f4";
  switch (t.data_type) {
    case DataType::kFp16: return "<f2";
    case DataType::kBf16: return "<u2";  // bfloat16's bits: NumPy has no bfloat16
    case DataType::kInt8:
    case DataType::kInt4:
    case DataType::kInt2: return "|u1";  // the rows' bytes: scale, bias, packed values
    case DataType::kFp32: break;
  }
  return "<f4";
}

bool KindIsPerColumn(const std::string& kind) { return kind != "rowwise_adagrad.sum"; }

bool KindIsPackedRows(const EmbeddingTableConfig& table, const std::string& kind) {
  return kind == "weights" && IsRowQuantized(table.data_type);
}

int64_t FileWidth(const EmbeddingTableConfig& table, const std::string& kind, int64_t c0, int64_t c1) {
  if (KindIsPackedRows(table, kind)) return table.WeightColumns();
  return KindIsPerColumn(kind) ? c1 - c0 : 1;
}

namespace {
StatusOr<CheckpointManifest> ParseManifest(const std::string& json_text, const std::string& source) {
  json doc;
  try {
    doc = json::parse(json_text);
  } catch (const json::exception& e) {
    return InvalidArgumentError(source + ": not valid JSON: " + e.what());
  }
  if (!doc.is_object() || doc.value("format", json()) != kFormatName) {
    return InvalidArgumentError(source + ": not a shardrec checkpoint manifest (\"format\" is not \"" +
                                kFormatName + "\")");
  }
  CheckpointManifest m;
  SR_ASSIGN_OR_RETURN(m.format_version,
                      JsonInteger(doc.value("format_version", json()), source + ": format_version", 1));
  if (m.format_version > kCheckpointFormatVersion) {
    const json& by = doc.value("shardrec_version", json());
    return FailedPreconditionError(fmt::format(
        "{}: format version {} was written by a newer shardrec ({}); this one reads versions up to {}", source,
        m.format_version, by.is_string() ? by.get<std::string>() : "unknown", kCheckpointFormatVersion));
  }
  if (!doc.contains("shardrec_version") || !doc["shardrec_version"].is_string()) {
    return InvalidArgumentError(source + ": \"shardrec_version\" must be a string");
  }
  m.shardrec_version = doc["shardrec_version"].get<std::string>();
  SR_ASSIGN_OR_RETURN(m.step, JsonInteger(doc.value("step", json()), source + ": step", 0));
  if (!doc.contains("tables") || !doc["tables"].is_array()) {
    return InvalidArgumentError(source + ": \"tables\" must be an array of table configs");
  }
  SR_ASSIGN_OR_RETURN(m.tables, ParseTablesJson(json{{"tables", doc["tables"]}}.dump(), source));
  const json& opt = doc.value("optimizer", json());
  if (!opt.is_object() || !opt.contains("spec") || !opt["spec"].is_string()) {
    return InvalidArgumentError(source + ": \"optimizer\" must be {\"spec\": \"...\", \"iteration\": N}");
  }
  m.optimizer = opt["spec"].get<std::string>();
  auto parsed = OptimizerSpec::Parse(m.optimizer);
  if (!parsed.ok()) return Status(parsed.status().code(), source + ": optimizer: " + parsed.status().message());
  const OptimizerSpec spec = parsed.value();
  SR_ASSIGN_OR_RETURN(m.optimizer_iteration,
                      JsonInteger(opt.value("iteration", json()), source + ": optimizer.iteration", 0));
  m.plan = doc.value("plan", json());
  if (!doc.contains("files") || !doc["files"].is_array()) return InvalidArgumentError(source + ": \"files\" must be an array");
  if (doc["files"].size() > kMaxFiles) return InvalidArgumentError(source + ": more than 2^20 files");

  std::map<std::string, const EmbeddingTableConfig*> by_name;
  for (const auto& t : m.tables) by_name[t.name] = &t;
  std::set<std::string> paths;
  size_t i = 0;
  for (const json& e : doc["files"]) {
    const std::string where = fmt::format("{}: files[{}]", source, i++);
    SR_ASSIGN_OR_RETURN(CheckpointFile f, ParseFile(e, where, by_name));
    if (!paths.insert(f.path).second) return InvalidArgumentError(where + ": path '" + f.path + "' is listed twice");
    m.files.push_back(std::move(f));
  }
  for (const auto& f : m.files) {
    if (f.row_ids && paths.contains(f.row_ids->path)) {
      return InvalidArgumentError(source + ": row_ids path '" + f.row_ids->path + "' is also a data file");
    }
  }
  for (const auto& t : m.tables) {
    for (const std::string& kind : CheckpointKinds(spec.optimizer)) {
      std::vector<const CheckpointFile*> mine;
      for (const auto& f : m.files) {
        if (f.table == t.name && f.kind == kind) mine.push_back(&f);
      }
      SR_RETURN_IF_ERROR(CheckTiling(mine, t, kind, source));
    }
  }
  static const std::set<std::string> known = {"format", "format_version", "shardrec_version", "step", "tables",
                                               "optimizer", "plan", "files"};
  for (const auto& [key, value] : doc.items()) {
    if (!known.contains(key)) m.extra[key] = value;
  }
  return m;
}
}  // namespace

StatusOr<CheckpointManifest> ParseCheckpointManifest(const std::string& json_text, const std::string& source) {
  // Every access above checks its type first; a JSON type error that slips
  // through is still a refusal naming the file, never an escaping exception
  // (the checkpoint_manifest fuzz target found one in the version message).
  try {
    return ParseManifest(json_text, source);
  } catch (const json::exception& e) {
    return InvalidArgumentError(source + ": " + e.what());
  }
}

StatusOr<CheckpointManifest> LoadCheckpointManifest(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "manifest.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status(SR_NOT_FOUND, path.string() + ": cannot open (not a checkpoint, or not published)");
  std::string text(size_t{64} << 20, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (!in.eof()) return InvalidArgumentError(path.string() + ": larger than 64 MiB");
  return ParseCheckpointManifest(text, path.string());
}

json CheckpointFileToJson(const CheckpointFile& f) {
  json e = {{"path", f.path},   {"table", f.table}, {"kind", f.kind},   {"rows", {f.row_begin, f.row_end}},
            {"cols", {f.col_begin, f.col_end}}, {"dtype", f.dtype}, {"shape", f.shape}, {"bytes", f.bytes},
            {"xxh3_64", f.xxh3_64}};
  if (f.row_ids) e["row_ids"] = {{"path", f.row_ids->path}, {"bytes", f.row_ids->bytes}, {"xxh3_64", f.row_ids->xxh3_64}};
  return e;
}

std::string CheckpointManifestToJson(const CheckpointManifest& m) {
  json doc = m.extra.is_object() ? m.extra : json::object();
  doc["format"] = kFormatName;
  doc["format_version"] = m.format_version;
  doc["shardrec_version"] = m.shardrec_version;
  doc["step"] = m.step;
  doc["tables"] = json::parse(TablesToJson(m.tables))["tables"];
  doc["optimizer"] = {{"spec", m.optimizer}, {"iteration", m.optimizer_iteration}};
  doc["plan"] = m.plan;
  doc["files"] = json::array();
  for (const CheckpointFile& f : m.files) doc["files"].push_back(CheckpointFileToJson(f));
  return doc.dump(1) + "\n";
}

}  // namespace shardrec
