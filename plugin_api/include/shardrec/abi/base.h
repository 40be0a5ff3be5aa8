/*
 * shardrec plugin ABI v1 — the shared base: versions, status objects, the
 * extension chain, key/value lists, host services, the component list and the
 * single entry symbol every plugin library exports.
 *
 * Plain C11. Fixed-width integers, opaque handles, enums stored in int32_t,
 * no bool, no bitfields. Every struct that crosses the boundary begins with
 * `size_t struct_size` and only ever grows at its end (docs/abi.md).
 */
#ifndef SHARDREC_ABI_BASE_H_
#define SHARDREC_ABI_BASE_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Versions                                                                  */
/* ------------------------------------------------------------------------ */

/* A host and a plugin interoperate when their majors are equal; minors may
 * differ in either direction (rule 2). The major is also part of the entry
 * symbol's name, so a v2 plugin is simply not found by a v1 host. */
#define SR_ABI_MAJOR 1
#define SR_ABI_MINOR 4

/* Size of a struct up to and including `last`, without trailing padding.
 * Writers set struct_size to SR_STRUCT_SIZE(T, newest_field); readers touch a
 * field only when SR_HAS_FIELD says it lies inside the writer's struct_size. */
#define SR_STRUCT_SIZE(T, last) \
  (offsetof(T, last) + sizeof(((const T*)0)->last))
#define SR_HAS_FIELD(ptr, T, field) \
  ((ptr) != NULL && (ptr)->struct_size >= SR_STRUCT_SIZE(T, field))

/* Symbol visibility for the one exported entry point. */
#if defined(_WIN32)
#define SR_PLUGIN_EXPORT __declspec(dllexport)
#else
#define SR_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* ------------------------------------------------------------------------ */
/* Status                                                                    */
/* ------------------------------------------------------------------------ */

/* Canonical codes, numerically equal to absl::StatusCode / PJRT_Error_Code. */
#define SR_OK 0
#define SR_CANCELLED 1
#define SR_UNKNOWN 2
#define SR_INVALID_ARGUMENT 3
#define SR_DEADLINE_EXCEEDED 4
#define SR_NOT_FOUND 5
#define SR_ALREADY_EXISTS 6
#define SR_PERMISSION_DENIED 7
#define SR_RESOURCE_EXHAUSTED 8
#define SR_FAILED_PRECONDITION 9
#define SR_ABORTED 10
#define SR_OUT_OF_RANGE 11
#define SR_UNIMPLEMENTED 12
#define SR_INTERNAL 13
#define SR_UNAVAILABLE 14
#define SR_DATA_LOSS 15
#define SR_UNAUTHENTICATED 16

/* An error. Opaque; created by the plugin that returns it and destroyed by
 * the caller with that plugin's sr_plugin_api.status_destroy. Every fallible
 * entry returns `sr_status*`; NULL means success. */
typedef struct sr_status sr_status;

/* ------------------------------------------------------------------------ */
/* Extension chain (rule 3)                                                  */
/* ------------------------------------------------------------------------ */

/* Optional features hang off `ext` of any table or argument struct as a
 * singly linked chain of typed nodes. A reader ignores types it does not know.
 * Types below 0x10000 are reserved for shardrec; third parties use
 * SR_EXTENSION_TYPE_THIRD_PARTY_BASE + their own number. */
#define SR_EXTENSION_TYPE_THIRD_PARTY_BASE 0x10000

typedef struct sr_extension {
  size_t struct_size;
  int32_t type;
  struct sr_extension* next;
} sr_extension;

/* ------------------------------------------------------------------------ */
/* Key/value lists: capabilities (plugin → host) and options (host → plugin) */
/* ------------------------------------------------------------------------ */

#define SR_VALUE_STRING 0      /* string_value, value_size = bytes (no NUL needed) */
#define SR_VALUE_INT64 1       /* int64_value, value_size = 1 */
#define SR_VALUE_FLOAT64 2     /* float64_value, value_size = 1 */
#define SR_VALUE_BOOL 3        /* int64_value 0 or 1, value_size = 1 */
#define SR_VALUE_INT64_LIST 4  /* int64_list, value_size = count */
#define SR_VALUE_STRING_LIST 5 /* string_list (NUL-terminated each), value_size = count */

typedef struct sr_named_value {
  size_t struct_size;
  const char* name; /* NUL-terminated */
  int32_t type;     /* SR_VALUE_* */
  union {
    const char* string_value;
    int64_t int64_value;
    double float64_value;
    const int64_t* int64_list;
    const char* const* string_list;
  } value;
  size_t value_size;
} sr_named_value;

