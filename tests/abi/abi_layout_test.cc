// ABI layout pins (ABI rule 12): the size of every public struct and the
// offset of its last field on x86-64 Linux (LP64), plus the offsets of the
// fields a host reads before anything else. A change here is an ABI break
// unless it only appends fields (then the pins of that struct grow and the
// frozen v1.0 minimums in core/src/plugin_library.cc stay). The C11 object
// (headers_c11.c) reports the C compiler's layout, compared at run time.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>

#include "shardrec/plugin_api.h"

extern "C" {
size_t sr_c_layout_count(void);
const char* sr_c_layout_name(size_t i);
size_t sr_c_layout_size(size_t i);
size_t sr_c_layout_last_offset(size_t i);
}

#define PIN(T, last, size, offset)                                    \
  static_assert(sizeof(T) == (size), #T ": size changed");            \
  static_assert(offsetof(T, last) == (offset), #T ": layout changed")

static_assert(sizeof(void*) == 8 && sizeof(size_t) == 8, "pins are for LP64");
PIN(sr_extension, next, 24, 16);
PIN(sr_named_value, value_size, 40, 32);
PIN(sr_named_value_list, count, 16, 8);
PIN(sr_host_api, min_log_level, 72, 64);
PIN(sr_component, attributes, 80, 64);
PIN(sr_plugin_api, components, 96, 88);
PIN(sr_table_desc, state_bytes_per_row, 56, 48);
PIN(sr_topology, memory_bytes_per_rank, 40, 32);
PIN(sr_shard, rank, 48, 40);
PIN(sr_shard_table_args, placement, 80, 72);
PIN(sr_route_ids_args, local_row, 64, 56);
PIN(sr_estimate_storage_args, bytes_per_rank, 56, 48);
PIN(sr_sharder_vtable, estimate_cost, 64, 56);  // 1.3 appended estimate_cost after estimate_storage (48)
static_assert(offsetof(sr_sharder_vtable, estimate_storage) == 48);
PIN(sr_kernel_table, row_quantization, 96, 88);  // 1.4 appended row_quantization after global_col_offset (80)
static_assert(offsetof(sr_kernel_table, global_col_offset) == 80);
PIN(sr_kernel_create_args, options, 80, 64);
PIN(sr_kernel_table_info, row_quantization, 72, 64);  // 1.4 appended row_bytes (56), row_quantization
static_assert(offsetof(sr_kernel_table_info, bytes) == 48);
PIN(sr_kernel_lookup_args, stream, 112, 104);
PIN(sr_kernel_forward_args, output, 32, 24);
PIN(sr_kernel_backward_args, learning_rate, 48, 40);
PIN(sr_kernel_rows_args, stream, 56, 48);
PIN(sr_kernel_vtable, reset_rows, 80, 72);
PIN(sr_comm_create_args, store, 88, 80);
PIN(sr_kv_store, get, 32, 24);
PIN(sr_collective_args, stream, 64, 56);
PIN(sr_comm_vtable, request_destroy, 112, 104);
PIN(sr_eviction_score_args, scores, 80, 72);
PIN(sr_eviction_select_args, keep, 40, 32);
PIN(sr_eviction_vtable, select, 48, 40);
// ABI 1.2: comm codecs.
PIN(sr_codec_create_args, options, 32, 16);
PIN(sr_codec_block_args, output, 48, 40);
PIN(sr_codec_vtable, decode, 64, 56);
// ABI 1.3: the planner's cost entry of sharders.
PIN(sr_estimate_cost_args, lookup_share, 88, 80);

// The fields every reader relies on before it checks sizes.
static_assert(offsetof(sr_plugin_api, struct_size) == 0);
static_assert(offsetof(sr_plugin_api, abi_major) == 16);
static_assert(offsetof(sr_plugin_api, abi_minor) == 20);
static_assert(offsetof(sr_plugin_api, plugin_name) == 24);
static_assert(offsetof(sr_plugin_api, status_code) == 40);
static_assert(offsetof(sr_plugin_api, initialize) == 64);
static_assert(offsetof(sr_plugin_api, num_components) == 80);
static_assert(offsetof(sr_component, kind) == 16);
static_assert(offsetof(sr_component, name) == 24);
static_assert(offsetof(sr_component, vtable) == 56);
static_assert(offsetof(sr_named_value, value) == 24);
static_assert(offsetof(sr_host_api, alloc) == 40);
static_assert(offsetof(sr_kernel_vtable, forward) == 40);
static_assert(offsetof(sr_comm_vtable, all_to_all_v) == 40);
static_assert(offsetof(sr_eviction_vtable, score) == 32);
// DLPack's DLTensor, which the ABI borrows, is the 0.6 / 1.x layout.
static_assert(sizeof(DLTensor) == 48 && offsetof(DLTensor, byte_offset) == 40);
static_assert(sizeof(DLDataType) == 4 && sizeof(DLDevice) == 8);

namespace {

size_t CxxSize(const std::string& name) {
#define SR_CXX(T) \
  if (name == #T) return sizeof(T);
  SR_CXX(sr_extension) SR_CXX(sr_named_value) SR_CXX(sr_named_value_list) SR_CXX(sr_host_api)
  SR_CXX(sr_component) SR_CXX(sr_plugin_api) SR_CXX(sr_table_desc) SR_CXX(sr_topology)
  SR_CXX(sr_shard) SR_CXX(sr_shard_table_args) SR_CXX(sr_route_ids_args)
  SR_CXX(sr_estimate_storage_args) SR_CXX(sr_sharder_vtable) SR_CXX(sr_kernel_table)
  SR_CXX(sr_kernel_create_args) SR_CXX(sr_kernel_table_info) SR_CXX(sr_kernel_lookup_args)
  SR_CXX(sr_kernel_forward_args) SR_CXX(sr_kernel_backward_args) SR_CXX(sr_kernel_rows_args)
  SR_CXX(sr_kernel_vtable) SR_CXX(sr_comm_create_args) SR_CXX(sr_kv_store) SR_CXX(sr_collective_args)
  SR_CXX(sr_comm_vtable) SR_CXX(sr_eviction_score_args) SR_CXX(sr_eviction_select_args)
  SR_CXX(sr_eviction_vtable) SR_CXX(sr_codec_create_args) SR_CXX(sr_codec_block_args) SR_CXX(sr_codec_vtable)
  SR_CXX(sr_estimate_cost_args)
#undef SR_CXX
  return 0;
}

TEST(AbiLayout, CAndCxxAgreeOnEveryStruct) {
  ASSERT_EQ(sr_c_layout_count(), 32u);
  for (size_t i = 0; i < sr_c_layout_count(); ++i) {
    EXPECT_EQ(sr_c_layout_size(i), CxxSize(sr_c_layout_name(i))) << sr_c_layout_name(i);
  }
}

TEST(AbiLayout, StructSizeMacroExcludesTrailingPadding) {
  // sr_shard ends with an int32_t after int64_t fields: 4 bytes of padding
  // that a writer must not claim.
  EXPECT_EQ(SR_STRUCT_SIZE(sr_shard, rank), 44u);
  EXPECT_EQ(sizeof(sr_shard), 48u);
  sr_shard s{};
  s.struct_size = SR_STRUCT_SIZE(sr_shard, col_offset);
  EXPECT_TRUE(SR_HAS_FIELD(&s, sr_shard, col_offset));
  EXPECT_FALSE(SR_HAS_FIELD(&s, sr_shard, rank));
  const sr_shard* none = nullptr;
  EXPECT_FALSE(SR_HAS_FIELD(none, sr_shard, rank));
}

TEST(AbiLayout, VersionAndCodes) {
  EXPECT_EQ(SR_ABI_MAJOR, 1);
  EXPECT_EQ(SR_ABI_MINOR, 4);
  EXPECT_EQ(SR_KIND_CODEC, 5);
  EXPECT_EQ(std::string(SR_PLUGIN_ENTRY_SYMBOL), "shardrec_plugin_get_api_v1");
  // Codes equal absl::StatusCode, so statuses map one to one.
  EXPECT_EQ(SR_INVALID_ARGUMENT, 3);
  EXPECT_EQ(SR_DEADLINE_EXCEEDED, 4);
  EXPECT_EQ(SR_UNAVAILABLE, 14);
  EXPECT_EQ(SR_UNAUTHENTICATED, 16);
}

}  // namespace
