// `shardrec plugins list`, `shardrec plugins check` and `shardrec plugins`
// (list what was found, then run the conformance kit on it).
#include <nlohmann/json.hpp>

#include <algorithm>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "cli.h"
#include "commands.h"
#include "shardrec/core/conformance.h"

namespace shardrec::cli {
namespace {

using nlohmann::json;

json ValueJson(const sr_named_value& v) {
  switch (v.type) {
    case SR_VALUE_STRING: return std::string(v.value.string_value, v.value_size);
    case SR_VALUE_INT64: return v.value.int64_value;
    case SR_VALUE_FLOAT64: return v.value.float64_value;
    case SR_VALUE_BOOL: return v.value.int64_value != 0;
    case SR_VALUE_INT64_LIST: return std::vector<int64_t>(v.value.int64_list, v.value.int64_list + v.value_size);
    case SR_VALUE_STRING_LIST: {
      json list = json::array();
      for (size_t i = 0; i < v.value_size; ++i) list.push_back(v.value.string_list[i]);
      return list;
    }
    default: return nullptr;
  }
}

json CapabilitiesJson(const sr_component& c) {
  json caps = json::object();
  for (size_t i = 0; i < c.attributes.count; ++i) {
    caps[c.attributes.values[i].name] = ValueJson(c.attributes.values[i]);
  }
  return caps;
}

std::string CapabilitiesText(const sr_component& c) {
  std::string out;
  const json caps = CapabilitiesJson(c);  // items() refers into it: keep it alive
  for (const auto& [k, v] : caps.items()) {
    out += (out.empty() ? "" : " ") + k + "=" + (v.is_string() ? v.get<std::string>() : v.dump());
  }
  return out;
}

json PluginsJson(const PluginRegistry& registry) {
  json plugins = json::array();
  for (const ComponentRef& c : registry.Components()) {
    plugins.push_back({{"kind", KindName(c.kind())},
                       {"name", c.name()},
                       {"version", c.component->version ? c.component->version : ""},
                       {"description", c.component->description ? c.component->description : ""},
                       {"priority", c.component->priority},
                       {"library", c.library->path().string()},
                       {"library_name", c.library->name()},
                       {"library_version", c.library->version()},
                       {"abi", c.library->AbiVersion()},
                       {"capabilities", CapabilitiesJson(*c.component)}});
  }
  json skipped = json::array();
  for (const SkippedPlugin& s : registry.skipped()) {
    skipped.push_back({{"path", s.path.string()}, {"reason", s.reason.ToString()}});
  }
  return json{{"plugins", plugins}, {"skipped", skipped}};
}

void PrintPluginsTable(const PluginRegistry& registry, std::ostream& out) {
  const auto components = registry.Components();
  out << components.size() << " plugin component(s) in " << registry.libraries().size()
      << " librar" << (registry.libraries().size() == 1 ? "y" : "ies") << "\n";
  // Columns as wide as their longest entry (two spaces between): component
  // names and versions come from third parties.
  size_t kind_w = 4, name_w = 4, version_w = 7;
  for (const ComponentRef& c : components) {
    kind_w = std::max(kind_w, std::string(KindName(c.kind())).size());
    name_w = std::max(name_w, c.name().size());
    version_w = std::max(version_w, std::string(c.component->version ? c.component->version : "").size());
  }
  auto row = [&](const std::string& kind, const std::string& name, const std::string& version,
                 const std::string& abi, const std::string& library) {
    out << std::left << std::setw(static_cast<int>(kind_w + 2)) << kind << std::setw(static_cast<int>(name_w + 2))
        << name << std::setw(static_cast<int>(version_w + 2)) << version << std::setw(5) << abi << library << "\n";
  };
  if (!components.empty()) row("KIND", "NAME", "VERSION", "ABI", "LIBRARY");
  for (const ComponentRef& c : components) {
    row(KindName(c.kind()), c.name(), c.component->version ? c.component->version : "", c.library->AbiVersion(),
        c.library->path().string());
    const std::string caps = CapabilitiesText(*c.component);
    if (!caps.empty()) out << std::string(kind_w + 2, ' ') << caps << "\n";
  }
  for (const SkippedPlugin& s : registry.skipped()) {
    out << "skipped " << s.path.string() << ": " << s.reason.message() << "\n";
  }
}

struct CheckTotals {
  int passed = 0, failed = 0, skipped = 0, unloadable = 0;
};

json RunChecks(const std::vector<std::shared_ptr<PluginLibrary>>& libraries,
               const PluginOptions& options, bool print, CheckTotals* totals) {
  json results = json::array();
  for (const auto& lib : libraries) {
    for (const ConformanceCheck& c : RunConformance(lib, options)) {
      if (print) {
        std::cout << CheckResultName(c.result) << "  " << c.component << ": " << c.check;
        if (!c.detail.empty()) std::cout << " (" << c.detail << ")";
        std::cout << "\n";
      }
      totals->passed += c.result == CheckResult::kPass;
      totals->failed += c.result == CheckResult::kFail;
      totals->skipped += c.result == CheckResult::kSkip;
      results.push_back({{"library", lib->path().string()},
                         {"component", c.component},
                         {"check", c.check},
                         {"result", CheckResultName(c.result)},
                         {"detail", c.detail}});
    }
  }
  return results;
}

std::string TotalsLine(const CheckTotals& t) {
  std::ostringstream s;
  s << "conformance: " << t.passed << " passed, " << t.failed << " failed, " << t.skipped
    << " skipped";
  if (t.unloadable) s << "; " << t.unloadable << " librar" << (t.unloadable == 1 ? "y" : "ies") << " refused";
  return s.str();
}

json TotalsJson(const CheckTotals& t) {
  return {{"passed", t.passed}, {"failed", t.failed}, {"skipped", t.skipped},
          {"refused_libraries", t.unloadable}};
}

}  // namespace

int RunPluginsList(const std::vector<std::string>& args) {
  GlobalOptions g;
  po::options_description desc("plugins list options");
  AddGlobalOptions(desc, &g);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("plugins list", args, desc, nullptr, &vm, &code)) return code;
  HostSession session;
  if (!OpenSession("plugins list", g, kAllPluginKinds, &session)) return kExitUsage;
  const PluginRegistry& registry = session.registry;
  if (g.json) {
    std::cout << PluginsJson(registry).dump() << "\n";
  } else {
    PrintPluginsTable(registry, std::cout);
  }
  return kExitOk;
}

