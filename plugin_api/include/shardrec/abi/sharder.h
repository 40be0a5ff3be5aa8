/*
 * shardrec plugin ABI v1 — sharder components (SR_KIND_SHARDER).
 *
 * A sharder decides where the rows and columns of one table live: it returns
 * a grid of shards (row range × column range, one rank each) or a replicated
 * placement (data-parallel), may route ids itself (cyclic or hashed row-wise)
 * and estimates the bytes each rank will hold.
 */
#ifndef SHARDREC_ABI_SHARDER_H_
#define SHARDREC_ABI_SHARDER_H_

#include "shardrec/abi/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sr_sharder sr_sharder; /* opaque, created by the plugin */

/* The table to place. */
typedef struct sr_table_desc {
  size_t struct_size;
  sr_extension* ext;
  const char* name;
  int64_t num_rows;
  int64_t num_cols;         /* embedding_dim */
  DLDataType weight_dtype;  /* fp32, fp16, bf16 */
  int64_t state_bytes_per_row; /* optimizer state per full row, 0 if none */
} sr_table_desc;

/* The machines. Ranks [h*ranks_per_host, (h+1)*ranks_per_host) form host h. */
typedef struct sr_topology {
  size_t struct_size;
  sr_extension* ext;
  int32_t world_size;
  int32_t ranks_per_host;
  int32_t device_type; /* DLDeviceType of the ranks */
  /* world_size entries, bytes each rank may hold; NULL = unlimited. */
  const int64_t* memory_bytes_per_rank;
} sr_topology;

/* One rectangle of a table on one rank. For sharders with their own routing
 * (route_ids != NULL) row_offset/num_rows describe a count of rows, not a
 * contiguous range: the shard holds num_rows rows at local rows
 * [0, num_rows), and route_ids says which global rows those are. */
typedef struct sr_shard {
  size_t struct_size;
  int64_t row_offset;
  int64_t num_rows;
  int64_t col_offset;
  int64_t num_cols;
  int32_t rank;
} sr_shard;

#define SR_PLACEMENT_GRID 0       /* shards tile the table exactly once */
#define SR_PLACEMENT_REPLICATED 1 /* every shard is the whole table */

typedef struct sr_shard_table_args {
  size_t struct_size;
  sr_extension* ext;
  const sr_table_desc* table;
  const sr_topology* topology;
  /* Per-call options (e.g. a column block size); borrowed. */
  sr_named_value_list options;
  /* Out: the plugin writes min(needed, shards_capacity) shards into `shards`
   * (each with struct_size set) and sets *num_shards = needed. When needed >
   * shards_capacity the host calls again with a larger buffer; shards may be
   * NULL when shards_capacity is 0 (a size query). */
  sr_shard* shards;
  size_t shards_capacity;
  size_t* num_shards;
  int32_t* placement; /* out: SR_PLACEMENT_* */
} sr_shard_table_args;

/* Routing of ids to row blocks. Row blocks are the distinct (row_offset,
 * num_rows) pairs of the grid in order of first appearance. */
typedef struct sr_route_ids_args {
  size_t struct_size;
  sr_extension* ext;
  const sr_table_desc* table;
  const sr_shard* shards;
  size_t num_shards;
  const DLTensor* ids;     /* int64 [n], global row ids, in range */
  DLTensor* row_block;     /* int32 [n] out: row-block index */
  DLTensor* local_row;     /* int64 [n] out: row inside that block */
} sr_route_ids_args;

typedef struct sr_estimate_storage_args {
  size_t struct_size;
  sr_extension* ext;
  const sr_table_desc* table;
  const sr_topology* topology;
  const sr_shard* shards;
  size_t num_shards;
  int64_t* bytes_per_rank; /* out: topology->world_size entries, added to */
} sr_estimate_storage_args;

/* ABI 1.3. How a placement spreads a table's lookups over its shards, for
 * the planner's cost model (docs/planner.md). The host fills lookup_share
 * with its own estimate: each shard's share of the lookups by row range,
 * from row_histogram (or uniform). A sharder that routes ids itself knows
 * better (a cyclic or hashed sharder spreads hot rows evenly) and rewrites
 * the shares: num_shards non-negative values summing to 1 (column blocks of
 * one row block each carry that block's share). The host derives lookup,
 * dist and backward time from the shares. */
typedef struct sr_estimate_cost_args {
  size_t struct_size;
  sr_extension* ext;
  const sr_table_desc* table;
  const sr_topology* topology;
  const sr_shard* shards;
  size_t num_shards;
  int64_t batch_per_rank;  /* samples per rank per step */
  double pooling_factor;   /* mean ids per sample, over the table's features */
  /* Share of lookups per equal-width row bucket, bucket i covering rows
   * [i*rows/n, (i+1)*rows/n); sums to 1. NULL (n = 0): uniform. Borrowed. */
  const double* row_histogram;
  size_t row_histogram_buckets;
  double* lookup_share; /* in: the host's estimate; out: the sharder's */
} sr_estimate_cost_args;

typedef struct sr_sharder_vtable {
  size_t struct_size;
  sr_extension* ext;
  /* Required. `options` are the user's options for this component. */
  sr_status* (*create)(sr_named_value_list options, sr_sharder** out);
  void (*destroy)(sr_sharder* sharder); /* required */
  /* Required. Thread-safe for one sharder. */
  sr_status* (*shard_table)(sr_sharder* sharder,
                            const sr_shard_table_args* args);
  /* Optional: NULL means block bucketization by row range. */
  sr_status* (*route_ids)(sr_sharder* sharder, const sr_route_ids_args* args);
  /* Optional: NULL means the host's estimate (rows × (row bytes + state)). */
  sr_status* (*estimate_storage)(sr_sharder* sharder,
                                 const sr_estimate_storage_args* args);
  /* ABI 1.3, optional: NULL (or a 1.0-1.2 plugin, whose struct_size ends
   * before it) means the host's shares by row range. */
  sr_status* (*estimate_cost)(sr_sharder* sharder,
                              const sr_estimate_cost_args* args);
} sr_sharder_vtable;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDREC_ABI_SHARDER_H_ */
