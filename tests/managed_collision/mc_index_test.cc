// The managed-collision hot-path structures against plain references: the
// slot index (IdSlotIndex) against std::unordered_map through millions of
// batched lookups, inserts and erases, and the round's sorts (fast_sort.h)
// against std::sort on both of each one's paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <random>
#include <unordered_map>
#include <vector>

#include "fast_sort.h"
#include "id_slot_index.h"

namespace shardrec::mc {
namespace {

TEST(IdSlotIndexTest, BatchedCallsMatchAMapThroughHeavyChurn) {
  constexpr int64_t kSlots = 5000;
  IdSlotIndex index(kSlots);
  std::unordered_map<int64_t, int64_t> want;  // every entry, marks (rows below kEmpty) included
  std::mt19937_64 rng(7);
  // Ids from a small universe so that lookups both hit and miss, and
  // erases leave holes inside clusters for the backward shift to close.
  std::uniform_int_distribution<int64_t> universe(-30000, 30000);
  std::vector<int64_t> held;
  int64_t marks_kept = 0;
  for (int round = 0; round < 400; ++round) {
    // Replace a random share of the holders with ids not held, as a round
    // does: the newcomers were filed with marks first, by FindOrInsert.
    std::shuffle(held.begin(), held.end(), rng);
    const size_t leaving = std::min(held.size(), static_cast<size_t>(rng() % 300));
    std::vector<int64_t> gone(held.end() - static_cast<std::ptrdiff_t>(leaving), held.end());
    held.resize(held.size() - leaving);
    for (int64_t id : gone) want.erase(id);
    std::vector<int64_t> fresh, rows, refused;
    while (held.size() + fresh.size() < static_cast<size_t>(kSlots) && fresh.size() < 400) {
      const int64_t id = universe(rng);
      if (want.contains(id) || std::find(gone.begin(), gone.end(), id) != gone.end()) {
        // Present (a holder or a mark): FindOrInsert finds it and changes nothing.
        if (want.contains(id)) {
          ASSERT_EQ(index.FindOrInsert(id, -7), want[id]);
        }
        continue;
      }
      const int64_t mark = -2 - static_cast<int64_t>(fresh.size() + refused.size());
      ASSERT_EQ(index.FindOrInsert(id, mark), mark);
      want[id] = mark;
      if (rng() % 4 == 0) {
        refused.push_back(id);
      } else {
        fresh.push_back(id);
        rows.push_back(static_cast<int64_t>(rng() % 1000000));
      }
    }
    ASSERT_EQ(index.size(), static_cast<int64_t>(want.size() + gone.size()));
    index.EraseMany(gone);
    index.AssignMany(fresh, rows.data());
    for (size_t k = 0; k < fresh.size(); ++k) want[fresh[k]] = rows[k], held.push_back(fresh[k]);
    // Some refused marks stay a round longer (a window spanning rounds);
    // the others leave one by one or all at once in a pass (EraseMarks:
    // these are the only marks then).
    if (round % 2 == 0) {
      if (round % 4 == 0) {
        index.EraseMarks();
      } else {
        index.EraseMany(refused);
      }
      for (int64_t id : refused) want.erase(id);
    } else {
      marks_kept += static_cast<int64_t>(refused.size());
    }
    ASSERT_EQ(index.size(), static_cast<int64_t>(want.size()));
    // Look up a batch longer than the prefetch distance, hits and misses mixed.
    std::vector<int64_t> probe(100 + rng() % 200);
    for (auto& id : probe) id = (rng() % 2 && !held.empty()) ? held[rng() % held.size()] : universe(rng);
    std::vector<int64_t> got(probe.size());
    index.FindMany(probe, got.data());
    for (size_t k = 0; k < probe.size(); ++k) {
      const auto it = want.find(probe[k]);
      const int64_t row = it == want.end() ? IdSlotIndex::kEmpty : it->second;
      // FindMany: a mark reads as no slot; Find gives the mark itself.
      ASSERT_EQ(got[k], std::max(row, IdSlotIndex::kEmpty)) << "round " << round << ", id " << probe[k];
      ASSERT_EQ(index.Find(probe[k]), row) << "round " << round << ", id " << probe[k];
    }
    if (round % 2 == 1) {  // the kept marks leave after all
      std::vector<int64_t> marked;
      for (const auto& [id, r] : want) {
        if (r < IdSlotIndex::kEmpty) marked.push_back(id);
      }
      index.EraseMany(marked);
      for (int64_t id : marked) want.erase(id);
    }
  }
  EXPECT_GT(index.size(), kSlots / 2);
  EXPECT_GT(marks_kept, 1000);
}

TEST(IdSlotIndexTest, FindOrInsertDoublesPastHalfFullAndKeepsEveryEntry) {
  IdSlotIndex index(100);  // 512 entries
  const size_t before = index.bytes();
  std::vector<int64_t> ids;
  std::mt19937_64 rng(11);
  for (int64_t k = 0; k < 20000; ++k) {
    const auto id = static_cast<int64_t>(rng());
    ids.push_back(id);
    ASSERT_EQ(index.FindOrInsert(id, k % 3 == 0 ? -2 - k : k), k % 3 == 0 ? -2 - k : k);
  }
  EXPECT_EQ(index.size(), 20000);
  EXPECT_GE(index.bytes(), before * 64);                            // grew 512 -> 65536 entries
  EXPECT_LE(index.bytes(), static_cast<size_t>(65536) * 16);        // at most half full, no more
  for (int64_t k = 0; k < 20000; ++k) {
    ASSERT_EQ(index.Find(ids[static_cast<size_t>(k)]), k % 3 == 0 ? -2 - k : k);
  }
}

TEST(IdSlotIndexTest, StaysAQuarterFull) {
  const IdSlotIndex index(1000000);
  EXPECT_GE(index.capacity(), 1000000);
  EXPECT_EQ(IdIndexEntries(1000000), uint64_t{1} << 22);
  EXPECT_EQ(index.bytes(), static_cast<size_t>(IdIndexEntries(1000000)) * 16);
}

TEST(FastSortTest, SortUniqueMatchesSortAndUniqueOnBothPaths) {
  std::mt19937_64 rng(3);
  std::vector<uint64_t> bits;
  for (const int64_t n : {0, 1, 10, 63, 64, 1000, 50000}) {
    for (const int64_t range : {int64_t{64}, int64_t{1000}, int64_t{1} << 20}) {
      std::vector<int64_t> v(static_cast<size_t>(n));
      for (auto& x : v) x = 500 + static_cast<int64_t>(rng() % static_cast<uint64_t>(range));
      std::vector<int64_t> want = v;
      std::sort(want.begin(), want.end());
      want.erase(std::unique(want.begin(), want.end()), want.end());
      v.erase(SortUnique(v.begin(), v.end(), 500, range, bits), v.end());
      EXPECT_EQ(v, want) << n << " values in a range of " << range;
    }
  }
}

struct Candidate {
  double key;
  int64_t id;
};

// The order OrderByKeyThenPlacement promises: key descending, then
// PlacementOrder(id).
void ExpectOrdered(std::vector<Candidate> v) {
  std::vector<Candidate> want = v;
  std::sort(want.begin(), want.end(), [](const Candidate& a, const Candidate& b) {
    return a.key != b.key ? a.key > b.key : PlacementOrder(a.id) < PlacementOrder(b.id);
  });
  // The input's order must not matter: reverse it.
  std::vector<uint32_t> positions(v.size());
  for (size_t i = 0; i < v.size(); ++i) positions[i] = static_cast<uint32_t>(v.size() - 1 - i);
  OrderByKeyThenPlacement(positions, [&](uint32_t p) { return v[p].key; }, [&](uint32_t p) { return v[p].id; });
  ASSERT_EQ(positions.size(), want.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_EQ(v[positions[i]].key, want[i].key) << "at " << i;
    ASSERT_EQ(v[positions[i]].id, want[i].id) << "at " << i;
  }
}

// Fmix64's inverse (each step undone in reverse order; x ^= x >> 33 is its
// own inverse), to build ids with a chosen PlacementOrder.
uint64_t UnFmix64(uint64_t k) {
  k ^= k >> 33;
  k *= 0x9cb4b2f8129337dbULL;  // the inverse of 0xc4ceb9fe1a85ec53 modulo 2^64
  k ^= k >> 33;
  k *= 0x4f74430c22a54005ULL;  // the inverse of 0xff51afd7ed558ccd
  k ^= k >> 33;
  return k;
}
int64_t IdPlacedAt(uint64_t order) { return static_cast<int64_t>(UnFmix64(std::rotl(order, 32))); }

TEST(FastSortTest, OrderByKeyThenPlacementMatchesSortOnBothPaths) {
  std::mt19937_64 rng(11);
  ASSERT_EQ(PlacementOrder(IdPlacedAt(0x123456789abcdefULL)), 0x123456789abcdefULL);
  for (const int distinct_keys : {1, 2, 10, 255, 256, 5000}) {
    std::vector<Candidate> v;
    for (int i = 0; i < 20000; ++i) {
      const double key = -static_cast<double>(rng() % static_cast<uint64_t>(distinct_keys));
      // Every third id shares the top 32 bits of its order with others
      // (runs the radix passes leave to the insertion pass), and a few
      // share the top 56 (ties the final comparison breaks).
      uint64_t order = rng();
      if (i % 3 == 0) order = (uint64_t{0xabcd1234} << 32) | (order & 0xffffffffULL);
      if (i % 97 == 0) order = (uint64_t{0x5a5a5a5a5a5a5a} << 8) | (order & 0xff);
      v.push_back({key, IdPlacedAt(order)});
    }
    // Distinct ids (a window's candidates are).
    std::sort(v.begin(), v.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
    v.erase(std::unique(v.begin(), v.end(), [](const Candidate& a, const Candidate& b) { return a.id == b.id; }),
            v.end());
    std::shuffle(v.begin(), v.end(), rng);
    SCOPED_TRACE(distinct_keys);
    ExpectOrdered(v);
  }
  ExpectOrdered({});
  ExpectOrdered({{1.0, 5}});
  ExpectOrdered({{1.0, 5}, {1.0, 6}});
  ExpectOrdered({{1.0, 5}, {2.0, 6}});
}

// Both digit widths (8 bits below 65,536 candidates, 11 from there) at
// their boundary and at a long stream's round size, one key and several,
// with runs that share the top 32 bits of their order.
TEST(FastSortTest, OrderByKeyThenPlacementAtEveryDigitWidth) {
  std::mt19937_64 rng(12);
  for (const size_t n : {size_t{65535}, size_t{65536}, size_t{200000}}) {
    for (const int distinct_keys : {1, 7}) {
      std::vector<Candidate> v;
      for (size_t i = 0; i < n; ++i) {
        uint64_t order = rng();
        if (i % 5 == 0) order = (uint64_t{0x0badf00d} << 32) | (order & 0xffffffffULL);
        v.push_back({-static_cast<double>(rng() % static_cast<uint64_t>(distinct_keys)), IdPlacedAt(order)});
      }
      std::sort(v.begin(), v.end(), [](const Candidate& a, const Candidate& b) { return a.id < b.id; });
      v.erase(std::unique(v.begin(), v.end(), [](const Candidate& a, const Candidate& b) { return a.id == b.id; }),
              v.end());
      std::shuffle(v.begin(), v.end(), rng);
      SCOPED_TRACE(std::to_string(v.size()) + " candidates, " + std::to_string(distinct_keys) + " keys");
      ExpectOrdered(v);
    }
  }
}

}  // namespace
}  // namespace shardrec::mc
