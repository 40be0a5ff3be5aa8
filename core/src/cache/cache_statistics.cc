// CacheStatistics (cache_statistics.h): one pass over the stream's
// per-batch distinct ids with a Fenwick tree over lookup times, in which
// each id's last lookup is marked; the marks after an id's previous
// lookup count the distinct ids looked up since (its stack distance).
#include "shardrec/core/cache/cache_statistics.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include <fmt/format.h>

namespace shardrec {

StatusOr<CacheStatistics> CacheStatistics::FromStream(std::span<const int64_t> ids, int64_t rows, int64_t batch) {
  if (rows <= 0 || batch <= 0) {
    return InvalidArgumentError(fmt::format("cache statistics: rows ({}) and batch ({}) must be positive", rows, batch));
  }
  // The lookups: each batch's distinct ids, in order of first appearance.
  std::vector<int64_t> lookups;
  lookups.reserve(ids.size());
  CacheStatistics s;
  s.rows_ = rows;
  std::unordered_set<int64_t> seen;
  for (size_t at = 0; at < ids.size(); at += static_cast<size_t>(batch)) {
    seen.clear();
    const size_t end = std::min(ids.size(), at + static_cast<size_t>(batch));
    for (size_t i = at; i < end; ++i) {
      if (ids[i] < 0 || ids[i] >= rows) {
        return InvalidArgumentError(fmt::format("cache statistics: id {} (position {}) is not a row of {}", ids[i], i,
                                                rows));
      }
      if (seen.insert(ids[i]).second) lookups.push_back(ids[i]);
    }
    ++s.batches_;
  }
  const auto n = static_cast<int64_t>(lookups.size());
  s.lookups_ = n;
  std::vector<int64_t> tree(static_cast<size_t>(n) + 1, 0);  // Fenwick over times 1..n
  auto add = [&](int64_t t, int64_t v) {
    for (; t <= n; t += t & -t) tree[static_cast<size_t>(t)] += v;
  };
  auto sum = [&](int64_t t) {  // marks at times 1..t
    int64_t r = 0;
    for (; t > 0; t -= t & -t) r += tree[static_cast<size_t>(t)];
    return r;
  };
  std::vector<int64_t> last(static_cast<size_t>(rows), 0), at_distance(static_cast<size_t>(rows) + 1, 0);
  for (int64_t t = 1; t <= n; ++t) {
    int64_t& prev = last[static_cast<size_t>(lookups[static_cast<size_t>(t - 1)])];
    if (prev == 0) {
      ++s.first_;
    } else {
      const int64_t distance = sum(t - 1) - sum(prev);  // distinct ids looked up since
      ++at_distance[static_cast<size_t>(std::min(distance, rows))];
      add(prev, -1);
    }
    add(t, 1);
    prev = t;
  }
  s.reuses_at_least_.assign(static_cast<size_t>(rows) + 2, 0);
  for (int64_t d = rows; d >= 0; --d) {
    s.reuses_at_least_[static_cast<size_t>(d)] = s.reuses_at_least_[static_cast<size_t>(d) + 1] +
                                                 at_distance[static_cast<size_t>(d)];
  }
  return s;
}

double CacheStatistics::expected_lookups() const {
  return batches_ > 0 ? static_cast<double>(lookups_) / static_cast<double>(batches_) : 0.0;
}

double CacheStatistics::expected_miss_rate(double clf) const {
  if (lookups_ == 0) return clf >= 1.0 ? 0.0 : 1.0;
  if (!(clf > 0.0)) return 1.0;  // no cache (NaN too)
  if (clf >= 1.0) return 0.0;    // the whole table cached
  // A cache of c rows holds an id whose stack distance is below c.
  const auto c = std::min(rows_, static_cast<int64_t>(std::floor(clf * static_cast<double>(rows_))));
  if (c == 0) return 1.0;
  const int64_t misses = first_ + reuses_at_least_[static_cast<size_t>(c)];
  return static_cast<double>(misses) / static_cast<double>(lookups_);
}

double CacheStatistics::cacheability() const {
  // The mean over clf of a step function: a fine midpoint rule.
  constexpr int kPoints = 1000;
  double total = 0;
  for (int i = 0; i < kPoints; ++i) total += expected_miss_rate((i + 0.5) / kPoints);
  return total / kPoints;
}

}  // namespace shardrec
