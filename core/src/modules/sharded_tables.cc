// ShardedTables (sharded_tables.h).
#include "shardrec/core/modules/sharded_tables.h"
#include "shardrec/core/modules/table_weights.h"

#include "shardrec/core/device/cuda_runtime.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "shardrec/core/dist/kjt_all_to_all.h"
#include "shardrec/core/dist/shard_input_dist.h"
#include "shardrec/core/io/names.h"
#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec {

namespace {
std::string KernelOf(const ShardedTable& t, const EmbeddingModuleOptions& options) {
  const std::string& k = t.sharding.compute_kernel;
  return k.empty() || k == kFusedKernel || IsCachedKernel(k) ? options.kernel : k;
}

// This rank's shards of every sharded table, in layout slot order.
StatusOr<std::vector<TablePiece>> ShardPieces(const ShardLayout& layout, int rank,
                                              const EmbeddingModuleOptions& options, bool pooled) {
  std::vector<TablePiece> pieces;
  const auto& tables = layout.plan().tables;
  for (size_t t = 0; t < tables.size(); ++t) {
    const ShardedTable& table = tables[t];
    if (table.placement.replicated) continue;
    const auto& routing = layout.routing(static_cast<int32_t>(t));
    for (size_t s = 0; s < table.placement.shards.size(); ++s) {
      const sr_shard& shard = table.placement.shards[s];
      if (shard.rank != rank || shard.num_rows == 0 || shard.num_cols == 0) continue;
      TablePiece p;
      p.config = table.config;
      p.config.name = fmt::format("{}@{}", table.config.name, s);
      p.config.num_embeddings = shard.num_rows;
      p.config.embedding_dim = shard.num_cols;
      p.config.weight_init_min = table.config.init_min();
      p.config.weight_init_max = table.config.init_max();
      p.config.pooling = pooled ? PoolingType::kSum : PoolingType::kNone;
      p.config.feature_names.clear();
      for (const auto& f : table.config.feature_names) p.config.feature_names.push_back(fmt::format("{}@{}", f, s));
      const int32_t block = layout.BlockOfShard(static_cast<int32_t>(t), static_cast<int32_t>(s));
      if (routing.router != nullptr) {
        p.global_rows = routing.block_global_rows[static_cast<size_t>(block)];
        p.origin = {0, shard.col_offset};
      } else {
        p.origin = {shard.row_offset, shard.col_offset};
      }
      p.kernel = KernelOf(table, options);
      if (IsCachedKernel(table.sharding.compute_kernel)) {
        if (options.cache_dir.empty()) {
          return InvalidArgumentError("table '" + table.config.name + "' is cached (fused_ssd_caching) but no cache "
                                      "directory was given for its row file (--cache-dir)");
        }
        if (!table.sharding.cache_params || !(table.sharding.cache_params->load_factor > 0)) {
          return InternalError("table '" + table.config.name + "': the plan gives its cache no load factor");
        }
        SR_ASSIGN_OR_RETURN(auto file, PathUnder(options.cache_dir, "table", p.config.name, ".rows"));
        p.cache = TableCacheSpec{*table.sharding.cache_params, std::move(file), {}};
      }
      pieces.push_back(std::move(p));
    }
  }
  return pieces;
}

std::vector<TablePiece> ReplicaPieces(const ShardLayout& layout, const EmbeddingModuleOptions& options, bool pooled) {
  std::vector<TablePiece> pieces;
  for (const ShardedTable& table : layout.plan().tables) {
    if (!table.placement.replicated) continue;
    TablePiece p;
    p.config = table.config;
    if (!pooled) p.config.pooling = PoolingType::kNone;
    p.kernel = KernelOf(table, options);
    pieces.push_back(std::move(p));
  }
  return pieces;
}
}  // namespace

ShardedTables::ShardedTables(ShardLayout layout, const ProcessGroup& group, RankTables shards, RankTables replicas,
                             EmbeddingModuleOptions options, bool with_weights)
    : layout_(std::move(layout)),
      group_(&group),
      shards_(std::move(shards)),
      replicas_(std::move(replicas)),
      options_(std::move(options)),
      with_weights_(with_weights) {
  for (size_t f = 0; f < layout_.features().size(); ++f) {
    feature_names_.push_back(layout_.features()[f].name);
    served_.insert(layout_.features()[f].name);
    if (layout_.replicated(layout_.features()[f].table)) replica_features_.push_back(static_cast<int32_t>(f));
  }
}

