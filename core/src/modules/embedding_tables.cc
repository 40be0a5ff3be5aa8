// EmbeddingTables: one kernel object, many tables (see embedding_tables.h).
#include "shardrec/core/modules/embedding_tables.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "shardrec/core/dl_view.h"
#include "shardrec/core/tensor/dtype_convert.h"

namespace shardrec {

StatusOr<int32_t> ParseBoundsCheckMode(const std::string& s) {
  if (s == "fatal") return SR_BOUNDS_CHECK_FATAL;
  if (s == "warning") return SR_BOUNDS_CHECK_WARNING;
  if (s == "ignore") return SR_BOUNDS_CHECK_IGNORE;
  if (s == "none") return SR_BOUNDS_CHECK_NONE;
  return InvalidArgumentError("unknown bounds-check mode '" + s + "' (expected fatal, warning, ignore or none)");
}

namespace {
int32_t KernelPooling(PoolingType p) {
  switch (p) {
    case PoolingType::kMean: return SR_POOLING_MEAN;
    case PoolingType::kNone: return SR_POOLING_NONE;
    case PoolingType::kSum: break;
  }
  return SR_POOLING_SUM;
}

// Columns of the weights as they move: the dim, or a quantized row's bytes.
int64_t WeightColumns(const sr_kernel_table_info& info) {
  return info.row_quantization != SR_ROW_QUANT_NONE ? info.row_bytes : info.dim;
}
}  // namespace

// The cached tables (one entry per table, empty for the others) and the
// last forward's batch: its ids and the slot ids it was looked up with,
// which its backward reuses instead of finding every id again.
struct EmbeddingTables::Caches {
  std::vector<std::optional<TableCache>> tables;
  // The forward's ids as they were: the batch's own array when it owns it
  // (immutable: shared, not copied, and a backward of the same batch is
  // known by its address), else a copy (borrowed ids may change).
  SharedArray<int64_t> last_ids;
  bool SameIds(const SharedArray<int64_t>& ids) const {
    return (ids.data() == last_ids.data() && ids.size() == last_ids.size() && !ids.borrowed()) || ids == last_ids;
  }
  std::optional<KeyedJaggedTensor> last_slots;
  std::optional<KeyedJaggedTensor> found;  // a backward's slots, found anew (not its forward's batch)
};

struct EmbeddingTables::KernelSlots final : CacheSlots {
  KernelSlots(const EmbeddingTables& t, int32_t table) : t(t), table(table) {}
  Status ReadViews(std::span<const int64_t> slots, DLTensor* weights, DLTensor* state) const override {
    return t.KernelRows(table, slots, weights, state, RowsOp::kRead);
  }
  Status WriteViews(std::span<const int64_t> slots, const DLTensor* weights, const DLTensor* state) const override {
    return t.KernelRows(table, slots, weights, state, RowsOp::kWrite);
  }
  const EmbeddingTables& t;
  int32_t table;
};

EmbeddingTables::EmbeddingTables(EmbeddingTables&&) noexcept = default;
EmbeddingTables& EmbeddingTables::operator=(EmbeddingTables&&) noexcept = default;
EmbeddingTables::~EmbeddingTables() = default;

EmbeddingTables::EmbeddingTables(Kernel kernel, std::vector<EmbeddingTableConfig> configs,
                                 EmbeddingModuleOptions options, std::string kernel_name)
    : kernel_(std::move(kernel)),
      configs_(std::move(configs)),
      options_(std::move(options)),
      kernel_name_(std::move(kernel_name)) {
  for (size_t t = 0; t < configs_.size(); ++t) {
    for (const auto& f : configs_[t].feature_names) features_.push_back({f, static_cast<int32_t>(t)});
  }
}

StatusOr<EmbeddingTables> EmbeddingTables::Create(const PluginRegistry& registry,
                                                  std::vector<EmbeddingTableConfig> tables,
                                                  const EmbeddingModuleOptions& options,
                                                  const std::vector<TableOrigin>& origins,
                                                  std::vector<std::optional<TableCacheSpec>> caches) {
  SR_RETURN_IF_ERROR(ValidateTables(tables));
  if (!origins.empty() && origins.size() != tables.size()) {
    return InternalError(fmt::format("{} table origins for {} tables", origins.size(), tables.size()));
  }
  if (!caches.empty() && caches.size() != tables.size()) {
    return InternalError(fmt::format("{} table caches for {} tables", caches.size(), tables.size()));
  }
  // A cached table's kernel table holds its cache's slots.
  std::vector<std::optional<CacheDirectory>> directories(caches.size());
  for (size_t t = 0; t < caches.size(); ++t) {
    if (!caches[t]) continue;
    SR_ASSIGN_OR_RETURN(directories[t], TableCache::MakeDirectory(registry, tables[t], caches[t]->params));
  }
  for (size_t t = 0; t < tables.size(); ++t) {
    if (!IsRowQuantized(tables[t].data_type)) continue;
    const std::string what = fmt::format("table '{}' is {} (row-wise quantized, inference only)", tables[t].name,
                                         DataTypeName(tables[t].data_type));
    if (options.optimizer.optimizer != SR_OPTIMIZER_NONE) {
      return InvalidArgumentError(what + ": it cannot train; use optimizer none, or train it as fp32 and `shardrec "
                                  "export --quantize` the checkpoint");
    }
    if (t < caches.size() && caches[t]) {
      return UnimplementedError(what + ": it cannot be cached on file (fused_ssd_caching); keep it in memory");
    }
  }
  SR_ASSIGN_OR_RETURN(ComponentRef ref, registry.Find(SR_KIND_KERNEL, options.kernel));
  SR_RETURN_IF_ERROR(CheckKernelOptimizer(ref, options.optimizer.optimizer));
  std::vector<sr_kernel_table> ktables(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    sr_kernel_table& k = ktables[t];
    k.struct_size = SR_STRUCT_SIZE(sr_kernel_table, row_quantization);
    k.name = tables[t].name.c_str();
    k.num_rows = t < directories.size() && directories[t] ? directories[t]->capacity() : tables[t].num_embeddings;
    k.dim = tables[t].embedding_dim;
    k.weight_dtype = ToDLDataType(tables[t].data_type);
    k.row_quantization = RowQuantization(tables[t].data_type);
    k.init_min = tables[t].init_min();
    k.init_max = tables[t].init_max();
    k.init_seed = options.init_seed;
    if (!origins.empty()) {
      k.global_row_offset = origins[t].row;
      k.global_col_offset = origins[t].col;
    }
  }
  auto kernel = Kernel::Create(ref, ktables, options.optimizer.optimizer, options.optimizer.params,
                               options.kernel_options, DeviceFor(ref, options.device));
  if (!kernel.ok()) {
    return kernel.status().WithContext("kernel '" + ref.name() + "' refused the tables");
  }
  EmbeddingTables made(std::move(kernel).value(), std::move(tables), options, ref.name());
  for (size_t t = 0; t < caches.size(); ++t) {
    if (!caches[t]) continue;
    if (!made.caches_) {
      made.caches_ = std::make_unique<Caches>();
      made.caches_->tables.resize(caches.size());
    }
    const auto table = static_cast<int32_t>(t);
    SR_ASSIGN_OR_RETURN(auto info, made.kernel_.TableInfo(table));
    CachedRowFormat format{info.weight_dtype, info.state_dim, {}, options.init_seed,
                           origins.empty() ? 0 : origins[t].row, origins.empty() ? 0 : origins[t].col};
    // A fresh row's optimizer state, as this kernel resets it (Adagrad's
    // initial accumulator, ...): what rows never written start with.
    if (info.state_dim > 0) {
      const std::vector<int64_t> first = {0};
      SR_RETURN_IF_ERROR(made.KernelRows(table, first, nullptr, nullptr, RowsOp::kReset));
      Tensor st = Tensor::Empty(dtype::kFloat32, {1, info.state_dim});
      SR_RETURN_IF_ERROR(made.KernelRows(table, first, nullptr, &st.dl(), RowsOp::kRead));
      format.initial_state.assign(st.data<float>(), st.data<float>() + info.state_dim);
    }
    SR_ASSIGN_OR_RETURN(made.caches_->tables[t], TableCache::Create(std::move(directories[t]).value(),
                                                                     made.configs_[t], format, std::move(*caches[t])));
  }
  return made;
}

StatusOr<sr_kernel_table_info> EmbeddingTables::Info(int32_t table) const {
  SR_ASSIGN_OR_RETURN(auto info, kernel_.TableInfo(table));
  if (cache(table) != nullptr) info.num_rows = configs_[static_cast<size_t>(table)].num_embeddings;
  return info;
}

const TableCache* EmbeddingTables::cache(int32_t table) const {
  if (!caches_ || table < 0 || static_cast<size_t>(table) >= caches_->tables.size()) return nullptr;
  const auto& c = caches_->tables[static_cast<size_t>(table)];
  return c ? &*c : nullptr;
}

bool EmbeddingTables::any_cached() const { return caches_ != nullptr; }

Status EmbeddingTables::Flush() const {
  if (!caches_) return Status::Ok();
  for (size_t t = 0; t < caches_->tables.size(); ++t) {
    if (!caches_->tables[t]) continue;
    SR_RETURN_IF_ERROR(caches_->tables[t]->Flush(KernelSlots(*this, static_cast<int32_t>(t))));
  }
  return Status::Ok();
}

Status EmbeddingTables::Prefetch(const KeyedJaggedTensor& features) const {
  if (!caches_) return Status::Ok();
  if (static_cast<size_t>(features.num_keys()) != features_.size()) {
    return InternalError("prefetch: the features disagree with the table group");
  }
  const auto offsets = features.offset_per_key();
  for (size_t t = 0; t < caches_->tables.size(); ++t) {
    if (!caches_->tables[t] || !caches_->tables[t]->params().prefetch_pipeline) continue;
    std::vector<int64_t> ids;
    for (size_t f = 0; f < features_.size(); ++f) {
      if (static_cast<size_t>(features_[f].table) != t) continue;
      ids.insert(ids.end(), features.values().begin() + offsets[f], features.values().begin() + offsets[f + 1]);
    }
    SR_RETURN_IF_ERROR(caches_->tables[t]->Prefetch(ids));
  }
  return Status::Ok();
}

Status EmbeddingTables::Purge() const {
  if (!caches_) return Status::Ok();
  caches_->last_slots.reset();  // the slots it names are gone
  for (size_t t = 0; t < caches_->tables.size(); ++t) {
    if (!caches_->tables[t]) continue;
    SR_RETURN_IF_ERROR(caches_->tables[t]->Purge(KernelSlots(*this, static_cast<int32_t>(t))));
  }
  return Status::Ok();
}

StatusOr<int32_t> EmbeddingTables::TableIndex(const std::string& name) const {
  std::vector<std::string> names;
  for (size_t t = 0; t < configs_.size(); ++t) {
    if (configs_[t].name == name) return static_cast<int32_t>(t);
    names.push_back(configs_[t].name);
  }
  return Status(SR_NOT_FOUND, fmt::format("no table '{}' (tables: {})", name, fmt::join(names, ", ")));
}

std::vector<int64_t> EmbeddingTables::AllRows(int32_t table) const {
  std::vector<int64_t> ids(static_cast<size_t>(configs_.at(static_cast<size_t>(table)).num_embeddings));
  std::iota(ids.begin(), ids.end(), int64_t{0});
  return ids;
}

Status EmbeddingTables::RowsCall(int32_t table, std::span<const int64_t> rows, const Tensor* weights,
                                 const Tensor* state, RowsOp op) const {
  if (cache(table) != nullptr) {
    TableCache& c = *caches_->tables[static_cast<size_t>(table)];
    const KernelSlots slots(*this, table);
    switch (op) {
      case RowsOp::kRead: return c.ReadRows(rows, const_cast<Tensor*>(weights), const_cast<Tensor*>(state), slots);
      case RowsOp::kWrite: return c.WriteRows(rows, weights, state, slots);
      case RowsOp::kReset: break;
    }
    return c.ResetRows(rows, slots);
  }
  return KernelRows(table, rows, weights ? &weights->dl() : nullptr, state ? &state->dl() : nullptr, op);
}

Status EmbeddingTables::KernelRows(int32_t table, std::span<const int64_t> rows, const DLTensor* weights,
                                   const DLTensor* state, RowsOp op) const {
  DLView rows_view(rows.data(), {static_cast<int64_t>(rows.size())});
  sr_kernel_rows_args args{};
  args.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
  args.table = table;
  args.rows = rows_view.get();
  args.weights = const_cast<DLTensor*>(weights);  // read_rows writes through it; write_rows only reads
  args.state = const_cast<DLTensor*>(state);
  switch (op) {
    case RowsOp::kRead: return kernel_.ReadRows(args);
    case RowsOp::kWrite: return kernel_.WriteRows(args);
    case RowsOp::kReset: break;
  }
  return kernel_.ResetRows(args);
}

StatusOr<Tensor> EmbeddingTables::ReadWeights(int32_t table) const {
  SR_ASSIGN_OR_RETURN(auto info, Info(table));
  Tensor w = Tensor::Empty(info.weight_dtype, {info.num_rows, WeightColumns(info)});
  SR_RETURN_IF_ERROR(RowsCall(table, AllRows(table), &w, nullptr, RowsOp::kRead));
  return w;
}

Status EmbeddingTables::WriteWeights(int32_t table, const Tensor& weights) const {
  return WriteRowWeights(table, AllRows(table), weights);
}

Status EmbeddingTables::WriteRowWeights(int32_t table, std::span<const int64_t> rows, const Tensor& weights) const {
  SR_ASSIGN_OR_RETURN(auto info, Info(table));
  const std::string what = "weights of table '" + configs_[static_cast<size_t>(table)].name + "'";
  SR_RETURN_IF_ERROR(ExpectTensor(weights, what, info.weight_dtype, 2));
  if (weights.size(0) != static_cast<int64_t>(rows.size()) || weights.size(1) != WeightColumns(info)) {
    return InvalidArgumentError(fmt::format("{}: expected shape [{}, {}], got {}", what, rows.size(), WeightColumns(info),
                                            ShapeString(weights.shape())));
  }
  if (rows.empty()) return Status::Ok();
  return RowsCall(table, rows, &weights, nullptr, RowsOp::kWrite);
}

namespace {
Status ExpectRowsTensor(const Tensor& t, const std::string& what, DLDataType dtype, size_t rows, int64_t cols) {
  SR_RETURN_IF_ERROR(ExpectTensor(t, what, dtype, 2));
  if (t.size(0) != static_cast<int64_t>(rows) || t.size(1) != cols) {
    return InvalidArgumentError(fmt::format("{}: expected shape [{}, {}], got {}", what, rows, cols, ShapeString(t.shape())));
  }
  return Status::Ok();
}
}  // namespace

Status EmbeddingTables::SomeRows(int32_t table, std::span<const int64_t> rows, const Tensor* weights,
                                 const Tensor* state, RowsOp op) const {
  SR_ASSIGN_OR_RETURN(auto info, Info(table));
  const std::string& name = configs_[static_cast<size_t>(table)].name;
  if (weights) SR_RETURN_IF_ERROR(ExpectRowsTensor(*weights, "weights of table '" + name + "'", info.weight_dtype, rows.size(), WeightColumns(info)));
  if (state && info.state_dim == 0) state = nullptr;  // an optimizer without state: nothing to move
  if (state) SR_RETURN_IF_ERROR(ExpectRowsTensor(*state, "optimizer state of table '" + name + "'", dtype::kFloat32, rows.size(), info.state_dim));
  if (rows.empty() || (!weights && !state)) return Status::Ok();
  return RowsCall(table, rows, weights, state, op);
}

Status EmbeddingTables::ReadRows(int32_t table, std::span<const int64_t> rows, Tensor* weights, Tensor* state) const {
  return SomeRows(table, rows, weights, state, RowsOp::kRead);
}

Status EmbeddingTables::WriteRows(int32_t table, std::span<const int64_t> rows, const Tensor* weights,
                                  const Tensor* state) const {
  return SomeRows(table, rows, weights, state, RowsOp::kWrite);
}

StatusOr<Tensor> EmbeddingTables::ReadState(int32_t table) const {
  SR_ASSIGN_OR_RETURN(auto info, Info(table));
  Tensor s = Tensor::Empty(dtype::kFloat32, {info.num_rows, info.state_dim});
  if (info.state_dim > 0) SR_RETURN_IF_ERROR(RowsCall(table, AllRows(table), nullptr, &s, RowsOp::kRead));
  return s;
}

Status EmbeddingTables::WriteState(int32_t table, const Tensor& state) const {
  SR_ASSIGN_OR_RETURN(auto info, Info(table));
  const std::string what = "optimizer state of table '" + configs_[static_cast<size_t>(table)].name + "'";
  SR_RETURN_IF_ERROR(ExpectTensor(state, what, dtype::kFloat32, 2));
  if (state.size(0) != info.num_rows || state.size(1) != info.state_dim) {
    return InvalidArgumentError(fmt::format("{}: expected shape [{}, {}], got {}", what, info.num_rows,
                                            info.state_dim, ShapeString(state.shape())));
  }
  if (info.state_dim == 0) return Status::Ok();
  return RowsCall(table, AllRows(table), nullptr, &state, RowsOp::kWrite);
}

Status EmbeddingTables::ResetRows(int32_t table, std::span<const int64_t> rows) const {
  if (rows.empty()) return Status::Ok();
  return RowsCall(table, rows, nullptr, nullptr, RowsOp::kReset);
}

StatusOr<KeyedJaggedTensor> EmbeddingTables::SelectFeatures(const KeyedJaggedTensor& input) const {
  std::vector<std::string> names;
  for (const auto& f : features_) names.push_back(f.name);
  return input.Select(names);
}

StatusOr<EmbeddingTables::LookupBuffers> EmbeddingTables::PrepareLookup(const KeyedJaggedTensor& kjt,
                                                                        const std::vector<int64_t>& rows,
                                                                        const std::vector<int64_t>& columns) const {
  const size_t num_features = features_.size();
  if (static_cast<size_t>(kjt.num_keys()) != num_features || rows.size() != num_features ||
      columns.size() != num_features) {
    return InternalError("lookup: features, rows and columns disagree with the table group");
  }
  LookupBuffers b;
  b.bag_offsets.push_back(0);
  bool any_weighted = false;
  for (size_t f = 0; f < num_features; ++f) {
    if (kjt.keys()[f] != features_[f].name) {
      return InternalError("lookup: feature " + kjt.keys()[f] + " out of order (expected " + features_[f].name + ")");
    }
    const auto& config = configs_[static_cast<size_t>(features_[f].table)];
    b.table.push_back(features_[f].table);
    b.pooling.push_back(KernelPooling(config.pooling));
    b.bag_offsets.push_back(kjt.BagOffset(static_cast<int>(f) + 1));
    if (config.is_weighted && config.pooling != PoolingType::kNone) {
      if (!kjt.has_weights()) {
        return InvalidArgumentError("table '" + config.name + "' is weighted but the input has no weights (feature '" +
                                    features_[f].name + "')");
      }
      any_weighted = true;
    }
  }
  if (any_weighted) {
    // Features of unweighted tables get weight 1 (the kernel takes one array).
    b.weights = kjt.weights()->ToVector();
    const auto offsets = kjt.offset_per_key();
    for (size_t f = 0; f < num_features; ++f) {
      const auto& config = configs_[static_cast<size_t>(features_[f].table)];
      if (!config.is_weighted) {
        std::fill(b.weights.begin() + offsets[f], b.weights.begin() + offsets[f + 1], 1.0f);
      }
    }
  }
  return b;
}

namespace {
// The bounds-check mode the kernel is asked for. NONE lets a kernel skip its
// check, so a caller passing NONE vouches that every id is in range. The
// module's input is a user's batch, which it cannot vouch for, so it asks for
// IGNORE instead: ids outside their table count as absent and are counted,
// exactly what the sharded input dist does with them (it must check every id
// to route it). Both paths then give the same output for the same batch.
int32_t KernelBoundsCheck(int32_t mode) { return mode == SR_BOUNDS_CHECK_NONE ? SR_BOUNDS_CHECK_IGNORE : mode; }

struct LookupViews {
  LookupViews(const KeyedJaggedTensor& kjt, const std::vector<float>& weights)
      : offsets(kjt.offsets().data(), {static_cast<int64_t>(kjt.offsets().size())}),
        indices(kjt.values().data(), {static_cast<int64_t>(kjt.values().size())}),
        weights_view(weights.data(), {static_cast<int64_t>(weights.size())}) {}

