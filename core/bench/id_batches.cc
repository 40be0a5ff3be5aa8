// Synthetic id batches (see id_batches.h).
#include "id_batches.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "shardrec/sdk/init.hpp"

namespace shardrec::bench {

StatusOr<IdDistribution> IdDistribution::Parse(const std::string& text) {
  if (text == "uniform") return IdDistribution{};
  if (text.rfind("zipf:", 0) == 0) {
    try {
      const double alpha = std::stod(text.substr(5));
      if (alpha > 0) return IdDistribution{true, alpha};
    } catch (const std::exception&) {
    }
  }
  return InvalidArgumentError("--ids '" + text + "': expected uniform or zipf:ALPHA with ALPHA > 0 (e.g. zipf:1.05)");
}

std::string IdDistribution::ToString() const {
  if (!zipf) return "uniform";
  char buf[32];
  std::snprintf(buf, sizeof buf, "zipf:%g", alpha);
  return buf;
}

std::vector<IdBatch> MakeIdBatches(int64_t rows, int64_t batch, int64_t pooling, const IdDistribution& dist,
                                   uint64_t seed, int count) {
  std::mt19937_64 rng(seed);
  std::vector<double> cdf;
  if (dist.zipf) {
    cdf.resize(static_cast<size_t>(rows));
    double sum = 0;
    for (int64_t r = 0; r < rows; ++r) {
      sum += 1.0 / std::pow(static_cast<double>(r + 1), dist.alpha);
      cdf[static_cast<size_t>(r)] = sum;
    }
    for (double& c : cdf) c /= sum;
  }
  std::uniform_int_distribution<int64_t> uniform(0, rows - 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::uniform_real_distribution<float> weight(0.5f, 1.5f);
  std::vector<IdBatch> batches(static_cast<size_t>(count));
  for (auto& b : batches) {
    b.offsets.resize(static_cast<size_t>(batch) + 1);
    for (int64_t i = 0; i <= batch; ++i) b.offsets[static_cast<size_t>(i)] = i * pooling;
    b.ids.resize(static_cast<size_t>(batch * pooling));
    b.weights.resize(b.ids.size());
    for (size_t i = 0; i < b.ids.size(); ++i) {
      if (dist.zipf) {
        const auto rank = static_cast<uint64_t>(std::lower_bound(cdf.begin(), cdf.end(), unit(rng)) - cdf.begin());
        // Scatter ranks over the table: hot rows are not neighbours.
        b.ids[i] = static_cast<int64_t>(sdk::Mix64(rank ^ seed) % static_cast<uint64_t>(rows));
      } else {
        b.ids[i] = uniform(rng);
      }
      b.weights[i] = weight(rng);
    }
  }
  return batches;
}

}  // namespace shardrec::bench
