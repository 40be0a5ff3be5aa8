// CacheStatistics (the seeds' torchrec CacheStatistics), computed from a
// recorded id stream: how hard a table's lookups are to cache, whatever
// the cache size, and the miss rate to expect at a given load factor.
//
// Lookups are counted as the seeds count them: the distinct ids of each
// training batch (an id repeated within a batch is looked up once). The
// expected miss rate is that of a fully associative LRU cache of clf x rows
// rows, exact for the stream (Mattson's stack distances): a lookup misses
// when more than that many other distinct ids were looked up since its
// last lookup, or when it is the id's first. The seeds' endpoints hold:
// clf 0 misses everything (1.0) and clf 1 holds the whole table, every row
// in place (0.0). A set-associative cache (cache_directory.h) misses a
// little more: its sets fill unevenly.
//
//   auto stats = CacheStatistics::FromStream(ids, rows, /*batch=*/65536);
//   stats->expected_miss_rate(0.2);  stats->cacheability();
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec {

class CacheStatistics {
 public:
  // ids: rows of a `rows`-row table in lookup order; batch: ids per
  // training batch (the last may be short).
  static StatusOr<CacheStatistics> FromStream(std::span<const int64_t> ids, int64_t rows, int64_t batch);

  // Distinct ids per batch, the mean over batches.
  double expected_lookups() const;
  // clf in [0, 1] (outside: clamped).
  double expected_miss_rate(double clf) const;
  // The mean of expected_miss_rate over clf in [0, 1]: 0 when everything
  // hits at any size, 1 when nothing ever does.
  double cacheability() const;

  int64_t lookups() const { return lookups_; }  // distinct per batch, summed
  int64_t rows() const { return rows_; }

 private:
  CacheStatistics() = default;
  int64_t rows_ = 0, lookups_ = 0, batches_ = 0;
  int64_t first_ = 0;  // first lookups of an id
  // reuses_at_least_[d]: re-lookups with at least d other distinct ids
  // between (d in [0, rows]).
  std::vector<int64_t> reuses_at_least_;
};

}  // namespace shardrec
