// Synthetic id batches for benchmarks: `count` batches of `batch` bags with
// exactly `pooling` ids each, drawn uniformly or from a bounded Zipf(alpha)
// whose ranks are scattered over the table (so hot rows are not adjacent,
// as in real traffic). Batches are cycled by the timed loops so that one
// batch's ids are not still in cache when it comes round again.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec::bench {

struct IdBatch {
  std::vector<int64_t> offsets;  // [batch + 1]
  std::vector<int64_t> ids;      // [batch * pooling]
  std::vector<float> weights;    // [batch * pooling]
};

// "uniform" or "zipf:ALPHA" (ALPHA > 0).
struct IdDistribution {
  bool zipf = false;
  double alpha = 0;
  static StatusOr<IdDistribution> Parse(const std::string& text);
  std::string ToString() const;
};

std::vector<IdBatch> MakeIdBatches(int64_t rows, int64_t batch, int64_t pooling, const IdDistribution& dist,
                                   uint64_t seed, int count);

}  // namespace shardrec::bench
