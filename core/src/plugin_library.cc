// Loading and validating one plugin library (ABI rules 1-3, 10, 11).
#include "shardrec/core/plugin_library.h"

#include <mutex>
#include <regex>
#include <string>
#include <system_error>
#include <vector>

#include "boost_dll.h"
#include "plugin_guard/crash_note.h"
#include "shardrec/core/status.h"

namespace shardrec {
namespace {

// The smallest struct sizes a v1.0 plugin may report. These are frozen at
// the last field of ABI 1.0: when a later minor appends fields, these stay
// as they are, and the newer fields are read only behind SR_HAS_FIELD.
constexpr size_t kPluginApiV10 = SR_STRUCT_SIZE(sr_plugin_api, components);
constexpr size_t kComponentV10 = SR_STRUCT_SIZE(sr_component, attributes);
constexpr size_t kSharderVtableV10 = SR_STRUCT_SIZE(sr_sharder_vtable, estimate_storage);
constexpr size_t kKernelVtableV10 = SR_STRUCT_SIZE(sr_kernel_vtable, reset_rows);
constexpr size_t kCommVtableV10 = SR_STRUCT_SIZE(sr_comm_vtable, request_destroy);
constexpr size_t kEvictionVtableV10 = SR_STRUCT_SIZE(sr_eviction_vtable, select);
constexpr size_t kCodecVtableV12 = SR_STRUCT_SIZE(sr_codec_vtable, decode);  // the kind came in 1.2
constexpr size_t kNamedValueV10 = SR_STRUCT_SIZE(sr_named_value, value_size);

// Checks each required function pointer of a vtable; returns the first
// missing one's name, or empty.
std::string FirstMissing(std::initializer_list<std::pair<const char*, const void*>> e) {
  for (const auto& [name, ptr] : e) {
    if (ptr == nullptr) return name;
  }
  return {};
}

#define SR_ENTRY_(v, f) std::pair<const char*, const void*>(#f, reinterpret_cast<const void*>((v)->f))

Status ValidateVtable(const sr_component& c) {
  const std::string who = std::string(KindName(c.kind)) + " '" + c.name + "'";
  if (c.vtable == nullptr) return InvalidArgumentError(who + ": vtable is NULL");
  const size_t size = *static_cast<const size_t*>(c.vtable);
  size_t need = 0;
  std::string missing;
  switch (c.kind) {
    case SR_KIND_SHARDER: {
      need = kSharderVtableV10;
      auto* v = static_cast<const sr_sharder_vtable*>(c.vtable);
      if (size >= need)
        missing = FirstMissing({SR_ENTRY_(v, create), SR_ENTRY_(v, destroy),
                                   SR_ENTRY_(v, shard_table)});
      break;
    }
    case SR_KIND_KERNEL: {
      need = kKernelVtableV10;
      auto* v = static_cast<const sr_kernel_vtable*>(c.vtable);
      if (size >= need)
        missing = FirstMissing({SR_ENTRY_(v, create), SR_ENTRY_(v, destroy),
                                   SR_ENTRY_(v, get_table_info), SR_ENTRY_(v, forward),
                                   SR_ENTRY_(v, read_rows), SR_ENTRY_(v, write_rows),
                                   SR_ENTRY_(v, reset_rows)});
      break;
    }
    case SR_KIND_COMM: {
      need = kCommVtableV10;
      auto* v = static_cast<const sr_comm_vtable*>(c.vtable);
      if (size >= need)
        missing = FirstMissing({SR_ENTRY_(v, create), SR_ENTRY_(v, destroy), SR_ENTRY_(v, split),
                SR_ENTRY_(v, all_to_all_v), SR_ENTRY_(v, reduce_scatter_v),
                SR_ENTRY_(v, all_gather_v), SR_ENTRY_(v, all_reduce), SR_ENTRY_(v, broadcast),
                SR_ENTRY_(v, barrier), SR_ENTRY_(v, request_test), SR_ENTRY_(v, request_wait),
                SR_ENTRY_(v, request_destroy)});
      break;
    }
    case SR_KIND_EVICTION: {
      need = kEvictionVtableV10;
      auto* v = static_cast<const sr_eviction_vtable*>(c.vtable);
      if (size >= need)
        missing = FirstMissing({SR_ENTRY_(v, create), SR_ENTRY_(v, destroy),
                                   SR_ENTRY_(v, score)});
      break;
    }
    case SR_KIND_CODEC: {
      need = kCodecVtableV12;
      auto* v = static_cast<const sr_codec_vtable*>(c.vtable);
      if (size >= need)
        missing = FirstMissing({SR_ENTRY_(v, create), SR_ENTRY_(v, destroy),
                                   SR_ENTRY_(v, quantized_dtype), SR_ENTRY_(v, quantized_size),
                                   SR_ENTRY_(v, encode), SR_ENTRY_(v, decode)});
      break;
    }
    default:
      return InvalidArgumentError("component '" + std::string(c.name) + "' has unknown kind " +
                                  std::to_string(c.kind));
  }
  if (size < need) {
    return InvalidArgumentError(who + ": vtable struct_size " + std::to_string(size) +
                                " is smaller than the " + std::to_string(need) + " bytes ABI " +
                                (c.kind == SR_KIND_CODEC ? "1.2" : "1.0") + " requires");
  }
  if (!missing.empty()) {
    return InvalidArgumentError(who + ": required entry '" + missing + "' is NULL");
  }
  return Status::Ok();
}
#undef SR_ENTRY_

Status ValidateAttributes(const sr_component& c) {
  const sr_named_value_list& list = c.attributes;
  if (list.count > 0 && list.values == nullptr) {
    return InvalidArgumentError(std::string("component '") + c.name +
                                "': attributes have a count but no values");
  }
  for (size_t i = 0; i < list.count; ++i) {
    const sr_named_value& v = list.values[i];
    const std::string where = std::string("component '") + c.name + "' attribute " +
                              std::to_string(i);
    if (v.struct_size < kNamedValueV10) {
      return InvalidArgumentError(where + ": struct_size " + std::to_string(v.struct_size) +
                                  " is smaller than the " + std::to_string(kNamedValueV10) +
                                  " bytes ABI 1.0 requires");
    }
    if (v.name == nullptr) return InvalidArgumentError(where + ": name is NULL");
    const bool is_pointer = v.type == SR_VALUE_STRING || v.type == SR_VALUE_INT64_LIST ||
                            v.type == SR_VALUE_STRING_LIST;
    if (v.type < SR_VALUE_STRING || v.type > SR_VALUE_STRING_LIST) {
      return InvalidArgumentError(where + " '" + v.name + "': unknown value type " +
                                  std::to_string(v.type));
    }
    if (is_pointer && v.value_size > 0 && v.value.string_value == nullptr) {
      return InvalidArgumentError(where + " '" + v.name + "': value is NULL");
    }
    if (v.type == SR_VALUE_STRING_LIST) {
      for (size_t j = 0; j < v.value_size; ++j) {
        if (v.value.string_list[j] == nullptr) {
          return InvalidArgumentError(where + " '" + v.name + "': list element " +
                                      std::to_string(j) + " is NULL");
        }
      }
    }
  }
  return Status::Ok();
}

bool WantsProcessLifetime(const sr_component& c) {
  for (size_t i = 0; i < c.attributes.count; ++i) {
    const sr_named_value& v = c.attributes.values[i];
    if (std::string(v.name) == "never_unload" &&
        (v.type == SR_VALUE_BOOL || v.type == SR_VALUE_INT64) && v.value.int64_value != 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

const char* KindName(int32_t kind) {
  switch (kind) {
    case SR_KIND_SHARDER: return "sharder";
    case SR_KIND_KERNEL: return "kernel";
    case SR_KIND_COMM: return "comm";
    case SR_KIND_EVICTION: return "eviction";
    case SR_KIND_CODEC: return "codec";
    default: return "unknown";
  }
}

int32_t KindFromName(const std::string& name) {
  for (int32_t k : {SR_KIND_SHARDER, SR_KIND_KERNEL, SR_KIND_COMM, SR_KIND_EVICTION, SR_KIND_CODEC}) {
    if (name == KindName(k)) return k;
  }
  return 0;
}

StatusOr<PluginFileName> ParsePluginFileName(const std::string& file_name) {
  static const std::regex kPattern("libshardrec_(sharder|kernel|comm|eviction|codec|bundle)_([a-z0-9_]+)\\.so");
  std::smatch m;
  if (!std::regex_match(file_name, m, kPattern)) {
    return InvalidArgumentError("file name '" + file_name +
                                "' does not follow libshardrec_<kind>_<name>.so with kind one of "
                                "sharder, kernel, comm, eviction, codec, bundle and name [a-z0-9_]+");
  }
  return PluginFileName{m[1].str(), m[2].str()};
}

struct PluginLibrary::Impl {
  // Declared first so it is destroyed last, after everything that points
  // into the library.
  boost::dll::shared_library library;
  bool initialized = false;
  bool keep_loaded = false;
};

PluginLibrary::PluginLibrary(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

PluginLibrary::~PluginLibrary() {
  if (impl_->initialized && api_->shutdown != nullptr) api_->shutdown();
  if (impl_->keep_loaded) {
    // Never dlclose a library that asked for process lifetime (CUDA fatbins,
    // atexit handlers): move its handle into a list that lives until exit
    // (reachable from a static, so leak checkers do not flag it).
    static auto* kept = new std::vector<boost::dll::shared_library>();
    kept->push_back(std::move(impl_->library));
  }
}

std::string PluginLibrary::AbiVersion() const {
  return std::to_string(api_->abi_major) + "." + std::to_string(api_->abi_minor);
}

std::vector<ComponentRef> PluginLibrary::Components() {
  std::vector<ComponentRef> out;
  for (size_t i = 0; i < api_->num_components; ++i) {
    // A kind from a newer minor than this host's was skipped at load.
    if (std::string(KindName(api_->components[i].kind)) == "unknown") continue;
    out.push_back(ComponentRef{shared_from_this(), &api_->components[i]});
  }
  return out;
}

Status PluginLibrary::TakeStatus(sr_status* status, const std::string& what) const {
  if (status == nullptr) return Status::Ok();
  int32_t code = api_->status_code(status);
  const char* msg = api_->status_message(status);
  std::string text = msg ? msg : "";
  api_->status_destroy(status);
  if (code == SR_OK) code = SR_UNKNOWN;  // a non-NULL status is always an error
  return Status(code, what + ": " + (text.empty() ? "(no message)" : text));
}

namespace {
std::mutex g_loading_mu;
std::filesystem::path g_loading;  // the library Load is in, or empty

struct LoadingMark {
  explicit LoadingMark(const std::filesystem::path& path) {
    std::lock_guard<std::mutex> lock(g_loading_mu);
    g_loading = path;
  }
  ~LoadingMark() {
    std::lock_guard<std::mutex> lock(g_loading_mu);
    g_loading.clear();
  }
};
}  // namespace

std::filesystem::path LibraryBeingLoaded() {
  std::lock_guard<std::mutex> lock(g_loading_mu);
  return g_loading;
}

StatusOr<std::shared_ptr<PluginLibrary>> PluginLibrary::Load(const std::filesystem::path& path_in,
                                                             const sr_host_api* host) {
  std::error_code ec;
  const std::filesystem::path path = std::filesystem::absolute(path_in, ec);
  if (ec) return InvalidArgumentError("cannot resolve path: " + ec.message());
  if (!std::filesystem::exists(path, ec)) return NotFoundError("no such file");
  if (!std::filesystem::is_regular_file(path, ec)) return InvalidArgumentError("not a regular file");
  if (std::filesystem::file_size(path, ec) == 0) return InvalidArgumentError("empty file");

  SR_ASSIGN_OR_RETURN(PluginFileName file, ParsePluginFileName(path.filename().string()));

  // From here to the end of initialize() the library's own code runs: a
  // crash names it, and an exit() guard can ask which library it was.
  const CrashNote note("while loading plugin library " + path.string());
  const LoadingMark mark(path);
  auto impl = std::make_unique<Impl>();
  try {
    impl->library.load(boost::dll::fs::path(path.string()),
                       boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    // The throwing overload keeps dlerror()'s text, which says why.
    std::string why = e.what();
    if (why.find("file too short") != std::string::npos ||
        why.find("invalid ELF header") != std::string::npos) {
      why = "not a shared library (" + why + ")";
    }
    return InvalidArgumentError("cannot load: " + why);
  }
  if (!impl->library.has(SR_PLUGIN_ENTRY_SYMBOL)) {
    return NotFoundError(std::string("missing entry symbol ") + SR_PLUGIN_ENTRY_SYMBOL +
                         " (built for another ABI major, or not a shardrec plugin)");
  }
  auto entry = impl->library.get<const sr_plugin_api*(uint32_t, uint32_t)>(SR_PLUGIN_ENTRY_SYMBOL);

  const sr_plugin_api* api = nullptr;
  try {
    api = entry(SR_ABI_MAJOR, SR_ABI_MINOR);
  } catch (const std::exception& e) {
    return InternalError(std::string(SR_PLUGIN_ENTRY_SYMBOL) +
                         " threw an exception across the C boundary: " + e.what());
  } catch (...) {
    return InternalError(std::string(SR_PLUGIN_ENTRY_SYMBOL) +
                         " threw an exception across the C boundary");
  }
  if (api == nullptr) {
    return FailedPreconditionError(std::string(SR_PLUGIN_ENTRY_SYMBOL) +
                                   " returned NULL: the plugin cannot serve a host of ABI " +
                                   std::to_string(SR_ABI_MAJOR) + "." +
                                   std::to_string(SR_ABI_MINOR));
  }
  if (api->struct_size < kPluginApiV10) {
    return InvalidArgumentError("plugin table struct_size " + std::to_string(api->struct_size) +
                                " is smaller than the " + std::to_string(kPluginApiV10) +
                                " bytes ABI 1.0 requires");
  }
  if (api->abi_major != SR_ABI_MAJOR) {
    return FailedPreconditionError("plugin ABI major " + std::to_string(api->abi_major) +
                                   " does not match host ABI major " +
                                   std::to_string(SR_ABI_MAJOR));
  }
  if (api->status_code == nullptr || api->status_message == nullptr ||
      api->status_destroy == nullptr) {
    return InvalidArgumentError("required entry status_code/status_message/status_destroy is NULL");
  }
  if (api->initialize == nullptr) return InvalidArgumentError("required entry 'initialize' is NULL");
  if (api->plugin_name == nullptr || file.name != api->plugin_name) {
    return InvalidArgumentError("plugin name '" +
                                std::string(api->plugin_name ? api->plugin_name : "(NULL)") +
                                "' does not match the file name's '" + file.name + "'");
  }
  if (api->num_components > 0 && api->components == nullptr) {
    return InvalidArgumentError("num_components is " + std::to_string(api->num_components) +
                                " but components is NULL");
  }
  for (size_t i = 0; i < api->num_components; ++i) {
    const sr_component& c = api->components[i];
    if (c.struct_size < kComponentV10) {
      return InvalidArgumentError("component " + std::to_string(i) + ": struct_size " +
                                  std::to_string(c.struct_size) + " is smaller than the " +
                                  std::to_string(kComponentV10) + " bytes ABI 1.0 requires");
    }
    static const std::regex kComponentName("[a-z0-9_]+");
    if (c.name == nullptr || !std::regex_match(c.name, kComponentName)) {
      return InvalidArgumentError("component " + std::to_string(i) +
                                  ": name must be [a-z0-9_]+, got '" +
                                  std::string(c.name ? c.name : "(NULL)") + "'");
    }
    if (std::string(KindName(c.kind)) == "unknown" && api->abi_minor > SR_ABI_MINOR) {
      // A kind a newer minor added: this host cannot use it, but the
      // library's other components still load (ABI rule 2).
      continue;
    }
    if (file.kind != "bundle" && KindFromName(file.kind) != c.kind) {
      return InvalidArgumentError(std::string("component '") + c.name + "' is of kind " +
                                  KindName(c.kind) + " but the file name says " + file.kind);
    }
    SR_RETURN_IF_ERROR(ValidateVtable(c));
    for (size_t j = 0; j < i; ++j) {
      const sr_component& earlier = api->components[j];
      if (earlier.kind == c.kind && std::string(earlier.name) == c.name) {
        return AlreadyExistsError(std::string("the library carries two ") + KindName(c.kind) +
                                  " components named '" + c.name + "'");
      }
    }
  }

  sr_status* init_status = nullptr;
  try {
    init_status = api->initialize(host);
  } catch (...) {
    return InternalError("initialize threw an exception across the C boundary");
  }
  std::shared_ptr<PluginLibrary> lib(new PluginLibrary(std::move(impl)));
  lib->path_ = path;
  lib->api_ = api;
  Status init = lib->TakeStatus(init_status, "initialize failed");
  if (!init.ok()) return init;  // destructor unloads; shutdown is not called
  lib->impl_->initialized = true;
  // Attributes may be filled in by initialize(), so they are read after it.
  for (size_t i = 0; i < api->num_components; ++i) {
    SR_RETURN_IF_ERROR(ValidateAttributes(api->components[i]));  // destructor shuts down
    lib->impl_->keep_loaded = lib->impl_->keep_loaded || WantsProcessLifetime(api->components[i]);
  }
  return lib;
}

namespace {
const sr_named_value* FindAttribute(const sr_component* component, std::string_view name, int32_t type) {
  const sr_named_value_list& attrs = component->attributes;
  for (size_t i = 0; i < attrs.count; ++i) {
    const sr_named_value& v = attrs.values[i];
    if (v.name != nullptr && name == v.name && v.type == type) return &v;
  }
  return nullptr;
}
}  // namespace

std::optional<int64_t> ComponentRef::Int64Attribute(std::string_view name) const {
  const sr_named_value* v = FindAttribute(component, name, SR_VALUE_INT64);
  return v ? std::optional<int64_t>(v->value.int64_value) : std::nullopt;
}

std::optional<bool> ComponentRef::BoolAttribute(std::string_view name) const {
  const sr_named_value* v = FindAttribute(component, name, SR_VALUE_BOOL);
  return v ? std::optional<bool>(v->value.int64_value != 0) : std::nullopt;
}

std::optional<std::vector<std::string>> ComponentRef::StringListAttribute(std::string_view name) const {
  const sr_named_value_list& attrs = component->attributes;
  for (size_t i = 0; i < attrs.count; ++i) {
    const sr_named_value& v = attrs.values[i];
    if (v.name == nullptr || name != v.name || v.type != SR_VALUE_STRING_LIST || v.value.string_list == nullptr) continue;
    std::vector<std::string> items;
    for (size_t k = 0; k < v.value_size; ++k) {
      if (v.value.string_list[k] != nullptr) items.emplace_back(v.value.string_list[k]);
    }
    return items;
  }
  return std::nullopt;
}

}  // namespace shardrec