StatusOr<ShardedTables> ShardedTables::Create(const PluginRegistry& registry, const ProcessGroup& group,
                                              const ShardingPlan& plan, const EmbeddingModuleOptions& options,
                                              bool pooled) {
  if (plan.world_size != group.world_size()) {
    return InvalidArgumentError(fmt::format("the plan is for {} ranks, the process group has {}", plan.world_size,
                                            group.world_size()));
  }
  for (const ShardedTable& t : plan.tables) {
    SR_RETURN_IF_ERROR(CheckQuantizedRowsWhole(t.config, t.placement.shards, t.sharding.sharding_type));
  }
  SR_ASSIGN_OR_RETURN(ShardLayout layout, ShardLayout::Create(registry, plan));
  // A GPU kernel of this rank runs on the rank's GPU unless one was named.
  EmbeddingModuleOptions rank_options = options;
  if (rank_options.device < 0) rank_options.device = device::DeviceForRank(group.rank());
  SR_ASSIGN_OR_RETURN(auto pieces, ShardPieces(layout, group.rank(), options, pooled));
  SR_ASSIGN_OR_RETURN(RankTables shards, RankTables::Create(registry, std::move(pieces), rank_options));
  SR_ASSIGN_OR_RETURN(RankTables replicas,
                      RankTables::Create(registry, ReplicaPieces(layout, options, pooled), rank_options));
  bool with_weights = false;
  for (const auto& t : plan.tables) with_weights |= pooled && t.config.is_weighted && !t.placement.replicated;
  return ShardedTables(std::move(layout), group, std::move(shards), std::move(replicas), options, with_weights);
}

Status ShardedTables::Prefetch(const DistributedInput& in) const {
  if (in.rows_pending || !layout_.any_sharded()) return Status::Ok();
  return shards_.Prefetch(in.received);
}

Status ShardedTables::Flush() const {
  SR_RETURN_IF_ERROR(shards_.Flush());
  return replicas_.Flush();
}

StatusOr<DistributedInput> ShardedTables::DistributeInput(const KeyedJaggedTensor& input, const ProcessGroup* via,
                                                          const IdRoutes* routes) const {
  const ProcessGroup& group = via != nullptr ? *via : *group_;
  if (group.world_size() != group_->world_size() || group.rank() != group_->rank()) {
    return InvalidArgumentError(fmt::format("input dist: the group to send on (rank {} of {}) is not the module's "
                                            "(rank {} of {})",
                                            group.rank(), group.world_size(), group_->rank(), group_->world_size()));
  }
  for (const auto& key : input.keys()) {
    if (served_.count(key) == 0) {
      return Status(SR_NOT_FOUND, fmt::format("feature '{}' has no table (the tables serve: {})", key,
                                              fmt::join(feature_names_, ", ")));
    }
  }
  DistributedInput d;
  SR_ASSIGN_OR_RETURN(d.local, input.Select(feature_names_));
  if (with_weights_ && !d.local.has_weights()) {
    for (const auto& t : layout_.plan().tables) {
      if (t.config.is_weighted && !t.placement.replicated) {
        return InvalidArgumentError("table '" + t.config.name + "' is weighted but the input has no weights");
      }
    }
  }
  if (layout_.any_sharded()) {
    SR_ASSIGN_OR_RETURN(auto routed, RouteToShards(layout_, d.local, options_.bounds_check, with_weights_, routes));
    if (routes != nullptr) {
      for (const auto& f : layout_.features()) {
        const auto t = static_cast<size_t>(f.table);
        d.rows_pending = d.rows_pending || (t < routes->size() && (*routes)[t] && !layout_.replicated(f.table));
      }
    }
    SR_ASSIGN_OR_RETURN(d.received, KjtAllToAll(group, routed.kjt, routed.splits));
    // The bytes the two phases sent to other ranks: per key its sizes,
    // then its lengths, ids and weights.
    const auto ids_per_key = routed.kjt.length_per_key();
    int64_t key = 0;
    for (int r = 0; r < group.world_size(); ++r) {
      for (int64_t k = 0; k < routed.splits[static_cast<size_t>(r)]; ++k, ++key) {
        if (r == group.rank()) continue;
        const int64_t ids = ids_per_key[static_cast<size_t>(key)];
        d.bytes_sent += 3 * 8 + routed.kjt.stride_per_key()[static_cast<size_t>(key)] * 8 + ids * 8 +
                        (routed.kjt.has_weights() ? ids * 4 : 0);
      }
    }
    d.origin = std::move(routed.origin);
    d.sent_per_key = routed.kjt.length_per_key();
    d.invalid = routed.invalid;
  }
  if (!replica_features_.empty()) {
    std::vector<std::string> names;
    for (int32_t f : replica_features_) names.push_back(feature_names_[static_cast<size_t>(f)]);
    SR_ASSIGN_OR_RETURN(d.replica_local, d.local.Select(names));
  }
  return d;
}

