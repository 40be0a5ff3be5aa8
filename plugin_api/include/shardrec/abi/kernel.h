/*
 * shardrec plugin ABI v1 — compute-kernel components (SR_KIND_KERNEL).
 *
 * A kernel object owns the local shards of a group of tables (table-batched,
 * like FBGEMM's TBE) together with their optimizer state, on one device. It
 * pools rows for bags (sum/mean, optional per-id weights), returns every row
 * for sequence features (pooling none), applies the backward pass fused with
 * the optimizer update, and reads, writes and resets rows for checkpoints and
 * eviction. Work is stream-ordered: calls enqueue on `stream` (NULL on CPU).
 */
#ifndef SHARDREC_ABI_KERNEL_H_
#define SHARDREC_ABI_KERNEL_H_

#include "shardrec/abi/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sr_kernel sr_kernel; /* opaque, created by the plugin */

#define SR_POOLING_SUM 0
#define SR_POOLING_MEAN 1
#define SR_POOLING_NONE 2 /* sequence: one output row per id */

#define SR_OPTIMIZER_NONE 0 /* inference: backward is refused */
#define SR_OPTIMIZER_SGD 1
#define SR_OPTIMIZER_ADAGRAD 2
#define SR_OPTIMIZER_ROWWISE_ADAGRAD 3
#define SR_OPTIMIZER_ADAM 4

/* What to do with an id outside [0, num_rows) of its table (seeds'
 * BoundsCheckMode). FATAL: return SR_OUT_OF_RANGE naming feature, bag and id,
 * write nothing. WARNING: log the first one per call, treat each as absent.
 * IGNORE: treat as absent silently. NONE: the caller guarantees ids in range. */
#define SR_BOUNDS_CHECK_FATAL 0
#define SR_BOUNDS_CHECK_WARNING 1
#define SR_BOUNDS_CHECK_IGNORE 2
#define SR_BOUNDS_CHECK_NONE 3

/* Row-wise quantized rows (ABI 1.4, inference only): with weight_dtype
 * uint8, every row is [scale fp16][bias fp16][dim values of 8, 4 or 2 bits,
 * packed][padding to 4 bytes], as FBGEMM's IntN TBE lays them out; a value
 * reads as scale * q + bias. shardrec/sdk/quantized_rows.hpp has the layout
 * and the reference (de)quantization. A kernel lists "int8_rowwise",
 * "int4_rowwise", "int2_rowwise" in its "weight_dtypes" attribute when it
 * can hold them; the optimizer must be SR_OPTIMIZER_NONE. */
#define SR_ROW_QUANT_NONE 0
#define SR_ROW_QUANT_INT8 1
#define SR_ROW_QUANT_INT4 2
#define SR_ROW_QUANT_INT2 3

/* One local shard of a table. Initial weights are uniform in
 * [init_min, init_max], drawn per (init_seed, global row, global column) so
 * a shard starts with exactly the values the unsharded table has there. */
typedef struct sr_kernel_table {
  size_t struct_size;
  sr_extension* ext;
  const char* name;
  int64_t num_rows;
  int64_t dim;
  DLDataType weight_dtype; /* fp32, fp16 or bf16 (see attributes) */
  double init_min;
  double init_max;
  uint64_t init_seed;
  int64_t global_row_offset; /* row of the full table that local row 0 is */
  int64_t global_col_offset; /* column of the full table local column 0 is */
  /* 1.4: SR_ROW_QUANT_* (weight_dtype uint8); quantized tables start as the
   * quantized initial weights. */
  int32_t row_quantization;
} sr_kernel_table;

typedef struct sr_kernel_create_args {
  size_t struct_size;
  sr_extension* ext;
  DLDevice device;
  const sr_kernel_table* tables; /* borrowed for the call */
  size_t num_tables;
  int32_t optimizer; /* SR_OPTIMIZER_* */
  /* Hyper-parameters by name: learning_rate, eps, beta1, beta2,
   * weight_decay (strings or numbers). Unknown names are an error. */
  sr_named_value_list optimizer_params;
  sr_named_value_list options; /* the user's options for this component */
} sr_kernel_create_args;

/* Layout of one table after creation. */
typedef struct sr_kernel_table_info {
  size_t struct_size;
  int64_t num_rows;
  int64_t dim;
  DLDataType weight_dtype;
  int64_t state_dim;      /* optimizer state values per row (0, 1, dim, 2·dim) */
  DLDataType state_dtype; /* float32 */
  int64_t bytes;          /* device bytes held for weights and state */
  /* 1.4: bytes of one weight row as read_rows/write_rows move it: dim times
   * the dtype's size, or a quantized row's (then weights are uint8
   * [n, row_bytes]). */
  int64_t row_bytes;
  int32_t row_quantization; /* 1.4: SR_ROW_QUANT_* */
} sr_kernel_table_info;

