// shardrec plugin SDK — the short way to write a plugin library.
//
//   class MyPolicy { public: explicit MyPolicy(sdk::Options& o);
//                    void Score(const sr_eviction_score_args& a); };
//   static const sr_component kComponents[] = {
//       sdk::Component(SR_KIND_EVICTION, "mine", "1.0", "my policy",
//                      &sdk::EvictionVtable<MyPolicy>())};
//   SHARDREC_DEFINE_PLUGIN("mine", "1.0", kComponents)
//
// The adapters below turn a C++ class into a kind's vtable: each entry casts
// the opaque handle back to the class, runs the method under Guard() (so
// exceptions become statuses) and leaves optional entries NULL when the class
// lacks the method. Requires C++20.
#ifndef SHARDREC_SDK_PLUGIN_HPP_
#define SHARDREC_SDK_PLUGIN_HPP_

#include <cstdarg>
#include <cstdio>
#include <string>

#include "shardrec/plugin_api.h"
#include "shardrec/sdk/options.hpp"
#include "shardrec/sdk/status.hpp"
#include "shardrec/sdk/tensor.hpp"

namespace shardrec::sdk {

// ---------------------------------------------------------------------------
// Host services, stored at initialize() for the life of the library.
// ---------------------------------------------------------------------------
inline const sr_host_api*& HostApi() {
  static const sr_host_api* host = nullptr;
  return host;
}

// Logs through the host when it has a logger and wants this level.
inline void Log(int32_t level, const char* source, const std::string& message) {
  const sr_host_api* h = HostApi();
  if (h == nullptr || !SR_HAS_FIELD(h, sr_host_api, min_log_level) || h->log == nullptr) return;
  if (level < h->min_log_level) return;
  h->log(h->ctx, level, source, message.c_str());
}

// ---------------------------------------------------------------------------
// Attribute (capability) builders for static tables.
// ---------------------------------------------------------------------------
inline sr_named_value StringAttr(const char* name, const char* value) {
  sr_named_value v{};
  v.struct_size = SR_STRUCT_SIZE(sr_named_value, value_size);
  v.name = name;
  v.type = SR_VALUE_STRING;
  v.value.string_value = value;
  v.value_size = std::char_traits<char>::length(value);
  return v;
}
inline sr_named_value IntAttr(const char* name, int64_t value) {
  sr_named_value v{};
  v.struct_size = SR_STRUCT_SIZE(sr_named_value, value_size);
  v.name = name;
  v.type = SR_VALUE_INT64;
  v.value.int64_value = value;
  v.value_size = 1;
  return v;
}
inline sr_named_value BoolAttr(const char* name, bool value) {
  sr_named_value v = IntAttr(name, value ? 1 : 0);
  v.type = SR_VALUE_BOOL;
  return v;
}
inline sr_named_value StringListAttr(const char* name, const char* const* items, size_t count) {
  sr_named_value v{};
  v.struct_size = SR_STRUCT_SIZE(sr_named_value, value_size);
  v.name = name;
  v.type = SR_VALUE_STRING_LIST;
  v.value.string_list = items;
  v.value_size = count;
  return v;
}
template <size_t N>
sr_named_value_list List(const sr_named_value (&values)[N]) {
  return sr_named_value_list{values, N};
}

inline sr_component Component(int32_t kind, const char* name, const char* version,
                              const char* description, const void* vtable,
                              sr_named_value_list attributes = {nullptr, 0},
                              int32_t priority = 0) {
  sr_component c{};
  c.struct_size = SR_STRUCT_SIZE(sr_component, attributes);
  c.kind = kind;
  c.name = name;
  c.version = version;
  c.description = description;
  c.priority = priority;
  c.vtable = vtable;
  c.attributes = attributes;
  return c;
}

// ---------------------------------------------------------------------------
// Kind adapters.
// ---------------------------------------------------------------------------

// T(Options&); void Score(const sr_eviction_score_args&);
// optional: void Select(const sr_eviction_select_args&).
template <class T>
const sr_eviction_vtable& EvictionVtable() {
  static const sr_eviction_vtable vt = [] {
    sr_eviction_vtable v{};
    v.struct_size = SR_STRUCT_SIZE(sr_eviction_vtable, select);
    v.create = [](sr_named_value_list options, sr_eviction_policy** out) {
      return Guard([&] {
        if (out == nullptr) throw InvalidArgument("create: out is NULL");
        Options opts(options, "eviction policy");
        T* p = new T(opts);
        try {
          opts.Finish();
        } catch (...) {
          delete p;
          throw;
        }
        *out = reinterpret_cast<sr_eviction_policy*>(p);
      });
    };
    v.destroy = [](sr_eviction_policy* p) { delete reinterpret_cast<T*>(p); };
    v.score = [](sr_eviction_policy* p, const sr_eviction_score_args* a) {
      return Guard([&] {
        if (p == nullptr || a == nullptr) throw InvalidArgument("score: NULL policy or args");
        reinterpret_cast<T*>(p)->Score(*a);
      });
    };
    if constexpr (requires(T& t, const sr_eviction_select_args& a) { t.Select(a); }) {
      v.select = [](sr_eviction_policy* p, const sr_eviction_select_args* a) {
        return Guard([&] {
          if (p == nullptr || a == nullptr) throw InvalidArgument("select: NULL policy or args");
          reinterpret_cast<T*>(p)->Select(*a);
        });
      };
    }
    return v;
  }();
  return vt;
}

// T(Options&); void ShardTable(const sr_shard_table_args&);
// optional: RouteIds(const sr_route_ids_args&),
//           EstimateStorage(const sr_estimate_storage_args&),
//           EstimateCost(const sr_estimate_cost_args&) (ABI 1.3 headers).
template <class T>
const sr_sharder_vtable& SharderVtable() {
  static const sr_sharder_vtable vt = [] {
    sr_sharder_vtable v{};
    // A plugin built against pre-1.3 headers (tests/abi/frozen_v1_0) has no
    // estimate_cost slot; its struct_size ends where its headers end.
#if SR_ABI_MINOR >= 3
    v.struct_size = SR_STRUCT_SIZE(sr_sharder_vtable, estimate_cost);
#else
    v.struct_size = SR_STRUCT_SIZE(sr_sharder_vtable, estimate_storage);
#endif
    v.create = [](sr_named_value_list options, sr_sharder** out) {
      return Guard([&] {
        if (out == nullptr) throw InvalidArgument("create: out is NULL");
        Options opts(options, "sharder");
        T* s = new T(opts);
        try {
          opts.Finish();
        } catch (...) {
          delete s;
          throw;
        }
        *out = reinterpret_cast<sr_sharder*>(s);
      });
    };
    v.destroy = [](sr_sharder* s) { delete reinterpret_cast<T*>(s); };
    v.shard_table = [](sr_sharder* s, const sr_shard_table_args* a) {
      return Guard([&] {
        if (s == nullptr || a == nullptr) throw InvalidArgument("shard_table: NULL args");
        reinterpret_cast<T*>(s)->ShardTable(*a);
      });
    };
    if constexpr (requires(T& t, const sr_route_ids_args& a) { t.RouteIds(a); }) {
      v.route_ids = [](sr_sharder* s, const sr_route_ids_args* a) {
        return Guard([&] {
          if (s == nullptr || a == nullptr) throw InvalidArgument("route_ids: NULL sharder or args");
          reinterpret_cast<T*>(s)->RouteIds(*a);
        });
      };
    }
    if constexpr (requires(T& t, const sr_estimate_storage_args& a) { t.EstimateStorage(a); }) {
      v.estimate_storage = [](sr_sharder* s, const sr_estimate_storage_args* a) {
        return Guard([&] {
          if (s == nullptr || a == nullptr) throw InvalidArgument("estimate_storage: NULL sharder or args");
          reinterpret_cast<T*>(s)->EstimateStorage(*a);
        });
      };
    }
#if SR_ABI_MINOR >= 3
    if constexpr (requires(T& t, const sr_estimate_cost_args& a) { t.EstimateCost(a); }) {
      v.estimate_cost = [](sr_sharder* s, const sr_estimate_cost_args* a) {
        return Guard([&] {
          if (s == nullptr || a == nullptr) throw InvalidArgument("estimate_cost: NULL sharder or args");
          reinterpret_cast<T*>(s)->EstimateCost(*a);
        });
      };
    }
#endif
    return v;
  }();
  return vt;
}

// T(const sr_kernel_create_args&); TableInfo(int32_t, sr_kernel_table_info*);
// Forward(const sr_kernel_forward_args&); ReadRows/WriteRows/ResetRows(const
// sr_kernel_rows_args&); optional Backward(const sr_kernel_backward_args&).
template <class T>
const sr_kernel_vtable& KernelVtable() {
  static const sr_kernel_vtable vt = [] {
    sr_kernel_vtable v{};
    v.struct_size = SR_STRUCT_SIZE(sr_kernel_vtable, reset_rows);
    v.create = [](const sr_kernel_create_args* a, sr_kernel** out) {
      return Guard([&] {
        if (a == nullptr || out == nullptr) throw InvalidArgument("create: NULL args");
        *out = reinterpret_cast<sr_kernel*>(new T(*a));
      });
    };
    v.destroy = [](sr_kernel* k) { delete reinterpret_cast<T*>(k); };
    v.get_table_info = [](sr_kernel* k, int32_t table, sr_kernel_table_info* out) {
      return Guard([&] {
        if (k == nullptr || out == nullptr) throw InvalidArgument("get_table_info: NULL args");
        reinterpret_cast<T*>(k)->TableInfo(table, out);
      });
    };
    v.forward = [](sr_kernel* k, const sr_kernel_forward_args* a) {
      return Guard([&] {
        if (k == nullptr || a == nullptr) throw InvalidArgument("forward: NULL args");
        reinterpret_cast<T*>(k)->Forward(*a);
      });
    };
    if constexpr (requires(T& t, const sr_kernel_backward_args& a) { t.Backward(a); }) {
      v.backward = [](sr_kernel* k, const sr_kernel_backward_args* a) {
        return Guard([&] {
          if (k == nullptr || a == nullptr) throw InvalidArgument("backward: NULL args");
          reinterpret_cast<T*>(k)->Backward(*a);
        });
      };
    }
    v.read_rows = [](sr_kernel* k, const sr_kernel_rows_args* a) {
      return Guard([&] {
        if (k == nullptr || a == nullptr) throw InvalidArgument("read_rows: NULL args");
        reinterpret_cast<T*>(k)->ReadRows(*a);
      });
    };
    v.write_rows = [](sr_kernel* k, const sr_kernel_rows_args* a) {
      return Guard([&] {
        if (k == nullptr || a == nullptr) throw InvalidArgument("write_rows: NULL args");
        reinterpret_cast<T*>(k)->WriteRows(*a);
      });
    };
    v.reset_rows = [](sr_kernel* k, const sr_kernel_rows_args* a) {
      return Guard([&] {
        if (k == nullptr || a == nullptr) throw InvalidArgument("reset_rows: NULL args");
        reinterpret_cast<T*>(k)->ResetRows(*a);
      });
    };
    return v;
  }();
  return vt;
}

// ---------------------------------------------------------------------------
// The plugin table and the entry symbol.
// ---------------------------------------------------------------------------
namespace detail {
struct PluginHooks {
  void (*initialize)(const sr_host_api*) = nullptr;  // may throw
  void (*shutdown)() = nullptr;
};
inline PluginHooks& Hooks() {
  static PluginHooks hooks;
  return hooks;
}

template <size_t N>
const sr_plugin_api* Table(const char* name, const char* version,
                           const sr_component (&components)[N], uint32_t host_major) {
  if (host_major != SR_ABI_MAJOR) return nullptr;
  static const sr_plugin_api api = [&] {
    sr_plugin_api a{};
    a.struct_size = SR_STRUCT_SIZE(sr_plugin_api, components);
    a.abi_major = SR_ABI_MAJOR;
    a.abi_minor = SR_ABI_MINOR;
    a.plugin_name = name;
    a.plugin_version = version;
    a.status_code = [](const sr_status* s) { return StatusCode(s); };
    a.status_message = [](const sr_status* s) { return StatusMessage(s); };
    a.status_destroy = [](sr_status* s) { StatusDestroy(s); };
    a.initialize = [](const sr_host_api* host) {
      return Guard([&] {
        if (host == nullptr) throw InvalidArgument("initialize: host services are NULL");
        HostApi() = host;
        if (Hooks().initialize) Hooks().initialize(host);
      });
    };
    a.shutdown = [] {
      try {
        if (Hooks().shutdown) Hooks().shutdown();
      } catch (...) {
      }
      HostApi() = nullptr;
    };
    a.num_components = N;
    a.components = components;
    return a;
  }();
  return &api;
}
}  // namespace detail

// Optional hooks run inside initialize()/shutdown(); call from a static
// initializer of the plugin, e.g.  static const bool k = sdk::OnInitialize(f);
inline bool OnInitialize(void (*fn)(const sr_host_api*)) {
  detail::Hooks().initialize = fn;
  return true;
}
inline bool OnShutdown(void (*fn)()) {
  detail::Hooks().shutdown = fn;
  return true;
}

}  // namespace shardrec::sdk

// Defines the library's one exported symbol. NAME must match the NAME in the
// file name libshardrec_KIND_NAME.so; COMPONENTS is a static sr_component[].
#define SHARDREC_DEFINE_PLUGIN(NAME, VERSION, COMPONENTS)                                 \
  extern "C" SR_PLUGIN_EXPORT const sr_plugin_api* shardrec_plugin_get_api_v1(           \
      uint32_t host_major, uint32_t host_minor) {                                         \
    (void)host_minor;                                                                     \
    try {                                                                                 \
      return ::shardrec::sdk::detail::Table((NAME), (VERSION), (COMPONENTS), host_major); \
    } catch (...) {                                                                       \
      return nullptr;                                                                     \
    }                                                                                     \
  }

#endif  // SHARDREC_SDK_PLUGIN_HPP_
