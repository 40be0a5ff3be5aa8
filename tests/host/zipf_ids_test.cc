// ZipfIds (examples/shardrec/zipf_ids.h) against the definition it
// shortcuts: the first k with cdf[k] >= u, by std::lower_bound, for draws
// everywhere in [0, 1], at the cells' edges and at the cdf's own values.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "zipf_ids.h"

namespace shardrec::cli {
namespace {

std::vector<int64_t> Reference(const std::vector<double>& cdf, const std::vector<double>& draws) {
  std::vector<int64_t> ids;
  for (double u : draws) ids.push_back(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  return ids;
}

std::vector<double> HardDraws(const std::vector<double>& cdf, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<double> draws = {0.0, 1.0, std::nextafter(1.0, 0.0), 0x1p-60};
  for (int i = 0; i < 200000; ++i) draws.push_back(unit(rng));
  // The cells' edges, where u * cells rounds either way.
  for (size_t cells : {ZipfIds::kHeadCells, cdf.size()}) {
    for (size_t j = 0; j <= cells; j += std::max<size_t>(1, cells / 5000)) {
      const double at = static_cast<double>(j) / static_cast<double>(cells);
      draws.insert(draws.end(), {at, std::nextafter(at, 0.0), std::nextafter(at, 2.0)});
    }
  }
  // The cdf's own values and their neighbours: ties with cdf[k].
  for (size_t k = 0; k < cdf.size(); k += std::max<size_t>(1, cdf.size() / 5000)) {
    draws.insert(draws.end(), {cdf[k], std::nextafter(cdf[k], 0.0), std::nextafter(cdf[k], 2.0)});
  }
  for (double& u : draws) u = std::clamp(u, 0.0, 1.0);
  return draws;
}

TEST(ZipfIds, EqualsTheBinarySearchOverTheCdf) {
  for (int64_t space : {1, 2, 7, 5000, 100000, 1000000}) {
    for (double alpha : {0.5, 1.05, 1.5}) {
      const ZipfIds zipf(space, alpha);
      ASSERT_EQ(zipf.cdf().size(), static_cast<size_t>(space));
      EXPECT_EQ(zipf.cdf().back(), 1.0);
      const std::vector<double> draws = HardDraws(zipf.cdf(), static_cast<uint64_t>(space) * 31 + 7);
      std::vector<int64_t> ids(draws.size(), -5);
      zipf.Ids(draws, ids.data());
      const std::vector<int64_t> expected = Reference(zipf.cdf(), draws);
      size_t wrong = 0;
      for (size_t i = 0; i < draws.size(); ++i) {
        if (ids[i] != expected[i] && wrong++ < 5) {
          ADD_FAILURE() << "space " << space << ", alpha " << alpha << ": draw " << draws[i] << " gave " << ids[i]
                        << ", the binary search " << expected[i];
        }
      }
      EXPECT_EQ(wrong, 0u) << "space " << space << ", alpha " << alpha;
    }
  }
}

TEST(ZipfIds, SmallIdsAreHotAsTheLawSays) {
  // A check of the law itself, not of the search: P(0) / P(1) = 2^alpha.
  const ZipfIds zipf(1000, 1.05);
  const double p0 = zipf.cdf()[0], p1 = zipf.cdf()[1] - zipf.cdf()[0];
  EXPECT_NEAR(p0 / p1, std::pow(2.0, 1.05), 1e-9);
}

TEST(ZipfIds, EmptyDrawsWriteNothing) {
  const ZipfIds zipf(100, 1.1);
  int64_t sentinel = 42;
  zipf.Ids({}, &sentinel);
  EXPECT_EQ(sentinel, 42);
}

}  // namespace
}  // namespace shardrec::cli
