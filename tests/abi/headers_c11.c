/* Compiled as strict C11 (-std=c11 -pedantic -Werror): proves the ABI headers
 * are plain C, and reports each struct's size and the offset of its last
 * field as the C compiler lays them out, for abi_layout_test.cc to compare
 * with the C++ compiler and with the pinned values. */
#include <stddef.h>

#include "shardrec/plugin_api.h"

#define SR_C_LAYOUT(T, last) {#T, sizeof(T), offsetof(T, last)}

typedef struct sr_c_layout {
  const char* name;
  size_t size;
  size_t last_offset;
} sr_c_layout;

static const sr_c_layout kLayouts[] = {
    SR_C_LAYOUT(sr_extension, next),
    SR_C_LAYOUT(sr_named_value, value_size),
    SR_C_LAYOUT(sr_named_value_list, count),
    SR_C_LAYOUT(sr_host_api, min_log_level),
    SR_C_LAYOUT(sr_component, attributes),
    SR_C_LAYOUT(sr_plugin_api, components),
    SR_C_LAYOUT(sr_table_desc, state_bytes_per_row),
    SR_C_LAYOUT(sr_topology, memory_bytes_per_rank),
    SR_C_LAYOUT(sr_shard, rank),
    SR_C_LAYOUT(sr_shard_table_args, placement),
    SR_C_LAYOUT(sr_route_ids_args, local_row),
    SR_C_LAYOUT(sr_estimate_storage_args, bytes_per_rank),
    SR_C_LAYOUT(sr_sharder_vtable, estimate_cost),
    SR_C_LAYOUT(sr_kernel_table, global_col_offset),
    SR_C_LAYOUT(sr_kernel_create_args, options),
    SR_C_LAYOUT(sr_kernel_table_info, bytes),
    SR_C_LAYOUT(sr_kernel_lookup_args, stream),
    SR_C_LAYOUT(sr_kernel_forward_args, output),
    SR_C_LAYOUT(sr_kernel_backward_args, learning_rate),
    SR_C_LAYOUT(sr_kernel_rows_args, stream),
    SR_C_LAYOUT(sr_kernel_vtable, reset_rows),
    SR_C_LAYOUT(sr_comm_create_args, store),
    SR_C_LAYOUT(sr_kv_store, get),
    SR_C_LAYOUT(sr_collective_args, stream),
    SR_C_LAYOUT(sr_comm_vtable, request_destroy),
    SR_C_LAYOUT(sr_eviction_score_args, scores),
    SR_C_LAYOUT(sr_eviction_select_args, keep),
    SR_C_LAYOUT(sr_eviction_vtable, select),
    SR_C_LAYOUT(sr_codec_create_args, options),
    SR_C_LAYOUT(sr_codec_block_args, output),
    SR_C_LAYOUT(sr_codec_vtable, decode),
    SR_C_LAYOUT(sr_estimate_cost_args, lookup_share),
};

size_t sr_c_layout_count(void) { return sizeof(kLayouts) / sizeof(kLayouts[0]); }
const char* sr_c_layout_name(size_t i) { return kLayouts[i].name; }
size_t sr_c_layout_size(size_t i) { return kLayouts[i].size; }
size_t sr_c_layout_last_offset(size_t i) { return kLayouts[i].last_offset; }
