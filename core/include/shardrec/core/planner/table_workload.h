// What the planner knows of each table's traffic: ids per sample (the
// pooling factor, summed over the table's features) and how the lookups
// spread over its rows (a histogram over equal row ranges), given or
// measured from batches of data (`--stats-from`, or train's own synthetic
// batches). Row-wise sharding of a table whose hot ids sit in its first rows
// loads one rank with most lookups; the histogram lets the cost model see
// that.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"

namespace shardrec {

inline constexpr int kRowHistogramBuckets = 64;

struct TableWorkload {
  double pooling_factor = 1;           // mean ids per sample, over the table's features
  std::vector<double> row_histogram;   // kRowHistogramBuckets shares summing to 1; empty: uniform
  // The largest bucket's share over a uniform bucket's (1: no skew).
  double Skew() const;
  // The share of lookups that fall in rows [first, first + count) of a
  // table of `rows` rows (uniform inside each bucket).
  double ShareOfRows(int64_t first, int64_t count, int64_t rows) const;
};

// Counts the ids of every table's features in `batches` (a feature is the
// table's that lists it; unknown features are ignored). Per table: ids per
// sample and the row histogram; a table no batch mentions keeps
// `fallback_pooling` and uniform rows. Ids outside the table are ignored.
std::vector<TableWorkload> MeasureWorkload(const std::vector<EmbeddingTableConfig>& tables,
                                           const std::vector<KeyedJaggedTensor>& batches,
                                           double fallback_pooling = 1);

}  // namespace shardrec