StatusOr<KeyedJaggedTensor> ShardedTables::GatherReplicaInput(const KeyedJaggedTensor& replica_local) const {
  const int world = group_->world_size();
  std::vector<std::string> keys;
  std::vector<int64_t> values, lengths, strides;
  std::optional<std::vector<float>> weights;
  if (replica_local.has_weights()) weights.emplace();
  for (int r = 0; r < world; ++r) {
    keys.insert(keys.end(), replica_local.keys().begin(), replica_local.keys().end());
    values.insert(values.end(), replica_local.values().begin(), replica_local.values().end());
    lengths.insert(lengths.end(), replica_local.lengths().begin(), replica_local.lengths().end());
    strides.insert(strides.end(), replica_local.stride_per_key().begin(), replica_local.stride_per_key().end());
    if (weights) weights->insert(weights->end(), replica_local.weights()->begin(), replica_local.weights()->end());
  }
  SR_ASSIGN_OR_RETURN(auto send, KeyedJaggedTensor::FromLengthsWithRepeatedKeys(
                                     std::move(keys), std::move(values), std::move(lengths), std::move(weights),
                                     std::move(strides)));
  return KjtAllToAll(*group_, send, std::vector<int64_t>(static_cast<size_t>(world), replica_local.num_keys()));
}

StatusOr<int64_t> ShardedTables::BytesOnRank() const {
  SR_ASSIGN_OR_RETURN(int64_t a, shards_.Bytes());
  SR_ASSIGN_OR_RETURN(int64_t b, replicas_.Bytes());
  return a + b;
}

StatusOr<int32_t> ShardedTables::TableIndex(const std::string& name) const {
  const auto& tables = layout_.plan().tables;
  std::vector<std::string> names;
  for (size_t i = 0; i < tables.size(); ++i) {
    if (tables[i].config.name == name) return static_cast<int32_t>(i);
    names.push_back(tables[i].config.name);
  }
  return Status(SR_NOT_FOUND, fmt::format("no table '{}' (tables: {})", name, fmt::join(names, ", ")));
}

namespace {
// Where element j of local state row i of a shard lands in the whole
// table's state row: element-wise state (Adagrad, Adam's m then v) keeps
// its column groups; row-wise Adagrad's single value is per row (the first
// column block's stands for the table).
int64_t StateColumn(int32_t optimizer, const sr_shard& sh, int64_t j, int64_t dim) {
  if (optimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD) return sh.col_offset == 0 ? 0 : -1;
  return (j / sh.num_cols) * dim + sh.col_offset + j % sh.num_cols;
}
}  // namespace

Status ShardedTables::ResetRows(const std::string& name, std::span<const int64_t> rows) const {
  if (rows.empty()) return Status::Ok();
  SR_ASSIGN_OR_RETURN(const int32_t t, TableIndex(name));
  const ShardedTable& table = layout_.plan().tables[static_cast<size_t>(t)];
  for (int64_t r : rows) {
    if (r < 0 || r >= table.config.num_embeddings) {
      return InvalidArgumentError(fmt::format("reset of table '{}': row {} is outside [0, {})", name, r,
                                              table.config.num_embeddings));
    }
  }
  if (table.placement.replicated) {
    size_t p = 0;
    while (replicas_.piece(p).config.name != name) ++p;
    return replicas_.ResetRows(p, rows);
  }
  std::vector<int32_t> block(rows.size());
  std::vector<int64_t> local(rows.size());
  SR_RETURN_IF_ERROR(layout_.Route(t, rows, block.data(), local.data()));
  size_t piece = 0;
  const auto& shards = table.placement.shards;
  std::vector<int64_t> mine;
  for (size_t s = 0; s < shards.size(); ++s) {
    const sr_shard& sh = shards[s];
    if (sh.rank != group_->rank() || sh.num_rows == 0 || sh.num_cols == 0) continue;
    const std::string key = fmt::format("{}@{}", name, s);
    while (shards_.piece(piece).config.name != key) ++piece;
    const int32_t b = layout_.BlockOfShard(t, static_cast<int32_t>(s));
    mine.clear();
    for (size_t i = 0; i < rows.size(); ++i) {
      if (block[i] == b) mine.push_back(local[i]);
    }
    SR_RETURN_IF_ERROR(shards_.ResetRows(piece, mine));
  }
  return Status::Ok();
}

