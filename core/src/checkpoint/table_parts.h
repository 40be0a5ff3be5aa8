// The rectangles of tables one rank holds, as checkpoint saving and loading
// see them: a table, its global rows (a range, or a list when a sharder
// placed the rows itself), a column range, and how to read and write rows
// of it. Made from a sharded collection (its shards and data-parallel
// replicas) or from an unsharded one (whole tables). Internal to
// core/src/checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "shardrec/core/modules/embedding_tables.h"
#include "shardrec/core/modules/sharded_tables.h"

namespace shardrec::checkpoint {

struct TablePart {
  const EmbeddingTableConfig* table = nullptr;  // the whole table's config
  int64_t row_begin = 0, rows = 0;  // global rows [row_begin, row_begin + rows) ...
  std::span<const int64_t> global_rows;  // ... unless set: local row i is global row global_rows[i] (the piece's)
  int64_t col_begin = 0, cols = 0;
  int64_t state_dim = 0;       // optimizer state values per local row
  DLDataType weight_dtype{};   // the kernel's
  int shard = -1;              // the plan's shard index (-1: a whole or replicated table)
  bool saved_here = true;      // replicas: only one rank writes them
  std::function<Status(std::span<const int64_t>, Tensor*, Tensor*)> read_rows;
  std::function<Status(std::span<const int64_t>, const Tensor*, const Tensor*)> write_rows;

  int64_t GlobalRow(int64_t local) const { return global_rows.empty() ? row_begin + local : global_rows[static_cast<size_t>(local)]; }
};

// Where each kind of optimizer-state file sits in the kernel's state row of
// a part `cols` wide: Adagrad's sum per column; row-wise Adagrad's one
// value; Adam's m then v, per column.
struct StateSlice {
  std::string kind;
  int64_t offset = 0;
  int64_t width = 0;
};
std::vector<StateSlice> StateSlices(int32_t optimizer, int64_t cols);

StatusOr<std::vector<TablePart>> PartsOf(const ShardedTables& tables);
StatusOr<std::vector<TablePart>> PartsOf(const EmbeddingTables& tables);

}  // namespace shardrec::checkpoint
