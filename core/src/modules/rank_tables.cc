// RankTables (rank_tables.h).
#include "shardrec/core/modules/rank_tables.h"
#include "shardrec/core/modules/table_weights.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/sdk/init.hpp"

namespace shardrec {

StatusOr<RankTables> RankTables::Create(const PluginRegistry& registry, std::vector<TablePiece> pieces,
                                          const EmbeddingModuleOptions& base) {
  RankTables st;
  st.pieces_ = std::move(pieces);
  st.where_.resize(st.pieces_.size());
  // Kernels in order of first use; a kernel's pieces keep their order.
  std::vector<std::string> kernels;
  std::map<std::string, std::vector<size_t>> by_kernel;
  std::vector<size_t> first_key(st.pieces_.size());
  for (size_t p = 0; p < st.pieces_.size(); ++p) {
    first_key[p] = st.keys_.size();
    for (const auto& k : st.pieces_[p].config.feature_names) st.keys_.push_back(k);
    auto [it, added] = by_kernel.try_emplace(st.pieces_[p].kernel);
    if (added) kernels.push_back(st.pieces_[p].kernel);
    it->second.push_back(p);
  }
  for (const auto& kernel : kernels) {
    std::vector<EmbeddingTableConfig> configs;
    std::vector<TableOrigin> origins;
    std::vector<std::optional<TableCacheSpec>> caches;
    bool any_cached = false;
    std::vector<size_t> keys;
    for (size_t p : by_kernel[kernel]) {
      st.where_[p] = {st.groups_.size(), static_cast<int32_t>(configs.size())};
      configs.push_back(st.pieces_[p].config);
      origins.push_back(st.pieces_[p].origin);
      caches.push_back(st.pieces_[p].cache);
      if (caches.back()) {
        any_cached = true;
        caches.back()->global_rows = st.pieces_[p].global_rows;  // its rows are drawn there
      }
      for (size_t k = 0; k < st.pieces_[p].config.feature_names.size(); ++k) keys.push_back(first_key[p] + k);
    }
    EmbeddingModuleOptions options = base;
    options.kernel = kernel;
    if (kernel != base.kernel) options.kernel_options = {};
    if (!any_cached) caches.clear();
    SR_ASSIGN_OR_RETURN(auto tables,
                        EmbeddingTables::Create(registry, std::move(configs), options, origins, std::move(caches)));
    st.groups_.push_back({std::move(tables), std::move(keys)});
  }
  // Pieces whose rows a sharder chose: draw their initial weights at the
  // global rows they stand for (a cached piece's cache draws them there).
  for (size_t p = 0; p < st.pieces_.size(); ++p) {
    if (st.pieces_[p].global_rows.empty() || st.pieces_[p].cache) continue;
    std::vector<int64_t> all(static_cast<size_t>(st.pieces_[p].config.num_embeddings));
    std::iota(all.begin(), all.end(), int64_t{0});
    SR_RETURN_IF_ERROR(st.WriteInitialWeights(p, all, base.init_seed));
  }
  return st;
}

StatusOr<int64_t> RankTables::Bytes() const {
  int64_t bytes = 0;
  for (const Where& w : where_) {
    SR_ASSIGN_OR_RETURN(auto info, groups_[w.group].tables.Info(w.table));
    bytes += info.bytes;
  }
  return bytes;
}

const TableCache* RankTables::cache(size_t p) const {
  return groups_[where_[p].group].tables.cache(where_[p].table);
}

Status RankTables::Flush() const {
  for (const Group& g : groups_) SR_RETURN_IF_ERROR(g.tables.Flush());
  return Status::Ok();
}

Status RankTables::Purge() const {
  for (const Group& g : groups_) SR_RETURN_IF_ERROR(g.tables.Purge());
  return Status::Ok();
}

Status RankTables::Prefetch(const KeyedJaggedTensor& kjt) const {
  for (const Group& g : groups_) {
    if (!g.tables.any_cached()) continue;
    std::vector<std::string> names;
    for (size_t k : g.keys) names.push_back(keys_[k]);
    SR_ASSIGN_OR_RETURN(auto selected, kjt.Select(names));
    SR_RETURN_IF_ERROR(g.tables.Prefetch(selected));
  }
  return Status::Ok();
}

template <class Call>
Status RankTables::ForEachGroup(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows,
                                 const std::vector<int64_t>& cols, Call&& call) const {
  if (groups_.size() == 1) return call(groups_[0].tables, kjt, rows, cols);
  for (const Group& g : groups_) {
    std::vector<std::string> names;
    std::vector<int64_t> g_rows, g_cols;
    for (size_t k : g.keys) {
      names.push_back(keys_[k]);
      g_rows.push_back(rows[k]);
      g_cols.push_back(cols[k]);
    }
    SR_ASSIGN_OR_RETURN(auto selected, kjt.Select(names));
    SR_RETURN_IF_ERROR(call(g.tables, selected, g_rows, g_cols));
  }
  return Status::Ok();
}

Status RankTables::Forward(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows,
                            const std::vector<int64_t>& cols, Tensor& output, int64_t* invalid) const {
  if (groups_.empty()) return Status::Ok();
  return ForEachGroup(kjt, rows, cols, [&](const EmbeddingTables& t, const KeyedJaggedTensor& k,
                                           const std::vector<int64_t>& r, const std::vector<int64_t>& c) {
    int64_t dropped = 0;
    SR_RETURN_IF_ERROR(t.Forward(k, r, c, output, &dropped));
    if (invalid != nullptr) *invalid += dropped;
    return Status::Ok();
  });
}

Status RankTables::Backward(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows,
                             const std::vector<int64_t>& cols, const Tensor& grad, int64_t iteration,
                             double learning_rate) const {
  if (groups_.empty()) return Status::Ok();
  return ForEachGroup(kjt, rows, cols, [&](const EmbeddingTables& t, const KeyedJaggedTensor& k,
                                           const std::vector<int64_t>& r, const std::vector<int64_t>& c) {
    return t.Backward(k, r, c, grad, iteration, learning_rate);
  });
}

Status RankTables::IdWeightGradient(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows,
                                    const std::vector<int64_t>& cols, const Tensor& grad, std::span<float> out) const {
  std::fill(out.begin(), out.end(), 0.0f);
  if (groups_.empty()) return Status::Ok();
  const auto at = kjt.offset_per_key();  // where each key's ids start in `out`
  return ForEachGroup(kjt, rows, cols, [&](const EmbeddingTables& t, const KeyedJaggedTensor& k,
                                           const std::vector<int64_t>& r, const std::vector<int64_t>& c) {
    if (&k == &kjt) return t.IdWeightGradient(k, r, c, grad, out);
    std::vector<float> part(k.values().size());
    SR_RETURN_IF_ERROR(t.IdWeightGradient(k, r, c, grad, part));
    const auto from = k.offset_per_key();
    for (int key = 0; key < k.num_keys(); ++key) {
      const int index = kjt.KeyIndex(k.keys()[static_cast<size_t>(key)]);
      std::copy(part.begin() + from[static_cast<size_t>(key)], part.begin() + from[static_cast<size_t>(key) + 1],
                out.begin() + at[static_cast<size_t>(index)]);
    }
    return Status::Ok();
  });
}

StatusOr<Tensor> RankTables::ReadWeights(size_t p) const {
  return groups_[where_[p].group].tables.ReadWeights(where_[p].table);
}
StatusOr<Tensor> RankTables::ReadState(size_t p) const {
  return groups_[where_[p].group].tables.ReadState(where_[p].table);
}
Status RankTables::WriteWeights(size_t p, const Tensor& weights) const {
  return groups_[where_[p].group].tables.WriteWeights(where_[p].table, weights);
}
Status RankTables::WriteState(size_t p, const Tensor& state) const {
  return groups_[where_[p].group].tables.WriteState(where_[p].table, state);
}
Status RankTables::ReadRows(size_t p, std::span<const int64_t> local_rows, Tensor* weights, Tensor* state) const {
  return groups_[where_[p].group].tables.ReadRows(where_[p].table, local_rows, weights, state);
}
Status RankTables::WriteRows(size_t p, std::span<const int64_t> local_rows, const Tensor* weights,
                             const Tensor* state) const {
  return groups_[where_[p].group].tables.WriteRows(where_[p].table, local_rows, weights, state);
}
StatusOr<sr_kernel_table_info> RankTables::Info(size_t p) const {
  return groups_[where_[p].group].tables.Info(where_[p].table);
}
Status RankTables::ResetRows(size_t p, std::span<const int64_t> local_rows) const {
  const EmbeddingTables& tables = groups_[where_[p].group].tables;
  SR_RETURN_IF_ERROR(tables.ResetRows(where_[p].table, local_rows));
  // The kernel re-draws a row at its place in the piece (origin + local
  // row); a piece whose rows a sharder chose stands for other global rows.
  // A cached piece's cache draws at the global rows already.
  if (pieces_[p].global_rows.empty() || pieces_[p].cache || local_rows.empty()) return Status::Ok();
  return WriteInitialWeights(p, local_rows, tables.options().init_seed);
}

Status RankTables::WriteInitialWeights(size_t p, std::span<const int64_t> local_rows, uint64_t seed) const {
  const TablePiece& piece = pieces_[p];
  const int64_t n = static_cast<int64_t>(local_rows.size()), cols = piece.config.embedding_dim;
  Tensor w = Tensor::Empty(dtype::kFloat32, {n, cols});
  float* out = w.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t global = piece.global_rows[static_cast<size_t>(local_rows[static_cast<size_t>(i)])];
    for (int64_t c = 0; c < cols; ++c) {
      out[i * cols + c] = sdk::InitialWeight(seed, global, piece.origin.col + c, piece.config.init_min(),
                                             piece.config.init_max());
    }
  }
  SR_ASSIGN_OR_RETURN(Tensor typed, EncodeWeights(w, piece.config, piece.config.name));
  return groups_[where_[p].group].tables.WriteRowWeights(where_[p].table, local_rows, typed);
}

}  // namespace shardrec
