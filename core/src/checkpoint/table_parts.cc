// TablePart lists of sharded and unsharded collections (table_parts.h).
#include "table_parts.h"

#include <map>

#include <fmt/format.h>

namespace shardrec::checkpoint {

namespace {
// Reads and writes through `owner` (RankTables by piece, EmbeddingTables by
// table), which outlives the part.
template <class Owner, class Index>
void BindRows(TablePart& part, const Owner& owner, Index index) {
  part.read_rows = [&owner, index](std::span<const int64_t> rows, Tensor* w, Tensor* s) {
    return owner.ReadRows(index, rows, w, s);
  };
  part.write_rows = [&owner, index](std::span<const int64_t> rows, const Tensor* w, const Tensor* s) {
    return owner.WriteRows(index, rows, w, s);
  };
}

TablePart FromPiece(const RankTables& pieces, size_t p, const EmbeddingTableConfig& table,
                    const sr_kernel_table_info& info) {
  const TablePiece& piece = pieces.piece(p);
  TablePart part;
  part.table = &table;
  part.row_begin = piece.origin.row;
  part.rows = piece.config.num_embeddings;
  part.global_rows = piece.global_rows;
  part.col_begin = piece.origin.col;
  part.cols = piece.config.embedding_dim;
  part.state_dim = info.state_dim;
  part.weight_dtype = info.weight_dtype;
  BindRows(part, pieces, p);
  return part;
}
}  // namespace

std::vector<StateSlice> StateSlices(int32_t optimizer, int64_t cols) {
  switch (optimizer) {
    case SR_OPTIMIZER_ADAGRAD: return {{"adagrad.sum", 0, cols}};
    case SR_OPTIMIZER_ROWWISE_ADAGRAD: return {{"rowwise_adagrad.sum", 0, 1}};
    case SR_OPTIMIZER_ADAM: return {{"adam.m", 0, cols}, {"adam.v", cols, cols}};
    default: return {};
  }
}

StatusOr<std::vector<TablePart>> PartsOf(const ShardedTables& tables) {
  std::vector<TablePart> parts;
  const auto& plan = tables.layout().plan();
  const int me = tables.group().rank(), world = tables.group().world_size();
  std::map<std::string, size_t> shard_piece, replica_piece;
  for (size_t p = 0; p < tables.shards().size(); ++p) shard_piece[tables.shards().piece(p).config.name] = p;
  for (size_t p = 0; p < tables.replicas().size(); ++p) replica_piece[tables.replicas().piece(p).config.name] = p;
  for (size_t t = 0; t < plan.tables.size(); ++t) {
    const ShardedTable& table = plan.tables[t];
    if (table.placement.replicated) {
      auto it = replica_piece.find(table.config.name);
      if (it == replica_piece.end()) return InternalError("no replica of table '" + table.config.name + "' on this rank");
      SR_ASSIGN_OR_RETURN(auto info, tables.replicas().Info(it->second));
      TablePart part = FromPiece(tables.replicas(), it->second, table.config, info);
      part.saved_here = static_cast<int>(t % static_cast<size_t>(world)) == me;  // spread the writing
      parts.push_back(std::move(part));
      continue;
    }
    for (size_t s = 0; s < table.placement.shards.size(); ++s) {
      const sr_shard& sh = table.placement.shards[s];
      if (sh.rank != me || sh.num_rows == 0 || sh.num_cols == 0) continue;
      auto it = shard_piece.find(fmt::format("{}@{}", table.config.name, s));
      if (it == shard_piece.end()) return InternalError(fmt::format("no shard {} of table '{}' on this rank", s, table.config.name));
      SR_ASSIGN_OR_RETURN(auto info, tables.shards().Info(it->second));
      TablePart part = FromPiece(tables.shards(), it->second, table.config, info);
      part.shard = static_cast<int>(s);
      parts.push_back(std::move(part));
    }
  }
  return parts;
}

StatusOr<std::vector<TablePart>> PartsOf(const EmbeddingTables& tables) {
  std::vector<TablePart> parts;
  for (size_t t = 0; t < tables.configs().size(); ++t) {
    const auto table = static_cast<int32_t>(t);
    SR_ASSIGN_OR_RETURN(auto info, tables.Info(table));
    TablePart part;
    part.table = &tables.configs()[t];
    part.rows = part.table->num_embeddings;
    part.cols = part.table->embedding_dim;
    part.state_dim = info.state_dim;
    part.weight_dtype = info.weight_dtype;
    BindRows(part, tables, table);
    parts.push_back(std::move(part));
  }
  return parts;
}

}  // namespace shardrec::checkpoint
