// EmbeddingTables: a group of tables held by one compute-kernel object
// (table-batched, like FBGEMM's TBE), plus the feature -> table map. The
// unsharded EmbeddingBagCollection and EmbeddingCollection are thin layers
// over it; sharded modules will hold one per rank. Whatever kernel plugin is
// named (`cpu`, `cuda`, a third party's) does the arithmetic.
// A table may be cached (TableCache, docs/cache.md): larger than memory,
// its rows on a file and a RAM cache of them in the kernel; every call
// below works on it as on any other table.
// Thread-safety: calls on one object must not overlap (the kernel's
// contract); distinct objects are independent.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shardrec/abi/kernel.h"
#include "shardrec/core/cache/table_cache.h"
#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/modules/optimizer_spec.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

struct EmbeddingModuleOptions {
  std::string kernel = "cpu";  // the kernel component's name ("" = highest priority)
  OptionList kernel_options;   // that component's options (threads=..., ...)
  OptimizerSpec optimizer;     // none: inference only
  uint64_t init_seed = 0;      // initial weights: sdk::InitialWeight(seed, row, col)
  int32_t bounds_check = SR_BOUNDS_CHECK_FATAL;
  // The GPU a kernel whose "devices" attribute names cuda (and not cpu)
  // runs on; the tables' inputs and outputs stay host tensors and are
  // staged to it by core (plugin_objects.h). -1: automatic, which is GPU 0
  // for an unsharded module and rank mod GPUs for a sharded one.
  int device = -1;
  // Where the row files of tables a plan caches (compute_kernel
  // fused_ssd_caching) go: one scratch file per table piece, named
  // TABLE@SHARD.rows (docs/cache.md). Empty: such a plan is refused.
  std::filesystem::path cache_dir;
};

// "fatal" | "warning" | "ignore" | "none" -> SR_BOUNDS_CHECK_*.
StatusOr<int32_t> ParseBoundsCheckMode(const std::string& s);

// Where a table's local row 0 / column 0 sit in the full table it is a
// shard of: initial weights are drawn per global (row, column), so a shard
// starts with exactly the unsharded table's values there.
struct TableOrigin {
  int64_t row = 0;
  int64_t col = 0;
};

class EmbeddingTables {
 public:
  // origins: one per table (empty: every table is whole). caches: one per
  // table, set for those kept larger than memory (empty: none).
  static StatusOr<EmbeddingTables> Create(const PluginRegistry& registry,
                                          std::vector<EmbeddingTableConfig> tables,
                                          const EmbeddingModuleOptions& options,
                                          const std::vector<TableOrigin>& origins = {},
                                          std::vector<std::optional<TableCacheSpec>> caches = {});
  EmbeddingTables(EmbeddingTables&&) noexcept;
  EmbeddingTables& operator=(EmbeddingTables&&) noexcept;
  ~EmbeddingTables();

  const std::vector<EmbeddingTableConfig>& configs() const { return configs_; }
  const EmbeddingModuleOptions& options() const { return options_; }
  const std::string& kernel_name() const { return kernel_name_; }
  // Index of a table by name, or NOT_FOUND listing the names.
  StatusOr<int32_t> TableIndex(const std::string& name) const;
  // The kernel's view; a cached table's num_rows is the whole table's, its
  // bytes those of its cache's slots in the kernel.
  StatusOr<sr_kernel_table_info> Info(int32_t table) const;

  // The cache of a cached table, else null.
  const TableCache* cache(int32_t table) const;
  bool any_cached() const;
  // Every cached table's flush() (changed rows on their files, durable) or
  // purge() (flush, then an empty cache). No-ops without cached tables.
  Status Flush() const;
  Status Purge() const;
  // The next batch's features (as for Forward): each cached table whose
  // cache_params ask for prefetch_pipeline reads its rows that are on file
  // and not cached into its staging area (TableCache::Prefetch). The one
  // call that may run on another thread while this object trains.
  Status Prefetch(const KeyedJaggedTensor& features) const;