/* A borrowed list of named values. Options given by the host are strings as
 * the user typed them (`--plugin-opt kind.name.key=value` reaches component
 * `name` as key/value); the SDK parses and validates them. */
typedef struct sr_named_value_list {
  const sr_named_value* values;
  size_t count;
} sr_named_value_list;

/* ------------------------------------------------------------------------ */
/* Host services                                                             */
/* ------------------------------------------------------------------------ */

#define SR_LOG_TRACE 0
#define SR_LOG_DEBUG 1
#define SR_LOG_INFO 2
#define SR_LOG_WARN 3
#define SR_LOG_ERROR 4

/* Given to every plugin at initialize(); valid until the plugin's shutdown()
 * returns. All callbacks are thread-safe and never throw or unwind. */
typedef struct sr_host_api {
  size_t struct_size;
  sr_extension* ext;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* host_version; /* e.g. "0.1.0" */
  void* ctx;                /* passed back to every callback */
  /* Large or device memory. Returns NULL when it cannot allocate (the plugin
   * then reports SR_RESOURCE_EXHAUSTED). `alignment` is a power of two;
   * `stream` orders device allocations (NULL on CPU). */
  void* (*alloc)(void* ctx, DLDevice device, size_t bytes, size_t alignment,
                 void* stream);
  /* Frees memory from alloc; `bytes` and `device` are the values given then. */
  void (*free)(void* ctx, DLDevice device, void* ptr, size_t bytes,
               void* stream);
  /* One log line. `source` names the plugin or component; `message` is UTF-8,
   * NUL-terminated, no trailing newline. Lines below min_log_level are
   * dropped by the host, so plugins may skip formatting them. */
  void (*log)(void* ctx, int32_t level, const char* source,
              const char* message);
  int32_t min_log_level;
} sr_host_api;

/* ------------------------------------------------------------------------ */
/* Components and the plugin table                                           */
/* ------------------------------------------------------------------------ */

#define SR_KIND_SHARDER 1
#define SR_KIND_KERNEL 2
#define SR_KIND_COMM 3
#define SR_KIND_EVICTION 4
#define SR_KIND_CODEC 5 /* ABI 1.2: quantized comm codecs (abi/codec.h) */

/* One component: a sharder, a compute kernel, a comm backend, an eviction
 * policy or (ABI 1.2) a comm codec. A host skips a component of a kind it
 * does not know when the plugin's ABI minor is newer than its own (1.2 and
 * later hosts; a 1.0 or 1.1 host refuses the library). `vtable` points to the kind's vtable (sr_sharder_vtable, ...), whose
 * first field is its own struct_size. Everything here is valid from the
 * moment the plugin table is returned until shutdown() returns; `attributes`
 * may be filled in by initialize() and is read only after it succeeded. */
typedef struct sr_component {
  size_t struct_size;
  sr_extension* ext;
  int32_t kind;        /* SR_KIND_* */
  const char* name;    /* [a-z0-9_]+, unique per kind in a process */
  const char* version; /* the component's own version, free text */
  const char* description;
  int32_t priority;  /* higher wins when the user names no component */
  const void* vtable;
  sr_named_value_list attributes; /* capabilities, see docs/abi.md */
} sr_component;

/* The table a plugin library returns from its entry symbol. */
typedef struct sr_plugin_api {
  size_t struct_size;
  sr_extension* ext;
  uint32_t abi_major; /* the plugin's SR_ABI_MAJOR */
  uint32_t abi_minor; /* the plugin's SR_ABI_MINOR */
  const char* plugin_name;    /* must equal NAME in libshardrec_KIND_NAME.so */
  const char* plugin_version; /* free text */

  /* Status accessors for every sr_status this library returns. Required.
   * status_message's result is valid until status_destroy. */
  int32_t (*status_code)(const sr_status* status);
  const char* (*status_message)(const sr_status* status);
  void (*status_destroy)(sr_status* status);

  /* Called once before any component is used; `host` stays valid until
   * shutdown() returns. Required. */
  sr_status* (*initialize)(const sr_host_api* host);
  /* Called once after every object created from this library is destroyed.
   * Optional (NULL: nothing to do). */
  void (*shutdown)(void);

  size_t num_components;
  const sr_component* components;
} sr_plugin_api;

/* The one exported symbol of a plugin library (rule 1). Given the host's
 * ABI version, returns the plugin's table, valid until the library is
 * unloaded, or NULL when it cannot serve this host. Must not throw. */
#define SR_PLUGIN_ENTRY_SYMBOL "shardrec_plugin_get_api_v1"
typedef const sr_plugin_api* (*sr_plugin_get_api_fn)(uint32_t host_major,
                                                     uint32_t host_minor);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDREC_ABI_BASE_H_ */