  template <class Buffers>
  sr_kernel_lookup_args Args(const Buffers& b, const std::vector<int64_t>& rows,
                             const std::vector<int64_t>& columns, int32_t bounds_check) {
    sr_kernel_lookup_args lookup{};
    lookup.struct_size = SR_STRUCT_SIZE(sr_kernel_lookup_args, stream);
    lookup.num_features = b.table.size();
    lookup.feature_table = b.table.data();
    lookup.feature_pooling = b.pooling.data();
    lookup.feature_bag_offsets = b.bag_offsets.data();
    lookup.feature_output_row = rows.data();
    lookup.feature_output_col = columns.data();
    lookup.offsets = offsets.get();
    lookup.indices = indices.get();
    lookup.per_sample_weights = b.weights.empty() ? nullptr : weights_view.get();
    lookup.bounds_check = KernelBoundsCheck(bounds_check);
    return lookup;
  }
  DLView offsets, indices, weights_view;
};
}  // namespace

StatusOr<const KeyedJaggedTensor*> EmbeddingTables::ToSlots(const KeyedJaggedTensor& features, bool forward) const {
  if (!caches_) return static_cast<const KeyedJaggedTensor*>(nullptr);
  Caches& c = *caches_;
  if (!forward && c.last_slots && c.SameIds(features.values()) && features.keys() == c.last_slots->keys() &&
      features.lengths() == c.last_slots->lengths()) {
    return &*c.last_slots;  // the batch of the last forward: its slots still hold its rows
  }
  c.last_slots.reset();
  std::vector<int64_t> values = features.values().ToVector();
  const auto offsets = features.offset_per_key();
  std::vector<size_t> at;
  std::vector<int64_t> ids;
  for (size_t t = 0; t < c.tables.size(); ++t) {
    if (!c.tables[t]) continue;
    const EmbeddingTableConfig& config = configs_[t];
    // The table's ids, from all its features: one batch for its cache. Its
    // features are mostly adjacent keys (one, usually) with every id in
    // range: then the cache rewrites that run of values to slots in place.
    size_t first = 0, last = 0;
    bool run = true, any = false;
    for (size_t f = 0; f < features_.size(); ++f) {
      if (static_cast<size_t>(features_[f].table) != t) continue;
      const auto lo = static_cast<size_t>(offsets[f]), hi = static_cast<size_t>(offsets[f + 1]);
      if (!any) first = lo;
      run = run && (!any || lo == last);
      any = true;
      last = hi;
    }
    if (!any) continue;
    const int64_t rows = config.num_embeddings;
    for (size_t i = first; run && i < last; ++i) run = values[i] >= 0 && values[i] < rows;
    const std::span<int64_t> in_place(values.data() + first, run ? last - first : 0);
    at.clear();
    ids.clear();
    for (size_t f = 0; f < features_.size() && !run; ++f) {
      if (static_cast<size_t>(features_[f].table) != t) continue;
      for (auto i = static_cast<size_t>(offsets[f]); i < static_cast<size_t>(offsets[f + 1]); ++i) {
        const int64_t v = values[i];
        if (v >= 0 && v < rows) {
          at.push_back(i);
          ids.push_back(v);
        } else if (options_.bounds_check == SR_BOUNDS_CHECK_FATAL) {
          return Status(SR_OUT_OF_RANGE, fmt::format("table '{}': id {} of feature '{}' is outside its {} rows",
                                                     config.name, v, features_[f].name, rows));
        } else {
          values[i] = -1;  // the kernel drops it (or warns) by its bounds-check mode, as it would the id
        }
      }
    }
    const std::span<int64_t> batch = run ? in_place : std::span<int64_t>(ids);
    if (forward) {
      SR_RETURN_IF_ERROR(c.tables[t]->Assign(batch, KernelSlots(*this, static_cast<int32_t>(t))));
    } else {
      SR_RETURN_IF_ERROR(c.tables[t]->Find(batch));
    }
    for (size_t k = 0; k < at.size(); ++k) values[at[k]] = ids[k];
  }
  std::optional<KeyedJaggedTensor>& out = forward ? c.last_slots : c.found;
  out = features;
  SR_RETURN_IF_ERROR(out->ReplaceValues(std::move(values)));
  if (forward) {
    c.last_ids = features.values().borrowed() ? SharedArray<int64_t>(features.values().ToVector()) : features.values();
  }
  return &*out;
}

Status EmbeddingTables::Forward(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                                const std::vector<int64_t>& columns, Tensor& output, int64_t* invalid) const {
  SR_ASSIGN_OR_RETURN(auto b, PrepareLookup(features, rows, columns));
  SR_ASSIGN_OR_RETURN(auto slots, ToSlots(features, /*forward=*/true));
  LookupViews views(slots ? *slots : features, b.weights);
  sr_kernel_lookup_args lookup = views.Args(b, rows, columns, options_.bounds_check);
  lookup.num_invalid_ids = invalid;
  sr_kernel_forward_args args{};
  args.struct_size = SR_STRUCT_SIZE(sr_kernel_forward_args, output);
  args.lookup = &lookup;
  args.output = output.mutable_dl();
  return kernel_.Forward(args);
}

Status EmbeddingTables::Backward(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                                 const std::vector<int64_t>& columns, const Tensor& grad, int64_t iteration,
                                 double learning_rate) const {
  if (!kernel_.HasBackward()) {
    return UnimplementedError("kernel '" + kernel_name_ + "' is inference-only (no backward)");
  }
  SR_ASSIGN_OR_RETURN(auto b, PrepareLookup(features, rows, columns));
  SR_ASSIGN_OR_RETURN(auto slots, ToSlots(features, /*forward=*/false));
  LookupViews views(slots ? *slots : features, b.weights);
  sr_kernel_lookup_args lookup = views.Args(b, rows, columns, options_.bounds_check);
  sr_kernel_backward_args args{};
  args.struct_size = SR_STRUCT_SIZE(sr_kernel_backward_args, learning_rate);
  args.lookup = &lookup;
  args.grad_output = &grad.dl();
  args.iteration = iteration;
  args.learning_rate = learning_rate;
  SR_RETURN_IF_ERROR(kernel_.Backward(args));
  if (!slots) return Status::Ok();
  // The rows the optimizer changed go back to the file when they leave.
  // The batch of the last forward: every cached table that has a feature
  // assigned it as a whole, so each marks it whole (one write, not one per
  // id). Another batch's slots were found anew: marked slot by slot
  // (MarkDirty passes over the -1 of a dropped id).
  if (caches_->last_slots && slots == &*caches_->last_slots) {
    std::vector<bool> marked(caches_->tables.size(), false);
    for (const auto& f : features_) {
      auto& cache = caches_->tables[static_cast<size_t>(f.table)];
      if (!cache || marked[static_cast<size_t>(f.table)]) continue;
      marked[static_cast<size_t>(f.table)] = true;
      cache->MarkBatchDirty();
    }
    return Status::Ok();
  }
  const auto offsets = slots->offset_per_key();
  for (size_t f = 0; f < features_.size(); ++f) {
    auto& cache = caches_->tables[static_cast<size_t>(features_[f].table)];
    if (!cache) continue;
    cache->MarkDirty(std::span<const int64_t>(slots->values().data() + offsets[f],
                                              static_cast<size_t>(offsets[f + 1] - offsets[f])));
  }
  return Status::Ok();
}

Status EmbeddingTables::IdWeightGradient(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                                         const std::vector<int64_t>& columns, const Tensor& grad,
                                         std::span<float> out) const {
  SR_RETURN_IF_ERROR(PrepareLookup(features, rows, columns).status());
  if (out.size() != features.values().size()) {
    return InternalError("id weight gradient: the output has the wrong size");
  }
  std::fill(out.begin(), out.end(), 0.0f);
  if (!SameDType(grad.dtype(), dtype::kFloat32) || grad.ndim() != 2) {
    return InvalidArgumentError("id weight gradient: the gradient must be 2-D float32");
  }
  const int64_t width = grad.size(1);
  const float* g = grad.data<float>();
  const auto& offsets = features.offsets();
  const auto& values = features.values();
  for (size_t f = 0; f < features_.size(); ++f) {
    const int32_t t = features_[f].table;
    const auto& config = configs_[static_cast<size_t>(t)];
    if (!config.is_weighted || config.pooling == PoolingType::kNone) continue;
    const int64_t dim = config.embedding_dim;
    const int64_t first_bag = features.BagOffset(static_cast<int>(f));
    const int64_t bags = features.stride_per_key()[f];
    if (columns[f] < 0 || columns[f] + dim > width || rows[f] < 0 || rows[f] + bags > grad.size(0)) {
      return InternalError("id weight gradient: feature " + features_[f].name + " falls outside the gradient");
    }
    // The rows of the feature's in-range ids, in one read.
    std::vector<int64_t> ids;
    std::vector<size_t> where;
    for (auto i = static_cast<size_t>(offsets[static_cast<size_t>(first_bag)]);
         i < static_cast<size_t>(offsets[static_cast<size_t>(first_bag + bags)]); ++i) {
      if (values[i] < 0 || values[i] >= config.num_embeddings) continue;
      ids.push_back(values[i]);
      where.push_back(i);
    }
    if (ids.empty()) continue;
    SR_ASSIGN_OR_RETURN(auto info, Info(t));
    Tensor w = Tensor::Empty(info.weight_dtype, {static_cast<int64_t>(ids.size()), dim});
    SR_RETURN_IF_ERROR(ReadRows(t, ids, &w, nullptr));
    SR_ASSIGN_OR_RETURN(Tensor w32, ToFloat32(w, config.name));
    const float* r = w32.data<float>();
    size_t k = 0;
    for (int64_t b = 0; b < bags && k < where.size(); ++b) {
      const auto end = static_cast<size_t>(offsets[static_cast<size_t>(first_bag + b + 1)]);
      const int64_t length = end - static_cast<size_t>(offsets[static_cast<size_t>(first_bag + b)]);
      const float scale = config.pooling == PoolingType::kMean && length > 1 ? 1.0f / static_cast<float>(length) : 1.0f;
      const float* gb = g + (rows[f] + b) * width + columns[f];
      for (; k < where.size() && where[k] < end; ++k) {
        const float* row = r + static_cast<int64_t>(k) * dim;
        float dot = 0;
        for (int64_t c = 0; c < dim; ++c) dot += row[c] * gb[c];
        out[where[k]] = dot * scale;
      }
    }
  }
  return Status::Ok();
}

}  // namespace shardrec
