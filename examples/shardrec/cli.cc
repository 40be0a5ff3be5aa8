// Command-line plumbing shared by the subcommands (see cli.h).
#include "cli.h"

#include "shardrec/core/device/cuda_runtime.h"
#include "shardrec/core/plugin_objects.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>

namespace shardrec::cli {

po::typed_value<double>* DoubleValue(double* v) {
  return po::value(v)->default_value(*v, fmt::format("{}", *v));
}

void AddGlobalOptions(po::options_description& desc, GlobalOptions* g) {
  desc.add_options()
      ("help,h", "show this help and exit")
      ("plugin-dir", po::value(&g->plugin_dirs)->composing(),
       "directory to scan for libshardrec_<kind>_<name>.so plugins (repeatable; "
       "SHARDREC_PLUGIN_PATH adds more, colon-separated)")
      ("plugin", po::value(&g->plugins)->composing(),
       "load this plugin library explicitly (repeatable)")
      ("no-default-plugins", po::bool_switch(&g->no_default_plugins),
       "do not scan the plugin directory installed beside this program")
      ("allow-unsafe-plugins", po::bool_switch(&g->allow_unsafe_plugins),
       "load, with a warning, plugins from places shardrec refuses: a library or directory another "
       "user could write, the current directory ('.'), a relative SHARDREC_PLUGIN_PATH entry (see "
       "docs/abi.md)")
      ("plugin-opt", po::value(&g->plugin_opts)->composing(),
       "option for one component, KIND.NAME.KEY=VALUE, e.g. eviction.lru.decay_exponent=2 "
       "(repeatable)")
      ("config", po::value(&g->config),
       "read options from this file: one 'key = value' a line, keys as the long flags")
      ("log-level", po::value(&g->log_level)->default_value("warn"),
       "trace, debug, info, warn, error or off")
      ("json", po::bool_switch(&g->json), "print results as one JSON object on the last line");
}

namespace {

// Words of `text` in lines of at most `width` characters. A word is never
// cut (Boost's own formatter cuts one when it would leave a line under half
// full, which split paths such as docs/managed_collision.md); a word longer
// than `width` gets a line of its own.
std::vector<std::string> Wrap(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    const std::string word = text.substr(start, end - start);
    start = end + 1;
    if (word.empty()) continue;
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    line += (line.empty() ? "" : " ") + word;
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}

}  // namespace

void PrintOptions(std::ostream& os, const po::options_description& desc) {
  constexpr size_t kLine = 100, kMaxNameColumn = 40;
  std::vector<std::pair<std::string, std::string>> rows;
  size_t name_width = 0;
  for (const auto& o : desc.options()) {
    std::string name = "  " + o->format_name() + " " + o->format_parameter();
    while (!name.empty() && name.back() == ' ') name.pop_back();
    name_width = std::max(name_width, name.size());
    rows.emplace_back(std::move(name), o->description());
  }
  const size_t column = std::min(name_width + 2, kMaxNameColumn);
  os << "options:\n";
  for (const auto& [name, text] : rows) {
    const std::vector<std::string> lines = Wrap(text, kLine - column);
    os << name;
    size_t at = name.size();
    if (at + 1 > column) {  // a long name: its description starts on the next line
      os << "\n";
      at = 0;
    }
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) at = 0;
      os << std::string(column - at, ' ') << lines[i] << "\n";
    }
    if (lines.empty()) os << "\n";
  }
}

namespace {

// SHARDREC_PLUGIN_DIR -> plugin-dir, for options that exist in `desc`.
// SHARDREC_PLUGIN_PATH is read by the registry itself, not here.
std::string EnvToOption(const po::options_description& desc, const std::string& env) {
  const std::string prefix = "SHARDREC_";
  if (env.rfind(prefix, 0) != 0 || env == "SHARDREC_PLUGIN_PATH") return "";
  std::string name = env.substr(prefix.size());
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) {
    return c == '_' ? '-' : static_cast<char>(std::tolower(c));
  });
  return desc.find_nothrow(name, false) ? name : "";
}

