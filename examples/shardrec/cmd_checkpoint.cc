// `shardrec checkpoint inspect DIR`: what a checkpoint holds (step,
// optimizer, tables, files, the plan it was written under), or, for a run's
// checkpoint directory, every checkpoint in it and why anything else there
// is not one; --verify checks every file's size, header and checksum.
#include <iostream>
#include <map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/checkpoint/directory.h"
#include "shardrec/core/text/byte_size.h"

namespace shardrec::cli {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

int64_t BytesOf(const CheckpointManifest& m) {
  int64_t total = 0;
  for (const auto& f : m.files) total += f.bytes;
  return total;
}

// The sharding types of the plan it was written under, for people: "t0 table_wise, ...".
std::string PlanSummary(const json& plan) {
  if (!plan.is_object() || !plan.contains("plan") || !plan["plan"].is_object()) return "unknown";
  std::map<std::string, int> types;
  std::set<int64_t> ranks;
  for (const auto& [table, p] : plan["plan"].items()) {
    if (p.is_object() && p.value("sharding_type", json()).is_string()) ++types[p["sharding_type"].get<std::string>()];
    if (p.is_object() && p.value("ranks", json()).is_array()) {
      for (const auto& r : p["ranks"]) {
        if (r.is_number_integer()) ranks.insert(r.get<int64_t>());
      }
    }
  }
  std::string s;
  for (const auto& [type, n] : types) s += fmt::format("{}{} {}", s.empty() ? "" : ", ", n, type);
  return fmt::format("{} rank(s); tables: {}", ranks.size(), s.empty() ? "none" : s);
}

json Describe(const fs::path& dir, const CheckpointManifest& m) {
  json tables = json::array();
  for (const auto& t : m.tables) {
    json kinds = json::object();
    int64_t bytes = 0, files = 0;
    for (const auto& f : m.files) {
      if (f.table != t.name) continue;
      kinds[f.kind] = kinds.value(f.kind, int64_t{0}) + f.bytes;
      bytes += f.bytes;
      ++files;
    }
    tables.push_back({{"name", t.name}, {"rows", t.num_embeddings}, {"dim", t.embedding_dim},
                      {"dtype", DataTypeName(t.data_type)}, {"bytes", bytes}, {"files", files}, {"bytes_by_kind", kinds}});
  }
  return {{"dir", dir.string()},
          {"step", m.step},
          {"format_version", m.format_version},
          {"shardrec_version", m.shardrec_version},
          {"optimizer", m.optimizer},
          {"optimizer_iteration", m.optimizer_iteration},
          {"tables", tables},
          {"files", m.files.size()},
          {"bytes", BytesOf(m)},
          {"written_under", PlanSummary(m.plan)},
          {"extra_keys", [&] {
             json keys = json::array();
             for (const auto& [k, v] : m.extra.items()) keys.push_back(k);
             return keys;
           }()}};
}

}  // namespace

