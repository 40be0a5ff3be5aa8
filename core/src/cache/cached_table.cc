// CachedTable (cached_table.h). A row on file is the cache's row as the
// kernel keeps it: weights in the table's dtype, then the optimizer state
// as float32. Before a batch's lookup: the directory's plan, the dirty
// victims read out of the kernel and written to the file, then the misses
// read from the file (or drawn, when never written) and written into the
// kernel; then the batch's ids become cache slots.
#include "shardrec/core/cache/cached_table.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/sdk/init.hpp"

namespace shardrec {

struct CachedTable::State {
  EmbeddingTableConfig config;
  EmbeddingModuleOptions options;
  EmbeddingTables cache;
  CacheDirectory dir;
  RowFile file;
  DLDataType dtype{};
  int64_t dim = 0, state_dim = 0, weight_bytes = 0, row_bytes = 0;
  std::vector<float> initial_state;  // a fresh row's optimizer state
  // The last Forward's ids and their slots: its Backward (the same batch)
  // takes them instead of looking every id up again.
  std::vector<int64_t> last_ids;
  std::optional<KeyedJaggedTensor> last_slots;

  State(EmbeddingTableConfig c, EmbeddingModuleOptions o, EmbeddingTables t, CacheDirectory d, RowFile f)
      : config(std::move(c)), options(std::move(o)), cache(std::move(t)), dir(std::move(d)), file(std::move(f)) {}

  // Rows of `slots` out of the kernel, onto the file as `ids`.
  Status Save(const CacheDirectory::Move& m) {
    if (m.ids.empty()) return Status::Ok();
    const auto n = static_cast<int64_t>(m.ids.size());
    Tensor w = Tensor::Empty(dtype, {n, dim}), st = Tensor::Empty(dtype::kFloat32, {n, state_dim});
    SR_RETURN_IF_ERROR(cache.ReadRows(0, m.slots, &w, state_dim > 0 ? &st : nullptr));
    std::vector<std::byte> buf(static_cast<size_t>(n * row_bytes));
    for (int64_t i = 0; i < n; ++i) {
      std::byte* row = buf.data() + i * row_bytes;
      std::memcpy(row, static_cast<const std::byte*>(w.raw_data()) + i * weight_bytes, static_cast<size_t>(weight_bytes));
      if (state_dim > 0) std::memcpy(row + weight_bytes, st.data<float>() + i * state_dim, static_cast<size_t>(state_dim) * 4);
    }
    return file.Write(m.ids, buf.data());
  }

  // Whole-table rows `ids`: weights [n, dim] in the table's dtype and state
  // [n, state_dim], from the file when written, else drawn as the
  // in-memory kernel draws row `id` (global row = id).
  Status Fetch(std::span<const int64_t> ids, Tensor& w, Tensor& st) {
    const auto n = static_cast<int64_t>(ids.size());
    w = Tensor::Empty(dtype, {n, dim});
    st = Tensor::Empty(dtype::kFloat32, {n, state_dim});
    std::vector<int64_t> written, drawn;
    std::vector<int64_t> written_at, drawn_at;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool on_file = file.Written(ids[i]);
      (on_file ? written : drawn).push_back(ids[i]);
      (on_file ? written_at : drawn_at).push_back(static_cast<int64_t>(i));
    }
    auto* weights = static_cast<std::byte*>(w.raw_data());
    std::vector<std::byte> buf(written.size() * static_cast<size_t>(row_bytes));
    SR_RETURN_IF_ERROR(file.Read(written, buf.data()));
    for (size_t k = 0; k < written.size(); ++k) {
      const std::byte* row = buf.data() + static_cast<int64_t>(k) * row_bytes;
      const int64_t i = written_at[k];
      std::memcpy(weights + i * weight_bytes, row, static_cast<size_t>(weight_bytes));
      if (state_dim > 0) std::memcpy(st.data<float>() + i * state_dim, row + weight_bytes, static_cast<size_t>(state_dim) * 4);
    }
    if (drawn.empty()) return Status::Ok();
    const auto m = static_cast<int64_t>(drawn.size());
    Tensor f = Tensor::Empty(dtype::kFloat32, {m, dim});
    for (int64_t k = 0; k < m; ++k) {
      sdk::InitialRowWeights(options.init_seed, drawn[static_cast<size_t>(k)], 0, dim, config.init_min(),
                             config.init_max(), f.data<float>() + k * dim);
    }
    SR_ASSIGN_OR_RETURN(Tensor fw, FromFloat32(f, dtype, "initial rows"));
    for (int64_t k = 0; k < m; ++k) {
      const int64_t i = drawn_at[static_cast<size_t>(k)];
      std::memcpy(weights + i * weight_bytes, static_cast<const std::byte*>(fw.raw_data()) + k * weight_bytes,
                  static_cast<size_t>(weight_bytes));
      std::copy(initial_state.begin(), initial_state.end(), st.data<float>() + i * state_dim);
    }
    return Status::Ok();
  }