// Boost.Program_options fills its messages' placeholders (%value%,
// %option%, %invalid_line%, ...) by replacing each until none is left, so a
// value or an option name that contains a placeholder can make a message
// that never finishes (found by the `config` fuzz target: `--seed %value%`
// hung). Text with anything shaped like one, %letters_or_underscores%, is
// refused before Boost sees it. Returns the first such piece, or "".
std::string BoostPlaceholderIn(const std::string& text) {
  for (size_t open = text.find('%'); open != std::string::npos; open = text.find('%', open + 1)) {
    size_t end = open + 1;
    while (end < text.size() && (std::isalpha(static_cast<unsigned char>(text[end])) || text[end] == '_')) ++end;
    if (end > open + 1 && end < text.size() && text[end] == '%') return text.substr(open, end - open + 1);
  }
  return "";
}

// A config file is read whole, and at most this much of it: `--config
// /dev/zero` must be an error, not a process that reads forever.
constexpr std::streamsize kMaxConfigBytes = 1 << 20;

std::string ReadConfigFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw po::error("cannot open config file '" + path + "'");
  std::string text(static_cast<size_t>(kMaxConfigBytes) + 1, '\0');
  in.read(text.data(), kMaxConfigBytes + 1);
  if (in.bad()) throw po::error("cannot read config file '" + path + "'");
  text.resize(static_cast<size_t>(in.gcount()));
  if (static_cast<std::streamsize>(text.size()) > kMaxConfigBytes) {
    throw po::error("config file '" + path + "' is larger than 1 MiB; it is not a config file");
  }
  if (const std::string p = BoostPlaceholderIn(text); !p.empty()) {
    throw po::error("config file '" + path + "' contains '" + p + "', which cannot appear in options or values");
  }
  return text;
}

}  // namespace

bool Parse(const std::string& command, const std::vector<std::string>& args,
           po::options_description& desc, const po::positional_options_description* positional,
           po::variables_map* vm, int* exit_code, const std::string& usage_tail) {
  try {
    for (size_t i = 0; i < args.size(); ++i) {
      if (const std::string p = BoostPlaceholderIn(args[i]); !p.empty()) {
        throw po::error("argument " + std::to_string(i + 1) + " contains '" + p +
                        "', which cannot appear in options or values");
      }
    }
    po::command_line_parser parser(args);
    parser.options(desc).style(kCommandLineStyle);
    if (positional) parser.positional(*positional);
    const po::parsed_options parsed = parser.run();
    // Program_options keeps words that are not options and store() drops
    // them: `shardrec plugins lsit` would run `plugins`. A command without
    // positional arguments refuses them instead.
    if (!positional) {
      for (const po::option& o : parsed.options) {
        if (o.position_key >= 0 && !o.original_tokens.empty()) {
          throw po::error("unexpected argument '" + o.original_tokens[0] + "'" +
                          (command == "launch" ? " (the command the ranks run goes after '--')"
                                               : " (options start with --)"));
        }
      }
    }
    po::store(parsed, *vm);
    if (vm->count("help")) {
      std::cout << "usage: shardrec " << command << " [options]" << usage_tail << "\n\n";
      PrintOptions(std::cout, desc);
      std::cout << "\n";
      *exit_code = kExitOk;
      return false;
    }
    std::string config_path;
    if (vm->count("config")) {
      config_path = (*vm)["config"].as<std::string>();
    } else if (const char* env = std::getenv("SHARDREC_CONFIG"); env != nullptr && *env) {
      config_path = env;
    }
    if (!config_path.empty()) {
      std::istringstream in(ReadConfigFile(config_path));
      po::store(po::parse_config_file(in, desc), *vm);
    }
    po::store(po::parse_environment(desc,
                                    [&](const std::string& env) {
                                      const std::string name = EnvToOption(desc, env);
                                      const char* value = name.empty() ? nullptr : std::getenv(env.c_str());
                                      if (value != nullptr && !BoostPlaceholderIn(value).empty()) {
                                        throw po::error("environment variable " + env + " contains '" +
                                                        BoostPlaceholderIn(value) +
                                                        "', which cannot appear in options or values");
                                      }
                                      return name;
                                    }),
              *vm);
    po::notify(*vm);
  } catch (const po::error& e) {
    std::cerr << "shardrec " << command << ": " << e.what() << "\n"
              << "Try 'shardrec " << command << " --help'.\n";
    *exit_code = kExitUsage;
    return false;
  }
  return true;
}