int RunCheckpointInspect(const std::vector<std::string>& args) {
  GlobalOptions g;
  std::string dir_arg;
  bool verify = false;
  po::options_description desc("checkpoint inspect options");
  AddGlobalOptions(desc, &g);
  desc.add_options()("dir", po::value(&dir_arg), "a checkpoint, or a run's --checkpoint-dir (positional)")(
      "verify", po::bool_switch(&verify), "check every file: size, .npy header and XXH3 checksum (exit 1 if one is bad)");
  po::positional_options_description pos;
  pos.add("dir", 1);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("checkpoint inspect", args, desc, &pos, &vm, &code,
             " DIR\n\nShows what a checkpoint holds: step, optimizer, tables, files and sizes, the plan it was\n"
             "written under. Given a run's --checkpoint-dir, lists its checkpoints (and says why anything\n"
             "else there, such as a save that never finished, is not one), then shows the newest.\n\n"
             "examples:\n"
             "  shardrec checkpoint inspect ckpt                  # every checkpoint of the run, the newest in full\n"
             "  shardrec checkpoint inspect ckpt/step-00000100 --verify --json")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit_code) {
    std::cerr << "shardrec checkpoint inspect: " << m << "\n";
    return exit_code;
  };
  if (dir_arg.empty()) return fail("give a directory (see --help)", kExitUsage);
  const fs::path dir(dir_arg);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return fail(dir_arg + ": no such directory", kExitFailure);

  json out = {{"dir", dir.string()}};
  std::string text;
  const bool is_checkpoint = fs::exists(dir / "manifest.json", ec);
  if (!is_checkpoint) {
    // Not a checkpoint itself: a run's directory, or a save that never published.
    const std::string name = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
    if (name.rfind(kPartialCheckpointPrefix, 0) == 0 || name.rfind("step-", 0) == 0) {
      for (const auto& e : ListCheckpoints(dir.parent_path().empty() ? fs::path(".") : dir.parent_path())) {
        if (e.name == name) return fail(dir_arg + ": " + e.note, kExitFailure);
      }
      return fail(dir_arg + ": not a checkpoint: no manifest.json", kExitFailure);
    }
    out["checkpoints"] = json::array();
    int published = 0;
    for (const auto& e : ListCheckpoints(dir)) {
      json j = {{"name", e.name}, {"step", e.step}, {"published", e.published}};
      if (e.published) {
        ++published;
        auto m = LoadCheckpointManifest(e.path);
        if (m.ok()) {
          j["bytes"] = BytesOf(m.value());
          text += fmt::format("  {}  step {}, {}\n", e.name, e.step, FormatByteSize(BytesOf(m.value())));
        } else {
          j["error"] = m.status().message();
          text += fmt::format("  {}  unreadable manifest: {}\n", e.name, m.status().message());
        }
      } else {
        j["note"] = e.note;
        text += fmt::format("  {}  {}\n", e.name, e.note);
      }
      out["checkpoints"].push_back(std::move(j));
    }
    text = fmt::format("{}: {} published checkpoint(s)\n", dir.string(), published) + text;
  }
  auto resolved = ResolveCheckpoint(dir);
  if (!resolved.ok()) {
    if (g.json) std::cout << out.dump() << "\n";
    else std::cout << text;
    return fail(resolved.status().message(), kExitFailure);
  }
  auto manifest = LoadCheckpointManifest(resolved.value());
  if (!manifest.ok()) {
    if (g.json) std::cout << out.dump() << "\n";
    else std::cout << text;
    return fail(manifest.status().message(), kExitFailure);
  }
  const CheckpointManifest& m = manifest.value();
  json d = Describe(resolved.value(), m);
  if (!text.empty()) text += "\n";
  text += fmt::format("checkpoint {} (format {}, written by shardrec {})\n", resolved->string(), m.format_version,
                      m.shardrec_version);
  text += fmt::format("  step {}; optimizer {} (iteration {}); written under {}\n", m.step, m.optimizer,
                      m.optimizer_iteration, d["written_under"].get<std::string>());
  for (const auto& t : d["tables"]) {
    std::string kinds;
    for (const auto& [k, v] : t["bytes_by_kind"].items()) kinds += fmt::format("{}{} {}", kinds.empty() ? "" : ", ", k, FormatByteSize(v.get<int64_t>()));
    text += fmt::format("  table {}: {} x {} {}; {} in {} file(s): {}\n", t["name"].get<std::string>(), t["rows"].get<int64_t>(),
                        t["dim"].get<int64_t>(), t["dtype"].get<std::string>(), FormatByteSize(t["bytes"].get<int64_t>()),
                        t["files"].get<int64_t>(), kinds);
  }
  text += fmt::format("  {} file(s), {}\n", m.files.size(), FormatByteSize(BytesOf(m)));
  bool ok = true;
  if (verify) {
    json errors = json::array();
    for (const auto& f : m.files) {
      if (Status s = VerifyCheckpointFile(resolved.value(), f, /*checksum=*/true); !s.ok()) errors.push_back(s.message());
    }
    ok = errors.empty();
    d["verify"] = {{"ok", ok}, {"files", m.files.size()}, {"errors", errors}};
    if (ok) {
      text += fmt::format("  verify: all {} files match their size, header and XXH3 checksum\n", m.files.size());
    } else {
      text += fmt::format("  verify: {} of {} files are bad:\n", errors.size(), m.files.size());
      for (const auto& e : errors) text += "    " + e.get<std::string>() + "\n";
    }
  }
  out["checkpoint"] = std::move(d);
  if (g.json) std::cout << out.dump() << "\n";
  else std::cout << text;
  return ok ? kExitOk : kExitFailure;
}

}  // namespace shardrec::cli