  // Rows `ids` into the kernel at `slots`.
  Status Load(const CacheDirectory::Move& m) {
    if (m.ids.empty()) return Status::Ok();
    Tensor w, st;
    SR_RETURN_IF_ERROR(Fetch(m.ids, w, st));
    return cache.WriteRows(0, m.slots, &w, state_dim > 0 ? &st : nullptr);
  }

  // The batch's ids as cache slots (ids outside the table: -1, which the
  // kernel drops or refuses by its bounds-check mode, as it would the id).
  StatusOr<KeyedJaggedTensor> Slots(const KeyedJaggedTensor& features, bool assign) {
    std::vector<int64_t> values = features.values();
    std::vector<size_t> valid;  // positions of ids inside the table
    for (size_t i = 0; i < values.size(); ++i) {
      const int64_t v = values[i];
      if (v >= 0 && v < config.num_embeddings) {
        valid.push_back(i);
        continue;
      }
      if (options.bounds_check == SR_BOUNDS_CHECK_FATAL) {
        return Status(SR_OUT_OF_RANGE, fmt::format("table '{}': id {} is outside its {} rows", config.name, v,
                                                   config.num_embeddings));
      }
      values[i] = -1;  // the kernel drops it (or warns) by its bounds-check mode, as it would the id
    }
    if (assign) {
      std::vector<int64_t> ids(valid.size());
      for (size_t k = 0; k < valid.size(); ++k) ids[k] = values[valid[k]];
      SR_ASSIGN_OR_RETURN(auto plan, dir.Assign(ids));
      // Victims leave before misses overwrite their slots.
      SR_RETURN_IF_ERROR(Save(plan.write_back));
      SR_RETURN_IF_ERROR(Load(plan.load));
      for (size_t k = 0; k < valid.size(); ++k) values[valid[k]] = plan.slots[k];
    } else {
      for (size_t i : valid) {
        values[i] = dir.SlotOf(values[i]);
        if (values[i] < 0) {
          return InternalError(fmt::format("table '{}': a looked-up row is not cached (Backward without its "
                                           "Forward?)", config.name));
        }
      }
    }
    KeyedJaggedTensor out = features;
    SR_RETURN_IF_ERROR(out.ReplaceValues(std::move(values)));
    return out;
  }
};

CachedTable::CachedTable(std::unique_ptr<State> state) : s_(std::move(state)) {}
CachedTable::CachedTable(CachedTable&&) noexcept = default;
CachedTable& CachedTable::operator=(CachedTable&&) noexcept = default;
CachedTable::~CachedTable() = default;

StatusOr<CachedTable> CachedTable::Create(const PluginRegistry& registry, const EmbeddingTableConfig& config,
                                          const EmbeddingModuleOptions& options, const CacheParams& params,
                                          const std::filesystem::path& file) {
  if (!(params.load_factor > 0 && params.load_factor <= 1)) {
    return InvalidArgumentError(fmt::format("table '{}': cache load factor {} is outside (0, 1]", config.name,
                                            params.load_factor));
  }
  const int64_t want = std::max<int64_t>(1, static_cast<int64_t>(params.load_factor * static_cast<double>(config.num_embeddings)));
  SR_ASSIGN_OR_RETURN(CacheDirectory dir,
                      CacheDirectory::Create(registry, params.algorithm, params.algorithm_options,
                                             {.slots = want, .ways = params.ways, .overflow = params.overflow}));
  // The cache's kernel table: capacity rows, the whole table's init bounds.
  EmbeddingTableConfig slots = config;
  slots.num_embeddings = dir.capacity();
  slots.weight_init_min = config.init_min();
  slots.weight_init_max = config.init_max();
  auto cache = EmbeddingTables::Create(registry, {slots}, options);
  if (!cache.ok()) return cache.status().WithContext("table '" + config.name + "': its cache");
  SR_ASSIGN_OR_RETURN(sr_kernel_table_info info, cache->Info(0));
  const int64_t weight_bytes = config.embedding_dim * static_cast<int64_t>(DTypeSize(info.weight_dtype));
  RowFileSpec spec{config.num_embeddings, weight_bytes + info.state_dim * 4,
                   fmt::format("table '{}': {} x {} weights + {} x float32 optimizer state", config.name,
                               config.embedding_dim, DTypeName(info.weight_dtype), info.state_dim),
                   params.io_threads};
  std::error_code ec;
  auto rows = std::filesystem::exists(file, ec) ? RowFile::Open(file, spec) : RowFile::Create(file, spec);
  if (!rows.ok()) return rows.status().WithContext("table '" + config.name + "'");
  auto s = std::make_unique<State>(config, options, std::move(cache).value(), std::move(dir), std::move(rows).value());
  s->dtype = info.weight_dtype;
  s->dim = config.embedding_dim;
  s->state_dim = info.state_dim;
  s->weight_bytes = weight_bytes;
  s->row_bytes = spec.row_bytes;
  // A fresh row's state, as the kernel resets it.
  const std::vector<int64_t> first = {0};
  SR_RETURN_IF_ERROR(s->cache.ResetRows(0, first));
  Tensor st = Tensor::Empty(dtype::kFloat32, {1, s->state_dim});
  if (s->state_dim > 0) {
    SR_RETURN_IF_ERROR(s->cache.ReadRows(0, first, nullptr, &st));
    s->initial_state.assign(st.data<float>(), st.data<float>() + s->state_dim);
  }
  return CachedTable(std::move(s));
}

