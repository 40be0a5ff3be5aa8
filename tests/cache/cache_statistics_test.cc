// CacheStatistics (core/include/shardrec/core/cache/cache_statistics.h):
// the seeds' endpoints (WE-20: clf 0 misses all, clf 1 misses none), a
// stream worked by hand (stack distances, cacheability as the mean over
// clf), per-batch distinct lookups, and the expected miss rate equal to a
// brute-force fully associative LRU cache of every size on random streams.
#include <gtest/gtest.h>

#include <list>
#include <random>
#include <unordered_map>
#include <unordered_set>

#include "shardrec/core/cache/cache_statistics.h"

namespace shardrec {
namespace {

TEST(CacheStatistics, TheSeedsEndpointsAndAStreamByHand) {
  // Lookups 0 1 0 2 0 1 3: four first sights; re-lookups at stack
  // distances 1 (0 after 1), 1 (0 after 2) and 2 (1 after 0, 2).
  const std::vector<int64_t> ids = {0, 1, 0, 2, 0, 1, 3};
  auto s = CacheStatistics::FromStream(ids, 4, 1);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->expected_miss_rate(0.0), 1.0);
  EXPECT_EQ(s->expected_miss_rate(1.0), 0.0);
  EXPECT_DOUBLE_EQ(s->expected_miss_rate(0.25), 7.0 / 7);  // 1 row: only distance 0 would hit
  EXPECT_DOUBLE_EQ(s->expected_miss_rate(0.5), 5.0 / 7);   // 2 rows: distances 0 and 1 hit
  EXPECT_DOUBLE_EQ(s->expected_miss_rate(0.75), 4.0 / 7);  // 3 rows: every re-lookup hits
  EXPECT_DOUBLE_EQ(s->expected_miss_rate(0.2), 1.0);       // 0 rows
  EXPECT_EQ(s->expected_miss_rate(-1), 1.0);
  EXPECT_EQ(s->expected_miss_rate(7), 0.0);
  EXPECT_NEAR(s->cacheability(), 0.25 + 0.25 + 0.25 * 5 / 7 + 0.25 * 4 / 7, 1e-3);
  EXPECT_DOUBLE_EQ(s->expected_lookups(), 1.0);
  EXPECT_EQ(s->lookups(), 7);
}

TEST(CacheStatistics, LookupsAreEachBatchsDistinctIds) {
  const std::vector<int64_t> ids = {0, 0, 1, 1, 1, 2, 2};  // batches {0, 0}, {1, 1}, {1, 2}, {2}
  auto s = CacheStatistics::FromStream(ids, 3, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->lookups(), 5);
  EXPECT_DOUBLE_EQ(s->expected_lookups(), 5.0 / 4);
  EXPECT_FALSE(CacheStatistics::FromStream(ids, 2, 2).ok()) << "id 2 is not a row of 2";
  EXPECT_FALSE(CacheStatistics::FromStream(ids, 0, 2).ok());
  EXPECT_FALSE(CacheStatistics::FromStream(ids, 3, 0).ok());
  auto empty = CacheStatistics::FromStream({}, 3, 2);
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->expected_miss_rate(0.5), 1.0);
  EXPECT_EQ(empty->expected_miss_rate(1.0), 0.0);
}

// Misses of a fully associative LRU cache of `capacity` rows over each
// batch's distinct ids, simulated.
int64_t LruMisses(const std::vector<int64_t>& ids, int64_t batch, int64_t capacity) {
  std::list<int64_t> order;  // most recent first
  std::unordered_map<int64_t, std::list<int64_t>::iterator> where;
  int64_t misses = 0;
  for (size_t at = 0; at < ids.size(); at += static_cast<size_t>(batch)) {
    std::unordered_set<int64_t> seen;
    for (size_t i = at; i < std::min(ids.size(), at + static_cast<size_t>(batch)); ++i) {
      if (!seen.insert(ids[i]).second) continue;
      auto it = where.find(ids[i]);
      if (it != where.end()) {
        order.erase(it->second);
      } else {
        ++misses;
        if (static_cast<int64_t>(order.size()) == capacity) {
          where.erase(order.back());
          order.pop_back();
        }
      }
      order.push_front(ids[i]);
      where[ids[i]] = order.begin();
    }
  }
  return misses;
}

TEST(CacheStatistics, EqualsAFullyAssociativeLruCacheOfEverySize) {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 4; ++trial) {
    const int64_t rows = 50 + trial * 40, batch = 1 + trial * 3;
    std::vector<int64_t> ids(3000);
    for (auto& id : ids) id = static_cast<int64_t>(std::min(rng() % rows, rng() % rows));
    auto s = CacheStatistics::FromStream(ids, rows, batch);
    ASSERT_TRUE(s.ok());
    for (int64_t c = 1; c < rows; ++c) {
      const double clf = (static_cast<double>(c) + 0.5) / static_cast<double>(rows);  // floor(clf x rows) = c
      const int64_t misses = LruMisses(ids, batch, c);
      ASSERT_DOUBLE_EQ(s->expected_miss_rate(clf), static_cast<double>(misses) / static_cast<double>(s->lookups()))
          << "rows " << rows << ", batch " << batch << ", capacity " << c;
    }
    EXPECT_GT(s->cacheability(), 0.0);
    EXPECT_LT(s->cacheability(), 1.0);
  }
}

}  // namespace
}  // namespace shardrec
