// The plugin registry: finds plugin libraries, loads each through
// PluginLibrary (which validates it), skips a bad one with its reason and goes
// on, and refuses a component whose (kind, name) another library already
// provides, naming both files.
//
// Search order: explicit --plugin paths, then each --plugin-dir, then each
// directory of SHARDREC_PLUGIN_PATH (colon-separated), then the directory
// installed or built beside the host executable (DefaultPluginDir()). Within
// a directory, files are taken in name order so results are reproducible.
//
// The search path is a security boundary (docs/abi.md): a library, or a
// directory searched, that another user could write is refused, as is a
// relative entry of SHARDREC_PLUGIN_PATH and a search of the current
// directory itself (`.`): see DiscoveryOptions::allow_unsafe_paths.
//
// Thread-safety: Discover() is not thread-safe; the lookups are, once
// discovery finished.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/core/host_services.h"
#include "shardrec/core/plugin_library.h"
#include "shardrec/core/status.h"

namespace shardrec {

struct DiscoveryOptions {
  std::vector<std::filesystem::path> plugin_dirs;   // --plugin-dir, repeatable
  std::vector<std::filesystem::path> plugin_files;  // --plugin, repeatable
  bool use_environment = true;   // read SHARDREC_PLUGIN_PATH
  bool use_default_dir = true;   // the directory beside the executable
  // The kinds (SR_KIND_*) a command uses; empty: all. A directory's library
  // whose file name promises another kind is not loaded, so a broken plugin
  // of a kind the command never touches cannot break it. Bundles and
  // --plugin files are always loaded.
  std::vector<int32_t> kinds;
  // Load, with a warning, what would be refused as unsafe: libraries and
  // directories another user could write, and the current directory.
  bool allow_unsafe_paths = false;
};

// A library or directory that was not taken, and why.
struct SkippedPlugin {
  std::filesystem::path path;
  Status reason;
};

class PluginRegistry {
 public:
  // `services` must outlive the registry and everything loaded from it.
  explicit PluginRegistry(HostServices* services);

  // Loads every plugin the options name. Never fails as a whole: problems
  // become entries of skipped() and log lines.
  void Discover(const DiscoveryOptions& options);
  // Loads one library (also used by Discover). Error: why it was skipped
  // (also recorded in skipped(), not logged: the caller reports it once).
  // `allow_unsafe`: see DiscoveryOptions::allow_unsafe_paths.
  Status LoadLibrary(const std::filesystem::path& path, bool allow_unsafe = false);

  const std::vector<std::shared_ptr<PluginLibrary>>& libraries() const { return libraries_; }
  const std::vector<SkippedPlugin>& skipped() const { return skipped_; }
  std::vector<ComponentRef> Components() const;
  std::vector<ComponentRef> Components(int32_t kind) const;

  // The component of `kind` named `name`. Error NOT_FOUND lists the names
  // that exist. With an empty name: the highest-priority component.
  StatusOr<ComponentRef> Find(int32_t kind, const std::string& name) const;

 private:
  void Skip(const std::filesystem::path& path, Status reason);
  void DiscoverInto(const DiscoveryOptions& options);  // Discover without the log

  HostServices* services_;
  std::vector<std::shared_ptr<PluginLibrary>> libraries_;
  std::vector<SkippedPlugin> skipped_;
};

// <dir of the running executable>/<relative plugin dir chosen at build time>:
// the same relative path in the build tree and after `cmake --install`.
std::filesystem::path DefaultPluginDir();

}  // namespace shardrec