int RunPluginsCheck(const std::vector<std::string>& args) {
  GlobalOptions g;
  std::vector<std::string> paths;
  po::options_description desc("plugins check options");
  AddGlobalOptions(desc, &g);
  desc.add_options()("path", po::value(&paths)->composing(), "plugin library to check (positional)");
  po::positional_options_description pos;
  pos.add("path", -1);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("plugins check", args, desc, &pos, &vm, &code,
             " PATH...\n\nLoads each library by path (nothing else is discovered), runs the "
             "conformance kit on\nevery component, prints one line per check and exits 1 on any "
             "failure")) {
    return code;
  }
  if (paths.empty()) {
    std::cerr << "shardrec plugins check: give at least one plugin library path\n"
              << "Try 'shardrec plugins check --help'.\n";
    return kExitUsage;
  }
  HostSession session;
  if (!OpenSession("plugins check", g, kNoPlugins, &session)) return kExitUsage;
  PluginRegistry& registry = session.registry;
  CheckTotals totals;
  json refused = json::array();
  for (const std::string& p : paths) {
    if (Status s = registry.LoadLibrary(p); !s.ok()) {
      ++totals.unloadable;
      if (!g.json) std::cout << "FAIL  " << p << ": " << s.message() << "\n";
      refused.push_back({{"path", p}, {"reason", s.ToString()}});
    }
  }
  json results = RunChecks(registry.libraries(), session.plugin_options, !g.json, &totals);
  if (g.json) {
    std::cout << json{{"checks", results}, {"refused", refused}, {"totals", TotalsJson(totals)}}.dump()
              << "\n";
  } else {
    std::cout << TotalsLine(totals) << "\n";
  }
  return totals.failed == 0 && totals.unloadable == 0 ? kExitOk : kExitFailure;
}

int RunPlugins(const std::vector<std::string>& args) {
  GlobalOptions g;
  po::options_description desc("plugins options");
  AddGlobalOptions(desc, &g);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("plugins", args, desc, nullptr, &vm, &code,
             "\n\nDiscovers plugins, lists them, and runs the conformance kit on each ('plugins list'\n"
             "only lists; 'plugins check PATH...' checks libraries given by path)")) {
    return code;
  }
  HostSession session;
  if (!OpenSession("plugins", g, kAllPluginKinds, &session)) return kExitUsage;
  const PluginRegistry& registry = session.registry;
  CheckTotals totals;
  if (!g.json) {
    PrintPluginsTable(registry, std::cout);
    std::cout << "\n";
  }
  json results = RunChecks(registry.libraries(), session.plugin_options, !g.json, &totals);
  if (g.json) {
    json out = PluginsJson(registry);
    out["checks"] = results;
    out["totals"] = TotalsJson(totals);
    std::cout << out.dump() << "\n";
  } else {
    std::cout << TotalsLine(totals) << "\n";
  }
  if (registry.libraries().empty()) {
    std::cerr << "shardrec plugins: no plugins found; give --plugin-dir DIR or set SHARDREC_PLUGIN_PATH\n";
    return kExitFailure;
  }
  return totals.failed == 0 ? kExitOk : kExitFailure;
}

}  // namespace shardrec::cli
