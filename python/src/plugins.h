// The process's plugins for the Python package: one HostServices and
// registry, loaded from the directories the package names (its own
// plugins/, SHARDREC_PLUGIN_PATH). What failed to load is reported, not
// fatal: the package turns it into warnings.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/core/host_services.h"
#include "shardrec/core/plugin_library.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec::python {

class Plugins {
 public:
  Plugins(const std::vector<std::filesystem::path>& dirs, bool use_environment)
      : services_(SR_LOG_WARN), registry_(&services_) {
    DiscoveryOptions options;
    options.plugin_dirs = dirs;
    options.use_environment = use_environment;
    options.use_default_dir = false;  // beside python3 is no place of ours
    registry_.Discover(options);
  }
  const PluginRegistry& registry() const { return registry_; }

  // (path, why) of every library or directory that was not loaded.
  std::vector<std::pair<std::string, std::string>> Skipped() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const SkippedPlugin& s : registry_.skipped()) out.emplace_back(s.path.string(), s.reason.message());
    return out;
  }
  // (kind, name) of every component, e.g. ("kernel", "cpu").
  std::vector<std::pair<std::string, std::string>> Components() const {
    std::vector<std::pair<std::string, std::string>> out;
    for (const ComponentRef& c : registry_.Components()) out.emplace_back(KindName(c.kind()), c.name());
    return out;
  }

 private:
  HostServices services_;
  PluginRegistry registry_;
};

}  // namespace shardrec::python