namespace {

// Sets the log level and collects --plugin-opt values. Error: a malformed
// flag, naming it.
Status ApplyGlobals(const GlobalOptions& g, PluginOptions* options, int32_t& session_level) {
  const spdlog::level::level_enum level = spdlog::level::from_str(g.log_level);
  if (level == spdlog::level::off && g.log_level != "off") {
    return InvalidArgumentError("--log-level '" + g.log_level +
                                "' is not one of trace, debug, info, warn, error, off");
  }
  spdlog::set_level(level);
  // spdlog and SR_LOG_* both count trace=0 .. error=4; "off" silences plugins too.
  session_level = level == spdlog::level::off ? SR_LOG_ERROR + 1 : static_cast<int32_t>(level);
  for (const std::string& flag : g.plugin_opts) SR_RETURN_IF_ERROR(options->Add(flag));
  return Status::Ok();
}

}  // namespace

bool OpenSession(const std::string& command, const GlobalOptions& g, const PluginKinds& kinds,
                 HostSession* session) {
  int32_t level = SR_LOG_WARN;
  if (Status s = ApplyGlobals(g, &session->plugin_options, level); !s.ok()) {
    std::cerr << "shardrec " << command << ": " << s.message() << "\n";
    return false;
  }
  session->services.set_min_log_level(level);
  if (!kinds.empty()) {
    DiscoveryOptions d;
    for (const auto& p : g.plugin_dirs) d.plugin_dirs.emplace_back(p);
    for (const auto& p : g.plugins) d.plugin_files.emplace_back(p);
    d.use_default_dir = !g.no_default_plugins;
    d.kinds = kinds;
    d.allow_unsafe_paths = g.allow_unsafe_plugins;
    session->registry.Discover(d);
    // An option for a component that does not exist is a typo, not a no-op
    // (options for kinds this command does not load are not its business).
    for (const auto& [kind, name] : session->plugin_options.Components()) {
      const int32_t k = KindFromName(kind);
      if (std::find(kinds.begin(), kinds.end(), k) == kinds.end()) continue;
      if (!session->registry.Find(k, name).ok()) {
        std::cerr << "shardrec " << command << ": --plugin-opt names " << kind << " '" << name
                  << "', which no plugin provides (see 'shardrec plugins list')\n";
        return false;
      }
    }
  }
  return true;
}

void PrintLine(std::ostream& os, const std::string& line) {
  static std::mutex mu;
  const std::string whole = line + "\n";
  std::lock_guard<std::mutex> lock(mu);
  os.write(whole.data(), static_cast<std::streamsize>(whole.size()));
  os.flush();
}

Status CheckKernelsUsable(const PluginRegistry& registry, const std::vector<std::string>& kernels,
                                 int32_t optimizer) {
  for (const std::string& name : kernels) {
    SR_ASSIGN_OR_RETURN(ComponentRef ref, registry.Find(SR_KIND_KERNEL, name));
    if (Status s = CheckKernelOptimizer(ref, optimizer); !s.ok()) {
      return Status(s.code(), s.message() + "; choose one of those with --optimizer, or another --kernel");
    }
    std::string why;
    if (DeviceFor(ref, 0).device_type == kDLCUDA && device::CudaDeviceCount(&why) == 0) {
      return Status(SR_FAILED_PRECONDITION, "kernel '" + name + "' runs on NVIDIA GPUs and this machine has none (" +
                                                why + "); use --kernel cpu");
    }
  }
  return Status::Ok();
}

}  // namespace shardrec::cli