/* The bags of one call, table-batched. Features are processed in order; the
 * bags of feature f are [feature_bag_offsets[f], feature_bag_offsets[f+1])
 * (so every feature may have its own batch size), and the ids of bag b are
 * indices[offsets[b] .. offsets[b+1]). Output placement, for a 2-D output of
 * any strides:
 *   pooled (SUM/MEAN): bag b of feature f writes row
 *       feature_output_row[f] + (b - feature_bag_offsets[f]),
 *       columns feature_output_col[f] .. + dim of its table;
 *   NONE: id i of feature f writes row
 *       feature_output_row[f] + (i - offsets[feature_bag_offsets[f]]).
 * Pseudocode (pooled):
 *   for f, for b in bags(f): acc = 0; for i in ids(b):
 *       acc += (w ? w[i] : 1) * W[table(f)][indices[i]]
 *     out[row(f,b), col(f):col(f)+D] = mean ? acc / max(len(b),1) : acc */
typedef struct sr_kernel_lookup_args {
  size_t struct_size;
  sr_extension* ext;
  size_t num_features;
  const int32_t* feature_table;       /* host [F]: local table index */
  const int32_t* feature_pooling;     /* host [F]: SR_POOLING_* */
  const int64_t* feature_bag_offsets; /* host [F+1] */
  const int64_t* feature_output_row;  /* host [F] */
  const int64_t* feature_output_col;  /* host [F] */
  const DLTensor* offsets;            /* int64 [num_bags + 1], on the kernel's device */
  const DLTensor* indices;            /* int64 [nnz] local rows */
  const DLTensor* per_sample_weights; /* float32 [nnz] or NULL */
  int32_t bounds_check;               /* SR_BOUNDS_CHECK_* */
  int64_t* num_invalid_ids;           /* out (host), may be NULL */
  void* stream;
} sr_kernel_lookup_args;

typedef struct sr_kernel_forward_args {
  size_t struct_size;
  sr_extension* ext;
  const sr_kernel_lookup_args* lookup;
  DLTensor* output; /* 2-D, float32 (or another dtype in the attributes) */
} sr_kernel_forward_args;

/* Backward fused with the optimizer: the gradient of every row is summed over
 * all its occurrences in the call first, then the optimizer updates the row
 * once (exact, deterministic). */
typedef struct sr_kernel_backward_args {
  size_t struct_size;
  sr_extension* ext;
  const sr_kernel_lookup_args* lookup;
  const DLTensor* grad_output; /* same layout as forward's output */
  int64_t iteration;           /* 1-based step, for Adam's bias correction */
  double learning_rate;        /* NaN: the configured learning rate */
} sr_kernel_backward_args;

/* Rows of one table: read copies out, write copies in, reset re-initialises
 * weights (as at creation) and zeroes optimizer state. */
typedef struct sr_kernel_rows_args {
  size_t struct_size;
  sr_extension* ext;
  int32_t table;
  const DLTensor* rows; /* int64 [n] local rows */
  DLTensor* weights;    /* [n, dim] of weight_dtype (quantized: uint8 [n, row_bytes]); NULL to skip (or for reset) */
  DLTensor* state;      /* float32 [n, state_dim]; NULL to skip */
  void* stream;
} sr_kernel_rows_args;

typedef struct sr_kernel_vtable {
  size_t struct_size;
  sr_extension* ext;
  /* Required. */
  sr_status* (*create)(const sr_kernel_create_args* args, sr_kernel** out);
  void (*destroy)(sr_kernel* kernel);
  sr_status* (*get_table_info)(sr_kernel* kernel, int32_t table,
                               sr_kernel_table_info* out);
  sr_status* (*forward)(sr_kernel* kernel, const sr_kernel_forward_args* args);
  /* Optional (NULL: inference-only kernel). */
  sr_status* (*backward)(sr_kernel* kernel,
                         const sr_kernel_backward_args* args);
  /* Required. */
  sr_status* (*read_rows)(sr_kernel* kernel, const sr_kernel_rows_args* args);
  sr_status* (*write_rows)(sr_kernel* kernel, const sr_kernel_rows_args* args);
  sr_status* (*reset_rows)(sr_kernel* kernel, const sr_kernel_rows_args* args);
} sr_kernel_vtable;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDREC_ABI_KERNEL_H_ */