  // Whole tables: weights [rows, WeightColumns()] in the table's dtype (a
  // quantized table's raw row bytes, uint8); optimizer
  // state float32 [rows, state_dim]. Writes validate shape and dtype.
  StatusOr<Tensor> ReadWeights(int32_t table) const;
  Status WriteWeights(int32_t table, const Tensor& weights) const;
  StatusOr<Tensor> ReadState(int32_t table) const;
  Status WriteState(int32_t table, const Tensor& state) const;
  // Re-initialises `rows` (weights as at creation, optimizer state zero):
  // what managed collision does to the rows of evicted ids.
  Status ResetRows(int32_t table, std::span<const int64_t> rows) const;
  // Writes weights [rows.size(), dim] (the table's dtype) to `rows` only.
  Status WriteRowWeights(int32_t table, std::span<const int64_t> rows, const Tensor& weights) const;
  // `rows` only, weights [n, dim] in the table's dtype and state float32
  // [n, state_dim]; a null tensor is skipped. What checkpoints stream in
  // chunks. Shapes and dtypes are validated.
  Status ReadRows(int32_t table, std::span<const int64_t> rows, Tensor* weights, Tensor* state) const;
  Status WriteRows(int32_t table, std::span<const int64_t> rows, const Tensor* weights, const Tensor* state) const;

  // The features this group looks up, in table order, with their table.
  struct Feature {
    std::string name;
    int32_t table;
  };
  const std::vector<Feature>& features() const { return features_; }

  // The input's features this group looks up, in features() order.
  // NOT_FOUND names a missing feature; other keys are ignored.
  StatusOr<KeyedJaggedTensor> SelectFeatures(const KeyedJaggedTensor& input) const;

  // One kernel call over `features` (as returned by SelectFeatures). `output` is [rows, cols] float32; pooled
  // features write rows from 0 at `columns[f]`; sequence features write
  // one row per id from `rows[f]`. Number of dropped ids -> *invalid.
  Status Forward(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                 const std::vector<int64_t>& columns, Tensor& output, int64_t* invalid = nullptr) const;
  Status Backward(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                  const std::vector<int64_t>& columns, const Tensor& grad, int64_t iteration,
                  double learning_rate) const;
  // The gradient with respect to every id's per-sample weight, for pooled
  // features of weighted tables: for id i in bag b of feature f,
  //   out[i] = <row of i, grad[rows[f] + b, columns[f] .. + dim]>
  // (divided by the bag's length for a mean table), with the rows as they
  // are now: call it before Backward updates them. Ids outside their table
  // and ids of other features get 0. out: one float per value of `features`.
  Status IdWeightGradient(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                          const std::vector<int64_t>& columns, const Tensor& grad, std::span<float> out) const;

 private:
  EmbeddingTables(Kernel kernel, std::vector<EmbeddingTableConfig> configs, EmbeddingModuleOptions options,
                  std::string kernel_name);
  struct KernelSlots;  // a cached table's kernel table as its cache's CacheSlots
  struct Caches;       // the cached tables, and the last forward's slots
  enum class RowsOp { kRead, kWrite, kReset };
  // Row I/O on `rows`: a cached table's cache, else KernelRows.
  Status RowsCall(int32_t table, std::span<const int64_t> rows, const Tensor* weights, const Tensor* state,
                  RowsOp op) const;
  // One read_rows / write_rows / reset_rows call of the kernel on `rows`
  // (the views may be strided; read_rows writes through `weights` and
  // `state`).
  Status KernelRows(int32_t table, std::span<const int64_t> rows, const DLTensor* weights, const DLTensor* state,
                    RowsOp op) const;
  // ReadRows / WriteRows: shapes checked, then one RowsCall.
  Status SomeRows(int32_t table, std::span<const int64_t> rows, const Tensor* weights, const Tensor* state,
                  RowsOp op) const;
  std::vector<int64_t> AllRows(int32_t table) const;  // 0 .. num_embeddings - 1
  // Fills the host arrays of a lookup over `kjt` (already in features() order).
  struct LookupBuffers {
    std::vector<int32_t> table, pooling;
    std::vector<int64_t> bag_offsets;
    std::vector<float> weights;  // empty: unweighted call
  };
  StatusOr<LookupBuffers> PrepareLookup(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows,
                                        const std::vector<int64_t>& columns) const;
  // `features` with the cached tables' ids turned into slots: for a
  // forward, made resident first (assign); for a backward, the slots its
  // forward gave. Null when no table is cached (look up `features`); else
  // valid until the next call.
  StatusOr<const KeyedJaggedTensor*> ToSlots(const KeyedJaggedTensor& features, bool forward) const;

  Kernel kernel_;
  std::vector<EmbeddingTableConfig> configs_;
  EmbeddingModuleOptions options_;
  std::string kernel_name_;
  std::vector<Feature> features_;
  std::unique_ptr<Caches> caches_;  // null: no table is cached
};

}  // namespace shardrec
