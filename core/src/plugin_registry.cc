// Discovery of plugin libraries (ABI rule 10).
#include "shardrec/core/plugin_registry.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>

#include "boost_dll.h"
#include "plugin_guard/path_trust.h"

#ifndef SHARDREC_PLUGIN_RELDIR
#error "SHARDREC_PLUGIN_RELDIR must be defined by the build"
#endif

namespace shardrec {

namespace fs = std::filesystem;

PluginRegistry::PluginRegistry(HostServices* services) : services_(services) {}

// Recorded, not logged: LoadLibrary's caller has the status and says it
// once; Discover, whose callers do not, logs what it skipped.
void PluginRegistry::Skip(const fs::path& path, Status reason) {
  skipped_.push_back(SkippedPlugin{path, std::move(reason)});
}

namespace {

// A path that would be refused as unsafe: the refusal, or (allowed) a
// warning and OK.
Status Trusted(const fs::path& path, bool allow_unsafe) {
  Status s = CheckOnlyWeCanWrite(path);
  if (s.ok() || !allow_unsafe) return s;
  spdlog::warn("loading plugins from an unsafe place (--allow-unsafe-plugins): {}", s.message());
  return Status::Ok();
}

// A plugin directory as given: `.` (however spelled) is refused unless
// allowed, since it loads whatever directory the command runs in; so is a
// relative entry of SHARDREC_PLUGIN_PATH, which changes meaning with the
// current directory just as `.` does.
Status CheckDirectoryEntry(const fs::path& dir, bool from_environment, bool allow_unsafe) {
  std::string why;
  std::error_code ec;
  if (from_environment && dir.is_relative()) {
    why = "is relative, so it names a different directory wherever shardrec runs; give an absolute path";
  } else if (dir.is_relative() && fs::equivalent(dir, fs::current_path(ec), ec)) {
    why = "is the current directory: a plugin directory is named, not wherever the command runs; give its path";
  }
  if (why.empty()) return Status::Ok();
  if (allow_unsafe) {
    spdlog::warn("plugin directory '{}' {} (loaded anyway: --allow-unsafe-plugins)", dir.string(), why);
    return Status::Ok();
  }
  return FailedPreconditionError("plugin directory '" + dir.string() + "' " + why +
                                 " (or pass --allow-unsafe-plugins)");
}

}  // namespace

Status PluginRegistry::LoadLibrary(const fs::path& path, bool allow_unsafe) {
  if (Status s = Trusted(path, allow_unsafe); !s.ok()) {
    Status refused(s.code(), s.message() + "; not loaded (--allow-unsafe-plugins loads it with a warning)");
    Skip(path, refused);
    return refused;
  }
  // The same file twice must not be initialised twice: both copies would
  // share one dlopen handle, and dropping one would shut the other down.
  std::error_code ec;
  for (const auto& other : libraries_) {
    if (fs::equivalent(other->path(), path, ec)) {
      spdlog::debug("plugin {} already loaded", path.string());
      return Status::Ok();
    }
  }
  auto loaded = PluginLibrary::Load(path, services_->api());
  if (!loaded.ok()) {
    Skip(path, loaded.status());
    return loaded.status();
  }
  std::shared_ptr<PluginLibrary> lib = std::move(loaded).value();
  // Refuse the whole library when one of its components is already provided:
  // taking half a library would leave the user guessing which code runs.
  for (const ComponentRef& mine : lib->Components()) {
    for (const auto& other : libraries_) {
      for (const ComponentRef& theirs : other->Components()) {
        if (theirs.kind() == mine.kind() && theirs.name() == mine.name()) {
          Status dup = AlreadyExistsError(std::string("duplicate ") + KindName(mine.kind()) +
                                          " component '" + mine.name() + "': provided by both " +
                                          other->path().string() + " and " +
                                          lib->path().string());
          Skip(lib->path(), dup);
          return dup;
        }
      }
    }
  }
  spdlog::debug("loaded plugin {} ({} components)", lib->path().string(),
                lib->api().num_components);
  libraries_.push_back(std::move(lib));
  return Status::Ok();
}

void PluginRegistry::Discover(const DiscoveryOptions& options) {
  const size_t skipped_before = skipped_.size();
  DiscoverInto(options);
  for (size_t i = skipped_before; i < skipped_.size(); ++i) {
    spdlog::warn("skipping plugin {}: {}", skipped_[i].path.string(), skipped_[i].reason.message());
  }
}

void PluginRegistry::DiscoverInto(const DiscoveryOptions& options) {
  std::vector<fs::path> dirs;
  for (const fs::path& dir : options.plugin_dirs) {
    if (Status s = CheckDirectoryEntry(dir, false, options.allow_unsafe_paths); !s.ok()) {
      Skip(dir, s);
    } else {
      dirs.push_back(dir);
    }
  }
  if (options.use_environment) {
    if (const char* env = std::getenv("SHARDREC_PLUGIN_PATH"); env != nullptr) {
      std::stringstream ss(env);
      std::string item;
      while (std::getline(ss, item, ':')) {
        if (item.empty()) continue;
        if (Status s = CheckDirectoryEntry(item, true, options.allow_unsafe_paths); !s.ok()) {
          Skip(fs::path(item), Status(s.code(), s.message() + " (in SHARDREC_PLUGIN_PATH)"));
        } else {
          dirs.emplace_back(item);
        }
      }
    }
  }
  if (options.use_default_dir) {
    const fs::path def = DefaultPluginDir();
    std::error_code ec;
    if (fs::is_directory(def, ec)) dirs.push_back(def);  // absent beside a bare binary: fine
  }

  for (const fs::path& file : options.plugin_files) (void)LoadLibrary(file, options.allow_unsafe_paths);

  // A directory's library is loaded when its file name promises a kind the
  // command uses (or a bundle); a name that breaks the convention is loaded
  // so that Load names what is wrong with it.
  auto wanted = [&](const fs::path& file) {
    if (options.kinds.empty()) return true;
    auto name = ParsePluginFileName(file.filename().string());
    if (!name.ok() || name->kind == "bundle") return true;
    return std::find(options.kinds.begin(), options.kinds.end(), KindFromName(name->kind)) != options.kinds.end();
  };

  std::vector<fs::path> seen_dirs;
  for (const fs::path& dir : dirs) {
    std::error_code ec;
    if (!fs::exists(dir, ec)) {
      Skip(dir, NotFoundError("plugin directory does not exist"));
      continue;
    }
    if (!fs::is_directory(dir, ec)) {
      Skip(dir, InvalidArgumentError("plugin directory is not a directory"));
      continue;
    }
    const fs::path canon = fs::canonical(dir, ec);
    if (std::find(seen_dirs.begin(), seen_dirs.end(), canon) != seen_dirs.end()) continue;
    seen_dirs.push_back(canon);
    if (Status s = Trusted(dir, options.allow_unsafe_paths); !s.ok()) {
      Skip(dir, Status(s.code(), s.message() + "; none of its plugins were loaded "
                                               "(--allow-unsafe-plugins loads them with a warning)"));
      continue;
    }

    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      // Only files that claim to be plugins are tried; other files in a
      // plugin directory (READMEs, versioned sonames) are none of our business.
      if (name.rfind("libshardrec_", 0) == 0 && entry.path().extension() == ".so") {
        files.push_back(entry.path());
      }
    }
    if (ec) {
      Skip(dir, UnavailableError("cannot list plugin directory: " + ec.message()));
      continue;
    }
    std::sort(files.begin(), files.end());
    for (const fs::path& f : files) {
      if (wanted(f)) (void)LoadLibrary(f, options.allow_unsafe_paths);
    }
  }
}

