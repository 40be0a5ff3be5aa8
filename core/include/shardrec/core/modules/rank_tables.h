// The tables one rank holds for a sharded collection: "pieces" (its shards
// of sharded tables, or whole replicas of data-parallel ones), batched into
// one EmbeddingTables per compute kernel, so a plan may give each table its
// own kernel. Each piece starts with the unsharded table's values at its
// global rows and columns. Thread-safety: as EmbeddingTables.
#pragma once

#include <string>
#include <vector>

#include "shardrec/core/modules/embedding_tables.h"

namespace shardrec {

struct TablePiece {
  EmbeddingTableConfig config;  // local rows x cols; feature_names: the keys it is looked up under
  TableOrigin origin;           // where local (0, 0) sits in the full table
  // Non-empty when a sharder routes ids itself: local row i is global row
  // global_rows[i] (initial weights are drawn there).
  std::vector<int64_t> global_rows;
  std::string kernel;
  // Set when the plan caches the table (fused_ssd_caching): the piece's
  // rows live on this file, a share of them in RAM (table_cache.h).
  std::optional<TableCacheSpec> cache;
};

class RankTables {
 public:
  // base: seed, optimizer, bounds check; base.kernel_options go to the
  // pieces whose kernel is base.kernel.
  static StatusOr<RankTables> Create(const PluginRegistry& registry, std::vector<TablePiece> pieces,
                                      const EmbeddingModuleOptions& base);

  size_t size() const { return pieces_.size(); }
  const TablePiece& piece(size_t p) const { return pieces_[p]; }
  // Every piece's features in piece order: the keys Forward expects.
  const std::vector<std::string>& keys() const { return keys_; }
  // Device bytes of weights and optimizer state (a cached piece's cache).
  StatusOr<int64_t> Bytes() const;
  // A cached piece's cache, else null.
  const TableCache* cache(size_t piece) const;
  // Every cached piece's flush() / purge() (EmbeddingTables::Flush).
  Status Flush() const;
  Status Purge() const;
  // EmbeddingTables::Prefetch over every group; `kjt` has keys() in order.
  Status Prefetch(const KeyedJaggedTensor& kjt) const;

  // `kjt` has keys() in order; rows/cols per key place the results (see
  // EmbeddingTables::Forward).
  Status Forward(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
                 Tensor& output, int64_t* invalid = nullptr) const;
  Status Backward(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
                  const Tensor& grad, int64_t iteration, double learning_rate) const;
  // EmbeddingTables::IdWeightGradient over every group: one float per
  // value of `kjt` into `out`.
  Status IdWeightGradient(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows,
                          const std::vector<int64_t>& cols, const Tensor& grad, std::span<float> out) const;

  StatusOr<Tensor> ReadWeights(size_t piece) const;  // in the table's dtype
  StatusOr<Tensor> ReadState(size_t piece) const;    // float32 [rows, state_dim]
  Status WriteWeights(size_t piece, const Tensor& weights) const;
  Status WriteState(size_t piece, const Tensor& state) const;
  // Local rows only (EmbeddingTables::ReadRows / WriteRows).
  Status ReadRows(size_t piece, std::span<const int64_t> local_rows, Tensor* weights, Tensor* state) const;
  Status WriteRows(size_t piece, std::span<const int64_t> local_rows, const Tensor* weights, const Tensor* state) const;
  // The kernel's view of a piece: dtypes, state_dim.
  StatusOr<sr_kernel_table_info> Info(size_t piece) const;
  // Re-initialises local rows as at creation: at the global rows they
  // stand for when a sharder chose them (global_rows), optimizer state zero.
  Status ResetRows(size_t piece, std::span<const int64_t> local_rows) const;

 private:
  struct Group {
    EmbeddingTables tables;
    std::vector<size_t> keys;  // indices into keys()
  };
  struct Where {
    size_t group;
    int32_t table;
  };
  RankTables() = default;
  // Writes the initial weights of `local_rows` drawn at their global rows.
  Status WriteInitialWeights(size_t piece, std::span<const int64_t> local_rows, uint64_t seed) const;
  template <class Call>
  Status ForEachGroup(const KeyedJaggedTensor& kjt, const std::vector<int64_t>& rows, const std::vector<int64_t>& cols,
                      Call&& call) const;

  std::vector<TablePiece> pieces_;
  std::vector<std::string> keys_;
  std::vector<Group> groups_;
  std::vector<Where> where_;
};

}  // namespace shardrec
