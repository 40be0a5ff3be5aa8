// Shared command-line plumbing of the `shardrec` host: the global options
// every subcommand takes, parsing from flags, a config file and SHARDREC_*
// environment variables (in that order of precedence), and building the
// plugin registry from them.
#pragma once

#include <boost/program_options.hpp>

#include <ostream>
#include <string>
#include <vector>

#include "shardrec/core/host_services.h"
#include "shardrec/core/plugin_options.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/status.h"

namespace shardrec::cli {

namespace po = boost::program_options;

// Exit codes of every subcommand.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;

struct GlobalOptions {
  std::vector<std::string> plugin_dirs;
  std::vector<std::string> plugins;
  std::vector<std::string> plugin_opts;
  bool no_default_plugins = false;
  bool allow_unsafe_plugins = false;
  std::string config;
  std::string log_level = "warn";
  bool json = false;
};

// One subcommand: the words that select it ("plugins list"), a one-line
// summary for `shardrec --help`, and its entry point. `args` are the words
// after the command's own.
struct Command {
  std::string words;
  std::string summary;
  int (*run)(const std::vector<std::string>& args);
};
const std::vector<Command>& Commands();

// Boost's command-line style without prefix guessing: `--sharde` is an
// unknown option, not `--sharder`.
inline constexpr int kCommandLineStyle =
    po::command_line_style::default_style & ~po::command_line_style::allow_guessing;

// A floating-point flag bound to `v`, its default printed as people write
// it ("1e-05", "0.3"; Boost would print 1.0000000000000001e-05).
po::typed_value<double>* DoubleValue(double* v);

// `desc`'s options as help: names, then descriptions wrapped at word
// boundaries (never inside a word, unlike Boost's formatter).
void PrintOptions(std::ostream& os, const po::options_description& desc);

// Adds the global options to `desc`, bound to `g`.
void AddGlobalOptions(po::options_description& desc, GlobalOptions* g);

// Parses `args` against `desc` (plus `positional`), then the config file named
// by --config and SHARDREC_* variables. Returns false after printing help
// (with --help, *exit_code = kExitOk) or an error (*exit_code = kExitUsage).
bool Parse(const std::string& command, const std::vector<std::string>& args,
           po::options_description& desc, const po::positional_options_description* positional,
           po::variables_map* vm, int* exit_code, const std::string& usage_tail = "");

// What every command that uses plugins sets up: the host services, the
// users' plugin options, and the registry.
struct HostSession {
  HostServices services;
  PluginOptions plugin_options;
  PluginRegistry registry{&services};
};

// The plugin kinds (SR_KIND_*) a command uses: only libraries of these kinds
// (and bundles, and --plugin files) are loaded, so a broken plugin of
// another kind cannot break the command. kNoPlugins: no discovery at all.
using PluginKinds = std::vector<int32_t>;
inline const PluginKinds kNoPlugins = {};
inline const PluginKinds kAllPluginKinds = {SR_KIND_SHARDER, SR_KIND_KERNEL, SR_KIND_COMM, SR_KIND_EVICTION,
                                           SR_KIND_CODEC};

// Applies the global flags to `session` and finds the plugins of `kinds`
// they name. On a malformed flag prints the error and returns false.
bool OpenSession(const std::string& command, const GlobalOptions& g, const PluginKinds& kinds,
                 HostSession* session);

// Writes `line` and a newline to `os` whole, under one process-wide lock:
// ranks running as threads print without interleaving mid-line.
void PrintLine(std::ostream& os, const std::string& line);

// Refuses, before any work (and before ranks start, so it is said once),
// a kernel that cannot run: each of `kernels` must be found, list
// `optimizer` (SR_OPTIMIZER_*) in its "optimizers" attribute, and, if it
// runs only on GPUs, find one. The message names the kernel, what it has
// or why no GPU is usable, and the flag to change.
Status CheckKernelsUsable(const PluginRegistry& registry, const std::vector<std::string>& kernels,
                                 int32_t optimizer);

}  // namespace shardrec::cli