Status ShardedTables::WriteTable(const std::string& name, const TableContents& contents) const {
  SR_ASSIGN_OR_RETURN(const int32_t t, TableIndex(name));
  const ShardedTable& table = layout_.plan().tables[static_cast<size_t>(t)];
  const int64_t rows = table.config.num_embeddings, dim = table.config.embedding_dim;
  const int32_t optimizer = options_.optimizer.optimizer;
  const int64_t state_dim = sdk::StateDim(optimizer, dim);
  SR_RETURN_IF_ERROR(ExpectTensor(contents.weights, "weights of table '" + name + "'", dtype::kFloat32, 2));
  if (contents.weights.size(0) != rows || contents.weights.size(1) != dim) {
    return InvalidArgumentError(fmt::format("weights of table '{}': expected [{}, {}], got {}", name, rows, dim,
                                            ShapeString(contents.weights.shape())));
  }
  const bool with_state = contents.state.numel() > 0 && state_dim > 0;
  if (with_state && (contents.state.ndim() != 2 || contents.state.size(0) != rows || contents.state.size(1) != state_dim)) {
    return InvalidArgumentError(fmt::format("optimizer state of table '{}': expected [{}, {}], got {}", name, rows,
                                            state_dim, ShapeString(contents.state.shape())));
  }
  if (table.placement.replicated) {
    size_t p = 0;
    while (replicas_.piece(p).config.name != name) ++p;
    SR_ASSIGN_OR_RETURN(Tensor typed, EncodeWeights(contents.weights, replicas_.piece(p).config, name));
    SR_RETURN_IF_ERROR(replicas_.WriteWeights(p, typed));
    return with_state ? replicas_.WriteState(p, contents.state) : Status::Ok();
  }
  const float* W = contents.weights.data<float>();
  const float* S = with_state ? contents.state.data<float>() : nullptr;
  const auto& shards = table.placement.shards;
  // This rank's shards of the table, each in its stored form, all encoded
  // before any is written: a value a quantized row cannot hold leaves the
  // table as it was.
  struct Part {
    size_t shard, piece;
    Tensor typed;
  };
  std::vector<Part> parts;
  for (size_t s = 0, piece = 0; s < shards.size(); ++s) {
    const sr_shard& sh = shards[s];
    if (sh.rank != group_->rank() || sh.num_rows == 0 || sh.num_cols == 0) continue;
    const std::string key = fmt::format("{}@{}", name, s);
    while (shards_.piece(piece).config.name != key) ++piece;
    const int32_t block = layout_.BlockOfShard(t, static_cast<int32_t>(s));
    Tensor w = Tensor::Empty(dtype::kFloat32, {sh.num_rows, sh.num_cols});
    for (int64_t i = 0; i < sh.num_rows; ++i) {
      const int64_t g = layout_.GlobalRow(t, block, i);
      std::memcpy(w.data<float>() + i * sh.num_cols, W + g * dim + sh.col_offset,
                  static_cast<size_t>(sh.num_cols) * sizeof(float));
    }
    SR_ASSIGN_OR_RETURN(Tensor typed, EncodeWeights(w, shards_.piece(piece).config, key));
    parts.push_back({s, piece, std::move(typed)});
  }
  for (const Part& part : parts) {
    const size_t piece = part.piece;
    const sr_shard& sh = shards[part.shard];
    const int32_t block = layout_.BlockOfShard(t, static_cast<int32_t>(part.shard));
    SR_RETURN_IF_ERROR(shards_.WriteWeights(piece, part.typed));
    if (!with_state) continue;
    const int64_t local_state = sdk::StateDim(optimizer, sh.num_cols);
    Tensor st = Tensor::Empty(dtype::kFloat32, {sh.num_rows, local_state});
    for (int64_t i = 0; i < sh.num_rows; ++i) {
      const int64_t g = layout_.GlobalRow(t, block, i);
      for (int64_t j = 0; j < local_state; ++j) {
        const int64_t c = StateColumn(optimizer, sh, j, dim);
        st.data<float>()[i * local_state + j] = S[g * state_dim + std::max<int64_t>(c, 0)];
      }
    }
    SR_RETURN_IF_ERROR(shards_.WriteState(piece, st));
  }
  return Status::Ok();
}