std::vector<ComponentRef> PluginRegistry::Components() const {
  std::vector<ComponentRef> out;
  for (const auto& lib : libraries_) {
    for (ComponentRef& c : lib->Components()) out.push_back(std::move(c));
  }
  return out;
}

std::vector<ComponentRef> PluginRegistry::Components(int32_t kind) const {
  std::vector<ComponentRef> out;
  for (ComponentRef& c : Components()) {
    if (c.kind() == kind) out.push_back(std::move(c));
  }
  return out;
}

StatusOr<ComponentRef> PluginRegistry::Find(int32_t kind, const std::string& name) const {
  std::vector<ComponentRef> candidates = Components(kind);
  if (name.empty()) {
    if (candidates.empty()) {
      return NotFoundError(std::string("no ") + KindName(kind) + " plugin was found");
    }
    return *std::max_element(candidates.begin(), candidates.end(), [](const auto& a, const auto& b) {
      return a.component->priority < b.component->priority;
    });
  }
  std::string names;
  for (const ComponentRef& c : candidates) {
    if (c.name() == name) return c;
    names += (names.empty() ? "" : ", ") + c.name();
  }
  return NotFoundError(std::string("unknown ") + KindName(kind) + " '" + name +
                       "' (available: " + (names.empty() ? "none" : names) + ")");
}

fs::path DefaultPluginDir() {
  const fs::path exe_dir(boost::dll::program_location().parent_path().string());
  return (exe_dir / SHARDREC_PLUGIN_RELDIR).lexically_normal();
}

}  // namespace shardrec