const EmbeddingTableConfig& CachedTable::config() const { return s_->config; }
int64_t CachedTable::cached_rows() const { return s_->dir.set_slots(); }
int64_t CachedTable::overflow_rows() const { return s_->dir.capacity() - s_->dir.set_slots(); }
const CacheCounters& CachedTable::counters() const { return s_->dir.counters(); }
const RowFileCounters& CachedTable::file_counters() const { return s_->file.counters(); }

Status CachedTable::Forward(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                            const std::vector<int64_t>& columns, Tensor& output, int64_t* invalid) {
  s_->last_slots.reset();
  SR_ASSIGN_OR_RETURN(KeyedJaggedTensor slots, s_->Slots(features, /*assign=*/true));
  SR_RETURN_IF_ERROR(s_->cache.Forward(slots, rows, columns, output, invalid));
  s_->last_ids = features.values();
  s_->last_slots = std::move(slots);
  return Status::Ok();
}

Status CachedTable::Backward(const KeyedJaggedTensor& features, const std::vector<int64_t>& rows,
                             const std::vector<int64_t>& columns, const Tensor& grad, int64_t iteration,
                             double learning_rate) {
  // The last Forward's batch: its slots still hold its rows.
  const bool same = s_->last_slots && features.values() == s_->last_ids &&
                    features.keys() == s_->last_slots->keys() && features.lengths() == s_->last_slots->lengths();
  std::optional<KeyedJaggedTensor> looked_up;
  if (!same) {
    SR_ASSIGN_OR_RETURN(auto k, s_->Slots(features, /*assign=*/false));
    looked_up = std::move(k);
  }
  const KeyedJaggedTensor& slots = same ? *s_->last_slots : *looked_up;
  SR_RETURN_IF_ERROR(s_->cache.Backward(slots, rows, columns, grad, iteration, learning_rate));
  std::vector<int64_t> changed;
  for (int64_t v : slots.values()) {
    if (v >= 0) changed.push_back(v);
  }
  s_->dir.MarkDirty(changed);
  return Status::Ok();
}

Status CachedTable::Flush() {
  s_->last_slots.reset();  // a purge may follow: slots are not kept past a flush
  SR_RETURN_IF_ERROR(s_->Save(s_->dir.TakeDirty()));
  return s_->file.Sync();
}

Status CachedTable::Purge() {
  SR_RETURN_IF_ERROR(Flush());
  s_->dir.Clear();
  return Status::Ok();
}

Status CachedTable::ReadRows(std::span<const int64_t> rows, Tensor* weights, Tensor* state) {
  SR_RETURN_IF_ERROR(Flush());  // cached rows are on file now (clean); others are on file or never written
  for (int64_t r : rows) {
    if (r < 0 || r >= s_->config.num_embeddings) {
      return InvalidArgumentError(fmt::format("table '{}': row {} is outside its {} rows", s_->config.name, r,
                                              s_->config.num_embeddings));
    }
  }
  Tensor w, st;
  SR_RETURN_IF_ERROR(s_->Fetch(rows, w, st));
  if (weights != nullptr) *weights = std::move(w);
  if (state != nullptr) *state = std::move(st);
  return Status::Ok();
}

}  // namespace shardrec
