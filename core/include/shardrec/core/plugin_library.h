// One loaded plugin library: the dlopen'ed file, its validated sr_plugin_api
// and its components. Loading runs every check of ABI rules 1-3 and 10 before
// the plugin is initialised, so a bad library is refused with one clear line.
//
// Lifetime: a PluginLibrary is shared (std::shared_ptr) by the registry and by
// every object created from it, so the code outlives all of those objects.
// Its destructor calls the plugin's shutdown() and then unloads it, unless a
// component asked never to be unloaded (GPU runtimes, ABI rule 11).
#pragma once

#include <atomic>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <optional>
#include <vector>

#include "shardrec/core/status.h"
#include "shardrec/plugin_api.h"

namespace shardrec {

// "sharder", "kernel", "comm", "eviction"; "unknown" for anything else.
const char* KindName(int32_t kind);
// SR_KIND_* for a name, 0 when unknown.
int32_t KindFromName(const std::string& name);

// What a file name `libshardrec_<kind>_<name>.so` promises. `kind` is one of
// the four kinds or "bundle" (a library that carries several kinds).
struct PluginFileName {
  std::string kind;
  std::string name;
};
// Parses a file name; an error says what the convention is.
StatusOr<PluginFileName> ParsePluginFileName(const std::string& file_name);

class PluginLibrary;

// The library PluginLibrary::Load is running code of right now (from dlopen
// to the end of initialize()), or empty: what an exit() guard names when a
// plugin ends the process while being loaded. While Load runs, a crash
// (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT) first writes
// "shardrec: crashed (SIGSEGV) while loading plugin library PATH" to stderr.
std::filesystem::path LibraryBeingLoaded();

// A component of a loaded library. Keeps its library alive.
struct ComponentRef {
  std::shared_ptr<PluginLibrary> library;
  const sr_component* component = nullptr;

  int32_t kind() const { return component->kind; }
  std::string name() const { return component->name; }
  const void* vtable() const { return component->vtable; }
  // The items of the component's string-list attribute `name` (NULL items
  // skipped), or nullopt when it declares none.
  std::optional<std::vector<std::string>> StringListAttribute(std::string_view name) const;
  // The value of the component's INT64 (or BOOL) attribute `name`, or
  // nullopt when it declares none of that type.
  std::optional<int64_t> Int64Attribute(std::string_view name) const;
  std::optional<bool> BoolAttribute(std::string_view name) const;
};

class PluginLibrary : public std::enable_shared_from_this<PluginLibrary> {
 public:
  // Loads, validates and initialises the library at `path` (made absolute).
  // `host` must outlive the returned library.
  static StatusOr<std::shared_ptr<PluginLibrary>> Load(const std::filesystem::path& path,
                                                       const sr_host_api* host);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const sr_plugin_api& api() const { return *api_; }
  std::string name() const { return api_->plugin_name; }
  std::string version() const { return api_->plugin_version ? api_->plugin_version : ""; }
  // "1.0"
  std::string AbiVersion() const;
  std::vector<ComponentRef> Components();

  // Converts (and destroys) a status returned by one of this library's
  // entries. `what` names the call for the message ("eviction lru: score").
  Status TakeStatus(sr_status* status, const std::string& what) const;

  // Runs `entry` (a lambda calling one plugin entry and returning its
  // sr_status*) and converts the result. An exception that a plugin lets
  // escape across the C boundary becomes INTERNAL instead of unwinding here.
  // `what` names the call in messages; it is only formatted on error, so
  // the success path costs one indirect call and a branch.
  template <class Entry>
  Status Call(const char* what, Entry&& entry) const {
    sr_status* status = nullptr;
    try {
      status = entry();
    } catch (...) {
      return Status(SR_INTERNAL,
                    std::string(what) + ": the plugin threw an exception across the C boundary");
    }
    if (status == nullptr) return Status::Ok();
    return TakeStatus(status, what);
  }

 private:
  struct Impl;
  explicit PluginLibrary(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  std::filesystem::path path_;
  const sr_plugin_api* api_ = nullptr;
};

}  // namespace shardrec
