// Measured traffic per table (table_workload.h).
#include "shardrec/core/planner/table_workload.h"

#include <algorithm>
#include <map>

namespace shardrec {

double TableWorkload::Skew() const {
  if (row_histogram.empty()) return 1;
  return *std::max_element(row_histogram.begin(), row_histogram.end()) * static_cast<double>(row_histogram.size());
}

double TableWorkload::ShareOfRows(int64_t first, int64_t count, int64_t rows) const {
  if (rows <= 0 || count <= 0) return 0;
  if (row_histogram.empty()) return static_cast<double>(count) / static_cast<double>(rows);
  const double n = static_cast<double>(row_histogram.size());
  const double lo = static_cast<double>(first) / static_cast<double>(rows) * n;
  const double hi = static_cast<double>(first + count) / static_cast<double>(rows) * n;
  double share = 0;
  for (int64_t b = static_cast<int64_t>(lo); b < static_cast<int64_t>(row_histogram.size()) && static_cast<double>(b) < hi; ++b) {
    const double overlap = std::min(hi, static_cast<double>(b + 1)) - std::max(lo, static_cast<double>(b));
    if (overlap > 0) share += overlap * row_histogram[static_cast<size_t>(b)];
  }
  return share;
}

std::vector<TableWorkload> MeasureWorkload(const std::vector<EmbeddingTableConfig>& tables,
                                           const std::vector<KeyedJaggedTensor>& batches, double fallback_pooling) {
  std::map<std::string, size_t> table_of;
  for (size_t t = 0; t < tables.size(); ++t) {
    for (const auto& f : tables[t].feature_names) table_of[f] = t;
  }
  std::vector<std::vector<double>> counts(tables.size(), std::vector<double>(kRowHistogramBuckets, 0));
  std::vector<double> ids(tables.size(), 0), samples(tables.size(), 0);
  std::vector<int> features_seen(tables.size(), 0);
  for (const KeyedJaggedTensor& kjt : batches) {
    const auto offsets = kjt.offset_per_key();
    std::vector<bool> seen(tables.size(), false);
    for (int k = 0; k < kjt.num_keys(); ++k) {
      auto it = table_of.find(kjt.keys()[static_cast<size_t>(k)]);
      if (it == table_of.end()) continue;
      const size_t t = it->second;
      const int64_t rows = tables[t].num_embeddings;
      for (int64_t i = offsets[static_cast<size_t>(k)]; i < offsets[static_cast<size_t>(k) + 1]; ++i) {
        const int64_t id = kjt.values()[static_cast<size_t>(i)];
        if (id < 0 || id >= rows) continue;
        // In doubles: id * buckets overflows int64 for tables over 2^57 rows.
        const double bucket = static_cast<double>(id) / static_cast<double>(rows) * kRowHistogramBuckets;
        counts[t][static_cast<size_t>(std::min<double>(bucket, kRowHistogramBuckets - 1))] += 1;
        ids[t] += 1;
      }
      // Samples are counted once per table per batch (its features share them).
      if (!seen[t]) samples[t] += static_cast<double>(kjt.stride_per_key()[static_cast<size_t>(k)]);
      seen[t] = true;
    }
  }
  std::vector<TableWorkload> out(tables.size());
  for (size_t t = 0; t < tables.size(); ++t) {
    if (samples[t] == 0) {
      out[t].pooling_factor = fallback_pooling * static_cast<double>(std::max<size_t>(1, tables[t].feature_names.size()));
      continue;
    }
    out[t].pooling_factor = ids[t] / samples[t];
    if (ids[t] > 0) {
      out[t].row_histogram = counts[t];
      for (double& c : out[t].row_histogram) c /= ids[t];
    }
  }
  return out;
}

}  // namespace shardrec
