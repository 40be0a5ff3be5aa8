// Synthetic training data for `shardrec train`: tables from a short spec,
// and batches and output gradients that are pure functions of the seed, the
// step and the global sample index, so any rank (and the --verify
// reference) can make any rank's batch without communication, and a step's
// global batch is the same for every split of it into ranks: a run resumed
// from a checkpoint under another world size (same global batch) continues
// the same sequence of samples.
//
// Tables spec: comma-separated items [COUNTx]ROWSxDIM[:sum|mean]; table i
// is "t<i>" with one feature "f<i>". E.g. "4x100000x64,2x10000x16:mean".
// Ids: "uniform", or "zipf:ALPHA" (id k drawn with probability
// proportional to 1/(k+1)^ALPHA, so small ids are hot). Bag lengths are
// uniform in [0, 2P] for a pooling factor P (mean P); weights of weighted
// tables uniform in [0.5, 1.5).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"
#include "shardrec/core/tensor/tensor.h"
#include "zipf_ids.h"

namespace shardrec::cli {

// A tables file (if `spec` names an existing file) or a spec.
StatusOr<std::vector<EmbeddingTableConfig>> TablesFromFileOrSpec(const std::string& spec);
StatusOr<std::vector<EmbeddingTableConfig>> ParseTablesSpec(const std::string& spec);

class SyntheticData {
 public:
  // ids: "uniform" | "zipf:ALPHA"; pooling_factors: one for all features or one per feature.
  // raw_id_space: per table, 0 for ids that are rows, or N for raw ids: the
  // k-th of N distinct 64-bit values (scrambled, so managed collision sees
  // arbitrary ids), with k drawn as above from [0, N). hashed: per table
  // (or empty: none), fold that table's raw ids into its rows (raw id mod
  // rows): how a table without managed collision meets an id space larger
  // than itself, the baseline that managed collision's cost is measured on.
  static StatusOr<SyntheticData> Create(std::vector<EmbeddingTableConfig> tables, const std::string& ids,
                                        std::vector<double> pooling_factors, uint64_t seed,
                                        std::vector<int64_t> raw_id_space = {}, std::vector<uint8_t> hashed = {});

  // Rank `rank`'s batch at `step`: every feature, `batch` samples (global
  // samples [rank * batch, (rank + 1) * batch) of the step).
  KeyedJaggedTensor Batch(int rank, int64_t step, int64_t batch) const;
  // Global samples [first, first + count) of `step`.
  KeyedJaggedTensor Samples(int64_t step, int64_t first, int64_t count) const;
  // Every rank's batch, samples concatenated in rank order (the unsharded run's).
  KeyedJaggedTensor GlobalBatch(int world, int64_t step, int64_t batch) const;
  // Rows [first, first + rows) of the step's output gradient, [rows, width].
  Tensor Gradient(int64_t first, int64_t rows, int64_t width, int64_t step) const;
  // Dense features of global samples [first, first + rows) of `step`:
  // [rows, n], each uniform in [0, 3) (the range of Criteo's log(1 + x)).
  Tensor DenseFeatures(int64_t step, int64_t first, int64_t rows, int64_t n) const;
  // Labels (0 or 1) of `batch` (global samples from `first` of `step`,
  // with `dense` their features), drawn from a planted logistic model:
  // P(1) = sigmoid(sum_j c_j (x_j - 1.5) + sum_f s(first id of bag f)),
  // c_j and s(id) = +-0.5 by a hash of the seed, so the model can learn.
  Tensor Labels(const KeyedJaggedTensor& batch, const Tensor& dense, int64_t step, int64_t first) const;
  std::string Describe() const;  // "uniform ids, pooling factor 8"

 private:
  SyntheticData() = default;
  std::vector<EmbeddingTableConfig> tables_;
  std::vector<double> pooling_;          // per feature
  std::vector<int32_t> feature_table_;   // per feature
  std::vector<std::string> features_;
  double zipf_alpha_ = 0;                // 0: uniform
  std::vector<ZipfIds> zipf_;            // per table, zipf only
  std::vector<int64_t> space_;            // per table: ids drawn from [0, space)
  std::vector<uint8_t> raw_;              // per table: scramble into raw 64-bit ids
  std::vector<uint8_t> hashed_;           // per table: then fold them into the rows
  uint64_t seed_ = 0;
  std::string ids_;
};

}  // namespace shardrec::cli