StatusOr<TableContents> ShardedTables::ReadTable(const std::string& name) const {
  SR_ASSIGN_OR_RETURN(const int32_t t, TableIndex(name));
  const auto& tables = layout_.plan().tables;
  const ShardedTable& table = tables[static_cast<size_t>(t)];
  const int64_t rows = table.config.num_embeddings, dim = table.config.embedding_dim;
  const int32_t optimizer = options_.optimizer.optimizer;
  TableContents out;
  if (table.placement.replicated) {
    size_t p = 0;
    while (replicas_.piece(p).config.name != name) ++p;
    SR_ASSIGN_OR_RETURN(Tensor w, replicas_.ReadWeights(p));
    SR_ASSIGN_OR_RETURN(out.weights, DecodeWeights(w, replicas_.piece(p).config, "table '" + name + "'"));
    SR_ASSIGN_OR_RETURN(out.state, replicas_.ReadState(p));
    return out;
  }
  // Every rank packs its shards of the table (shard order): weights, then state.
  const int world = group_->world_size(), me = group_->rank();
  const auto& shards = table.placement.shards;
  auto on = [&](const sr_shard& s, int r) { return s.rank == r && s.num_rows > 0 && s.num_cols > 0; };
  std::vector<int64_t> counts(static_cast<size_t>(world), 0);
  for (const sr_shard& s : shards) {
    if (on(s, s.rank)) counts[static_cast<size_t>(s.rank)] += s.num_rows * (s.num_cols + sdk::StateDim(optimizer, s.num_cols));
  }
  std::vector<float> send;
  send.reserve(static_cast<size_t>(counts[static_cast<size_t>(me)]));
  size_t piece = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    if (!on(shards[s], me)) continue;
    const std::string key = fmt::format("{}@{}", name, s);
    while (shards_.piece(piece).config.name != key) ++piece;
    SR_ASSIGN_OR_RETURN(Tensor w, shards_.ReadWeights(piece));
    SR_ASSIGN_OR_RETURN(Tensor wf, DecodeWeights(w, shards_.piece(piece).config, key));
    SR_ASSIGN_OR_RETURN(Tensor st, shards_.ReadState(piece));
    send.insert(send.end(), wf.data<float>(), wf.data<float>() + wf.numel());
    send.insert(send.end(), st.data<float>(), st.data<float>() + st.numel());
  }
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor recv = Tensor::Empty(dtype::kFloat32, {total});
  SR_RETURN_IF_ERROR(group_->AllGatherV(Tensor::FromVector(send), &recv, counts).WithContext("reading table '" + name + "'"));

  const int64_t state_dim = sdk::StateDim(optimizer, dim);
  out.weights = Tensor::Zeros(dtype::kFloat32, {rows, dim});
  out.state = Tensor::Zeros(dtype::kFloat32, {rows, state_dim});
  float* W = out.weights.data<float>();
  float* S = out.state.data<float>();
  const float* src = recv.data<float>();
  for (int r = 0; r < world; ++r) {
    for (size_t s = 0; s < shards.size(); ++s) {
      const sr_shard& sh = shards[s];
      if (!on(sh, r)) continue;
      const int32_t block = layout_.BlockOfShard(t, static_cast<int32_t>(s));
      const int64_t local_state = sdk::StateDim(optimizer, sh.num_cols);
      for (int64_t i = 0; i < sh.num_rows; ++i) {
        const int64_t g = layout_.GlobalRow(t, block, i);
        std::memcpy(W + g * dim + sh.col_offset, src + i * sh.num_cols, static_cast<size_t>(sh.num_cols) * sizeof(float));
      }
      src += sh.num_rows * sh.num_cols;
      for (int64_t i = 0; i < sh.num_rows && local_state > 0; ++i) {
        const int64_t g = layout_.GlobalRow(t, block, i);
        for (int64_t j = 0; j < local_state; ++j) {
          const int64_t c = StateColumn(optimizer, sh, j, dim);
          if (c >= 0) S[g * state_dim + c] = src[i * local_state + j];
        }
      }
      src += sh.num_rows * local_state;
    }
  }
  return out;
}

}  // namespace shardrec
