// CacheDirectory (core/include/shardrec/core/cache/cache_directory.h), with
// the built-in lru and lfu policies:
// - no row is ever lost: a model of the cache's rows and of the disk,
//   driven only by the directory's plans (write back, then load), always
//   reads what was last written, over thousands of skewed batches;
// - lru evicts, in each set, the way used longest ago among those the
//   batch does not hold (ties: the later way);
// - a set full of one batch's ids sends the rest to overflow slots, held
//   for that batch only; a batch that does not fit is refused with the
//   fix, and a refused batch or a failing policy changes nothing;
// - a batch's misses decided in parts on threads make the plan one pass
//   in batch order makes, entry for entry;
// - a batch marked dirty whole (MarkBatchDirty) writes back exactly what
//   marking its slots one by one does, through evaluation batches that
//   are never marked, flushes (before and after a backward), purges,
//   refused batches, and long turns of training and evaluation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <set>

#include "fixture_paths.h"
#include "shardrec/core/cache/cache_directory.h"
#include "shardrec/core/host_services.h"

namespace shardrec {
namespace {

class CacheDirectoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_eviction_builtin.so")
            .ok());
  }
  // Distinct ids of one batch, skewed toward small ids.
  static std::vector<int64_t> Batch(std::mt19937_64& rng, int64_t n, int64_t range) {
    std::set<int64_t> ids;
    while (static_cast<int64_t>(ids.size()) < n) {
      const int64_t a = static_cast<int64_t>(rng() % range), b = static_cast<int64_t>(rng() % range);
      ids.insert(std::min(a, b));
    }
    std::vector<int64_t> out(ids.begin(), ids.end());
    std::shuffle(out.begin(), out.end(), rng);
    return out;
  }
  // The fixture whose score() throws, loaded: its component's name as
  // registered (empty, with a failure recorded, when it does not load).
  std::string LoadScoreThrows() {
    const auto lib = testing::Fixture("score_throws", "eviction", "scorethrows");
    auto loaded = registry_.LoadLibrary(lib);
    EXPECT_TRUE(loaded.ok()) << lib << ": " << loaded.ToString();
    for (const auto& ref : registry_.Components(SR_KIND_EVICTION)) {
      if (ref.library->path() == std::filesystem::absolute(lib)) return ref.name();
    }
    return "";
  }
  HostServices services_;
  PluginRegistry registry_{&services_};
};

TEST_F(CacheDirectoryTest, NoRowIsEverLostAndLruEvictsTheLeastRecentlyUsedWay) {
  for (const std::string policy : {"lru", "lfu"}) {
    SCOPED_TRACE(policy);
    constexpr int64_t kWays = 8, kSlots = 64, kRange = 400;
    auto dir = CacheDirectory::Create(registry_, policy, {}, {.slots = kSlots, .ways = kWays});
    ASSERT_TRUE(dir.ok()) << dir.status().ToString();
    const int64_t sets_end = kSlots;  // 8 sets x 8 ways; overflow after
    std::vector<int64_t> cached(static_cast<size_t>(dir->capacity()), -1), owner(cached.size(), -1);
    std::map<int64_t, int64_t> disk, truth, last;  // id -> value; id -> batch of last use
    std::mt19937_64 rng(9);
    int64_t hits = 0, lookups = 0;
    for (int64_t batch = 1; batch <= 3000; ++batch) {
      const auto ids = Batch(rng, 1 + static_cast<int64_t>(rng() % 20), kRange);
      std::set<int64_t> resident_before;
      for (int64_t id : ids) {
        if (dir->SlotOf(id) >= 0) resident_before.insert(id);
      }
      auto plan = dir->Assign(ids);
      ASSERT_TRUE(plan.ok()) << plan.status().ToString();
      lookups += static_cast<int64_t>(ids.size());
      hits += static_cast<int64_t>(resident_before.size());
      // Write-backs first: each is the row its slot holds now.
      for (size_t k = 0; k < plan->write_back.ids.size(); ++k) {
        const int64_t id = plan->write_back.ids[k], slot = plan->write_back.slots[k];
        ASSERT_EQ(owner[static_cast<size_t>(slot)], id) << "batch " << batch;
        disk[id] = cached[static_cast<size_t>(slot)];
      }
      // This batch's hits are in use from the start (Assign takes hits first).
      std::set<int64_t> used;
      for (int64_t id : ids) {
        if (resident_before.count(id)) used.insert(id);
      }
      for (size_t k = 0; k < plan->load.ids.size(); ++k) {
        const int64_t id = plan->load.ids[k], slot = plan->load.slots[k];
        ASSERT_FALSE(resident_before.count(id)) << "a hit was loaded again";
        const int64_t prev = owner[static_cast<size_t>(slot)];
        if (policy == "lru" && slot < sets_end && prev >= 0) {
          const int64_t set = slot / kWays;
          for (int64_t w = 0; w < kWays; ++w) {
            const int64_t other = owner[static_cast<size_t>(set * kWays + w)];
            ASSERT_GE(other, 0) << "a way was free, yet id " << prev << " was evicted";
            if (used.count(other) || other == prev) continue;
            const bool later_way = set * kWays + w > slot;
            ASSERT_TRUE(last[prev] < last[other] || (last[prev] == last[other] && !later_way))
                << "batch " << batch << ": evicted " << prev << " (last used " << last[prev] << ") over " << other
                << " (last used " << last[other] << ")";
          }
        }
        ASSERT_FALSE(prev >= 0 && used.count(prev)) << "evicted an id this batch holds";
        owner[static_cast<size_t>(slot)] = id;
        cached[static_cast<size_t>(slot)] = disk.count(id) ? disk[id] : id * 10;
        used.insert(id);
      }
      // Overflow slots from an earlier batch no longer count as held.
      for (size_t slot = static_cast<size_t>(sets_end); slot < owner.size(); ++slot) {
        if (owner[slot] >= 0 && dir->SlotOf(owner[slot]) != static_cast<int64_t>(slot)) owner[slot] = -1;
      }
      std::set<int64_t> slots_seen;
      for (size_t i = 0; i < ids.size(); ++i) {
        const int64_t id = ids[i], slot = plan->slots[i];
        ASSERT_TRUE(slot >= 0 && slot < dir->capacity());
        ASSERT_TRUE(slots_seen.insert(slot).second) << "two ids share slot " << slot;
        ASSERT_EQ(owner[static_cast<size_t>(slot)], id);
        if (!truth.count(id)) truth[id] = id * 10;
        ASSERT_EQ(cached[static_cast<size_t>(slot)], truth[id]) << "id " << id << ", batch " << batch;
        last[id] = batch;
      }
      // Train on about half of them.
      std::vector<int64_t> changed;
      for (size_t i = 0; i < ids.size(); i += 2) {
        const int64_t slot = plan->slots[i];
        ++cached[static_cast<size_t>(slot)];
        ++truth[ids[i]];
        changed.push_back(slot);
      }
      dir->MarkDirty(changed);
      if (batch % 500 == 0) {  // a flush
        const auto dirty = dir->TakeDirty();
        for (size_t k = 0; k < dirty.ids.size(); ++k) disk[dirty.ids[k]] = cached[static_cast<size_t>(dirty.slots[k])];
        EXPECT_TRUE(dir->TakeDirty().ids.empty());
      }
    }
    const auto dirty = dir->TakeDirty();
    for (size_t k = 0; k < dirty.ids.size(); ++k) disk[dirty.ids[k]] = cached[static_cast<size_t>(dirty.slots[k])];
    for (const auto& [id, value] : truth) {
      const int64_t slot = dir->SlotOf(id);
      const int64_t got = slot >= 0 ? cached[static_cast<size_t>(slot)] : (disk.count(id) ? disk[id] : id * 10);
      ASSERT_EQ(got, value) << "id " << id;
      if (slot >= 0 && disk.count(id)) {
        ASSERT_EQ(disk[id], value) << "flushed id " << id;
      }
    }
    const CacheCounters& c = dir->counters();
    EXPECT_EQ(c.lookups, lookups);
    EXPECT_EQ(c.hits, hits);
    EXPECT_EQ(c.misses, lookups - hits);
    EXPECT_GT(c.evictions, 0);
    EXPECT_GT(c.write_backs, 0);
    EXPECT_GT(c.hit_rate(), 0.2) << "a skewed stream through 64 slots of 400 ids";
  }
}

TEST_F(CacheDirectoryTest, OverflowHoldsABatchThatFillsItsSetAndRefusesOneThatDoesNotFit) {
  auto dir = CacheDirectory::Create(registry_, "lru", {}, {.slots = 2, .ways = 2, .overflow = 3});
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(dir->capacity(), 5);
  const std::vector<int64_t> five = {1, 2, 3, 4, 5};
  auto plan = dir->Assign(five);  // one set: two ways, three overflow slots
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(dir->counters().overflows, 3);
  std::vector<int64_t> sorted = plan->slots;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int64_t>{0, 1, 2, 3, 4}));
  dir->MarkDirty(plan->slots);
  // The next batch: last batch's overflow ids are written back and leave.
  const std::vector<int64_t> one = {9};
  plan = dir->Assign(one);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->write_back.ids.size(), 4u) << "three overflow ids, then the way id 9 takes";
  EXPECT_EQ(plan->load.ids, one);
  EXPECT_TRUE(plan->reloads.empty()) << "id 9 was not among them";
  // Ids that held overflow slots and are asked for again leave and come
  // back in one batch: the plan pairs each load with its write-back, whose
  // row is the one to load (a write-behind has not reached the file yet).
  auto held = dir->Assign(five);
  ASSERT_TRUE(held.ok());
  dir->MarkDirty(held->slots);
  auto refill = dir->Assign(five);
  ASSERT_TRUE(refill.ok()) << refill.status().ToString();
  ASSERT_FALSE(refill->reloads.empty());
  for (const auto& [load, write_back] : refill->reloads) {
    EXPECT_EQ(refill->load.ids.at(load), refill->write_back.ids.at(write_back));
  }
  for (int64_t id : refill->load.ids) {  // every load of an id just written back is paired
    const bool written_back = std::find(refill->write_back.ids.begin(), refill->write_back.ids.end(), id) !=
                              refill->write_back.ids.end();
    const bool paired = std::any_of(refill->reloads.begin(), refill->reloads.end(),
                                    [&](const auto& r) { return refill->load.ids[r.first] == id; });
    EXPECT_EQ(written_back, paired) << id;
  }
  EXPECT_EQ(dir->counters().reloads, static_cast<int64_t>(refill->reloads.size()));
  plan = dir->Assign(one);
  ASSERT_TRUE(plan.ok());
  // Six ids do not fit in 2 ways + 3 overflow: refused, nothing changed.
  std::vector<int64_t> before;
  for (int64_t id = 0; id < 20; ++id) before.push_back(dir->SlotOf(id));
  const CacheCounters counters = dir->counters();
  const std::vector<int64_t> six = {11, 12, 13, 14, 15, 16};
  auto refused = dir->Assign(six);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), SR_RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.status().message().find("raise the cache's load factor"), std::string::npos);
  for (int64_t id = 0; id < 20; ++id) EXPECT_EQ(dir->SlotOf(id), before[static_cast<size_t>(id)]) << id;
  EXPECT_EQ(dir->counters().lookups, counters.lookups);
  // A negative id is refused the same way.
  const std::vector<int64_t> negative = {-3};
  EXPECT_FALSE(dir->Assign(negative).ok());
  for (int64_t id = 0; id < 20; ++id) EXPECT_EQ(dir->SlotOf(id), before[static_cast<size_t>(id)]) << id;
  auto again = dir->Assign(one);
  ASSERT_TRUE(again.ok());
  EXPECT_TRUE(again->load.ids.empty()) << "id 9 still cached";
}

// A refused batch's hits are undone too: afterwards the directory decides
// every later batch as a twin that never saw the refused one. (A hit left
// marked as used by the refused batch would look held by the next one,
// whose number it took, and lru would evict another way.)
TEST_F(CacheDirectoryTest, ARefusedBatchLeavesTheDirectoryAsATwinThatNeverSawIt) {
  for (const std::string policy : {"lru", "lfu"}) {
    SCOPED_TRACE(policy);
    auto made = CacheDirectory::Create(registry_, policy, {}, {.slots = 4, .ways = 4, .overflow = 1});
    auto twin_made = CacheDirectory::Create(registry_, policy, {}, {.slots = 4, .ways = 4, .overflow = 1});
    ASSERT_TRUE(made.ok() && twin_made.ok());
    CacheDirectory& dir = *made;
    CacheDirectory& twin = *twin_made;
    auto both = [&](const std::vector<int64_t>& ids) {
      auto a = dir.Assign(ids);
      auto b = twin.Assign(ids);
      ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString() << " / " << b.status().ToString();
      EXPECT_EQ(a->slots, b->slots);
      EXPECT_EQ(a->load.ids, b->load.ids);
      EXPECT_EQ(a->write_back.ids, b->write_back.ids);
      dir.MarkDirty(a->slots);
      twin.MarkDirty(b->slots);
    };
    both({1, 2, 3, 4});  // one set of four ways, full
    both({2, 3, 4});     // id 1 is now the least recently used (lru) and least used (lfu)
    // Id 1 hits, then four misses: three evict 2, 3 and 4, one takes the
    // overflow slot, and the last finds no room: refused.
    const std::vector<int64_t> refused_ids = {1, 10, 11, 12, 13, 14};
    auto refused = dir.Assign(refused_ids);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), SR_RESOURCE_EXHAUSTED);
    for (int64_t id : {1, 2, 3, 4}) EXPECT_EQ(dir.SlotOf(id), twin.SlotOf(id)) << id;
    both({20});          // a miss: id 1 is the way to evict, in both
    EXPECT_EQ(dir.SlotOf(1), -1);
    both({1, 21, 2});
    both({3, 22});
    EXPECT_EQ(dir.counters().lookups, twin.counters().lookups);
    EXPECT_EQ(dir.counters().hits, twin.counters().hits);
    EXPECT_EQ(dir.counters().evictions, twin.counters().evictions);
    EXPECT_EQ(dir.counters().write_backs, twin.counters().write_backs);
  }
}

// Given the table's rows, a directory finds slots through an array by row
// (smaller than the hashed index once it caches more than an eighth of
// them); it decides every batch, a refused one included, as the hashed
// directory does, and refuses an id past the rows.
TEST_F(CacheDirectoryTest, AnArrayByRowDecidesAsTheHashedIndexDoes) {
  constexpr int64_t kRows = 1000;
  for (const std::string policy : {"lru", "lfu"}) {
    SCOPED_TRACE(policy);
    auto by_row = CacheDirectory::Create(registry_, policy, {}, {.slots = 256, .ways = 8, .overflow = 40, .rows = kRows});
    auto hashed = CacheDirectory::Create(registry_, policy, {}, {.slots = 256, .ways = 8, .overflow = 40});
    ASSERT_TRUE(by_row.ok() && hashed.ok());
    EXPECT_LT(by_row->bytes(), hashed->bytes()) << "4 bytes a row against 32 a slot";
    std::mt19937_64 rng(11);
    int refusals = 0;
    for (int batch = 0; batch < 60; ++batch) {
      std::vector<int64_t> ids(batch == 30 ? 600 : 80);  // batch 30 overflows: refused by both
      for (auto& id : ids) id = static_cast<int64_t>(std::min<double>(kRows - 1, std::exp(std::uniform_real_distribution<>(0, 6.9)(rng))));
      auto a = by_row->Assign(ids);
      auto b = hashed->Assign(ids);
      ASSERT_EQ(a.ok(), b.ok()) << batch;
      if (!a.ok()) {
        EXPECT_EQ(batch, 30);
        ++refusals;
        continue;
      }
      EXPECT_EQ(a->slots, b->slots) << batch;
      EXPECT_EQ(a->load.ids, b->load.ids) << batch;
      EXPECT_EQ(a->write_back.ids, b->write_back.ids) << batch;
      by_row->MarkDirty(a->slots);
      hashed->MarkDirty(b->slots);
    }
    EXPECT_EQ(refusals, 1) << "the batch of 600 ids fits neither";
    for (int64_t id = 0; id < kRows; ++id) ASSERT_EQ(by_row->SlotOf(id), hashed->SlotOf(id)) << id;
    EXPECT_EQ(by_row->counters().evictions, hashed->counters().evictions);
    EXPECT_GT(by_row->counters().evictions, 0);
    EXPECT_EQ(by_row->SlotOf(kRows), -1);
    const std::vector<int64_t> past = {3, kRows};
    auto refused = by_row->Assign(past);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("id 1000 is not a row of its 1000"), std::string::npos)
        << refused.status().message();
  }
  EXPECT_FALSE(CacheDirectory::Create(registry_, "lru", {}, {.slots = 8, .rows = -1}).ok());
}

TEST_F(CacheDirectoryTest, ARepeatedIdSharesOneSlotAndIsLoadedOnce) {
  auto dir = CacheDirectory::Create(registry_, "lru", {}, {.slots = 8, .ways = 4});
  ASSERT_TRUE(dir.ok());
  const std::vector<int64_t> ids = {5, 9, 5, 5, 9, 12};
  auto plan = dir->Assign(ids);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  EXPECT_EQ(plan->slots[0], plan->slots[2]);
  EXPECT_EQ(plan->slots[0], plan->slots[3]);
  EXPECT_EQ(plan->slots[1], plan->slots[4]);
  EXPECT_NE(plan->slots[0], plan->slots[1]);
  EXPECT_EQ(plan->load.ids.size(), 3u) << "5, 9 and 12, once each";
  EXPECT_EQ(dir->counters().lookups, 6);
  EXPECT_EQ(dir->counters().misses, 3);
  EXPECT_EQ(dir->counters().hits, 3) << "the repeats";
  const std::vector<int64_t> again = {9, 9};
  plan = dir->Assign(again);
  ASSERT_TRUE(plan.ok());
  EXPECT_TRUE(plan->load.ids.empty());
  EXPECT_EQ(dir->counters().hits, 5);
}

TEST_F(CacheDirectoryTest, AFailingPolicyChangesNothing) {
  const std::string name = LoadScoreThrows();
  ASSERT_FALSE(name.empty());
  // The parts on threads, each with a handle of its own: the same.
  auto dir = CacheDirectory::Create(registry_, name, {}, {.slots = 4, .ways = 4, .parts = 4, .parallel_from = 0});
  ASSERT_TRUE(dir.ok()) << dir.status().ToString();
  const std::vector<int64_t> first = {1, 2, 3, 4};  // free ways: the policy is not asked
  ASSERT_TRUE(dir->Assign(first).ok());
  const std::vector<int64_t> next = {1, 5};  // a miss in a full set
  auto failed = dir->Assign(next);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("threw an exception"), std::string::npos) << failed.status().message();
  for (int64_t id : first) EXPECT_GE(dir->SlotOf(id), 0);
  EXPECT_EQ(dir->SlotOf(5), -1);
  EXPECT_EQ(dir->counters().lookups, 4);
  auto hits = dir->Assign(first);
  ASSERT_TRUE(hits.ok());
  EXPECT_TRUE(hits->load.ids.empty());
  EXPECT_FALSE(CacheDirectory::Create(registry_, "lru", {}, {.slots = 0}).ok());
  EXPECT_FALSE(CacheDirectory::Create(registry_, "lru", {}, {.slots = 8, .parts = 0}).ok());
  EXPECT_FALSE(CacheDirectory::Create(registry_, "lru", {}, {.slots = 8, .ways = 0}).ok());
  EXPECT_FALSE(CacheDirectory::Create(registry_, "nosuch", {}, {.slots = 8}).ok());
}

// On threads, the first failure in batch order wins, as in one pass: a set
// out of overflow slots before a part's policy fails is refused for the
// overflow, and the other way round for the policy; either way nothing
// changes. (The throwing fixture says it is thread-safe, so it gets parts.)
TEST_F(CacheDirectoryTest, OnThreadsTheFirstFailureInBatchOrderWins) {
  const std::string name = LoadScoreThrows();
  ASSERT_FALSE(name.empty());
  // Which set each id falls in: a directory of the same shape tells, one id at a time.
  const CacheDirectoryConfig shape{.slots = 8, .ways = 4, .overflow = 1};
  std::vector<int64_t> in_set[2];
  for (int64_t id = 0; in_set[0].size() < 6 || in_set[1].size() < 6; ++id) {
    auto probe = CacheDirectory::Create(registry_, "lru", {}, shape);
    ASSERT_TRUE(probe.ok());
    const std::vector<int64_t> one = {id};
    ASSERT_TRUE(probe->Assign(one).ok());
    auto& set = in_set[probe->SlotOf(id) / 4];
    if (set.size() < 6) set.push_back(id);
  }
  const auto& a = in_set[0];
  const auto& b = in_set[1];
  const std::vector<int64_t> fill = {a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]};  // free ways: no policy
  // Set a: four hits, then two first sights for one overflow slot; set b: a
  // miss in a full set, which asks the policy. Overflow first, then policy first.
  const std::vector<int64_t> overflow_first = {a[0], a[1], a[2], a[3], a[4], a[5], b[4]};
  const std::vector<int64_t> policy_first = {a[0], a[1], a[2], a[3], b[4], a[4], a[5]};
  for (const auto& [batch, code] : {std::pair{overflow_first, SR_RESOURCE_EXHAUSTED}, std::pair{policy_first, SR_INTERNAL}}) {
    for (const int64_t parts : {int64_t{1}, int64_t{2}, int64_t{4}}) {
      SCOPED_TRACE("parts " + std::to_string(parts) + (code == SR_INTERNAL ? ", policy first" : ", overflow first"));
      CacheDirectoryConfig config = shape;
      config.parts = parts;
      config.parallel_from = 0;
      auto dir = CacheDirectory::Create(registry_, name, {}, config);
      ASSERT_TRUE(dir.ok()) << dir.status().ToString();
      ASSERT_TRUE(dir->Assign(fill).ok());
      std::vector<int64_t> slots;
      for (int64_t id : fill) slots.push_back(dir->SlotOf(id));
      auto refused = dir->Assign(batch);
      ASSERT_FALSE(refused.ok());
      EXPECT_EQ(refused.status().code(), code) << refused.status().ToString();
      for (size_t k = 0; k < fill.size(); ++k) EXPECT_EQ(dir->SlotOf(fill[k]), slots[k]) << fill[k];
      for (int64_t id : {a[4], a[5], b[4]}) EXPECT_EQ(dir->SlotOf(id), -1) << id;
      EXPECT_EQ(dir->counters().lookups, 8);
      EXPECT_EQ(dir->counters().overflows, 0);
      // And it goes on: the same hits again, every way still its own.
      auto again = dir->Assign(fill);
      ASSERT_TRUE(again.ok()) << again.status().ToString();
      EXPECT_TRUE(again->load.ids.empty());
    }
  }
}

// The misses of a batch are decided in parts (by set) on threads. One part
// is the single pass in batch order; three parts in turn on one thread and
// eight on threads must make the same plans entry for entry, the same
// refusals, counters and slots, over batches with many misses, repeats,
// overflow and write-backs, with the hashed index and the array by row.
TEST_F(CacheDirectoryTest, ThePartsOnThreadsDecideAsOnePassInBatchOrder) {
  constexpr int64_t kRows = 20000;
  for (const std::string policy : {"lru", "lfu"}) {
    for (const int64_t rows : {int64_t{0}, kRows}) {
      SCOPED_TRACE(policy + (rows > 0 ? ", array by row" : ", hashed index"));
      auto config = [&](int64_t parts, int64_t from) {
        return CacheDirectoryConfig{.slots = 4096, .ways = 4, .overflow = 1200, .rows = rows, .parts = parts,
                                    .parallel_from = from};
      };
      auto one = CacheDirectory::Create(registry_, policy, {}, config(1, 0));
      auto in_turn = CacheDirectory::Create(registry_, policy, {}, config(3, 1 << 30));
      auto threaded = CacheDirectory::Create(registry_, policy, {}, config(8, 0));
      ASSERT_TRUE(one.ok() && in_turn.ok() && threaded.ok());
      std::mt19937_64 rng(17);
      int refusals = 0;
      int64_t overflows = 0;
      for (int batch = 0; batch < 80; ++batch) {
        // Skewed ids with repeats, in batches small and large enough for
        // their hits to be counted on threads too; every 20th batch too
        // many for its sets and overflow.
        std::vector<int64_t> ids(batch % 20 == 19 ? 30000 : batch % 2 == 0 ? 1500 : 9000);
        for (auto& id : ids) {
          id = static_cast<int64_t>(std::min<double>(kRows - 1, std::exp(std::uniform_real_distribution<>(0, 9.9)(rng))));
        }
        auto a = one->Assign(ids);
        for (CacheDirectory* other : {&*in_turn, &*threaded}) {
          auto b = other->Assign(ids);
          ASSERT_EQ(a.ok(), b.ok()) << batch;
          if (!a.ok()) {
            EXPECT_EQ(a.status().ToString(), b.status().ToString());
            continue;
          }
          ASSERT_EQ(a->slots, b->slots) << batch;
          EXPECT_EQ(a->load.ids, b->load.ids) << batch;
          EXPECT_EQ(a->load.slots, b->load.slots) << batch;
          EXPECT_EQ(a->write_back.ids, b->write_back.ids) << batch;
          EXPECT_EQ(a->write_back.slots, b->write_back.slots) << batch;
          EXPECT_EQ(a->reloads, b->reloads) << batch;
        }
        if (!a.ok()) {
          ++refusals;
          continue;
        }
        std::vector<int64_t> changed;  // a backward that changed every other row
        for (size_t i = 0; i < a->slots.size(); i += 2) changed.push_back(a->slots[i]);
        for (CacheDirectory* d : {&*one, &*in_turn, &*threaded}) d->MarkDirty(changed);
        overflows = one->counters().overflows;
      }
      EXPECT_EQ(refusals, 4);
      EXPECT_GT(overflows, 0) << "the stream must reach the overflow slots";
      EXPECT_GT(one->counters().write_backs, 0);
      EXPECT_GT(one->counters().reloads, 0);
      for (CacheDirectory* other : {&*in_turn, &*threaded}) {
        const CacheCounters &x = one->counters(), &y = other->counters();
        EXPECT_EQ(std::vector<int64_t>({x.lookups, x.hits, x.misses, x.evictions, x.write_backs, x.overflows, x.reloads}),
                  std::vector<int64_t>({y.lookups, y.hits, y.misses, y.evictions, y.write_backs, y.overflows, y.reloads}));
        for (int64_t id = 0; id < kRows; ++id) ASSERT_EQ(one->SlotOf(id), other->SlotOf(id)) << id;
      }
    }
  }
}

// MarkBatchDirty against MarkDirty of the batch's slots, on twin
// directories, step by step: every plan (its write-backs above all) and
// every flush must match. The stream mixes trained batches with evaluation
// batches (never marked), batches large enough to count hits on threads,
// flushes between a forward and its backward and after it, a second
// backward after a flush, rows changed otherwise (MarkDirty on both),
// refused batches and purges.
TEST_F(CacheDirectoryTest, ABatchMarkedWholeWritesBackWhatItsSlotsMarkedOneByOneDo) {
  constexpr int64_t kRows = 20000;
  for (const std::string policy : {"lru", "lfu"}) {
    SCOPED_TRACE(policy);
    const CacheDirectoryConfig config{.slots = 2048, .ways = 8, .overflow = 1500, .parts = 4, .parallel_from = 0};
    auto by_slot = CacheDirectory::Create(registry_, policy, {}, config);
    auto by_batch = CacheDirectory::Create(registry_, policy, {}, config);
    ASSERT_TRUE(by_slot.ok() && by_batch.ok());
    std::mt19937_64 rng(23);
    auto take_dirty = [&](const std::string& where) {
      const CacheDirectory::Move a = by_slot->TakeDirty(), b = by_batch->TakeDirty();
      EXPECT_EQ(a.ids, b.ids) << where;
      EXPECT_EQ(a.slots, b.slots) << where;
      return a.ids.size();
    };
    size_t flushed = 0;
    std::map<std::string, int> seen;  // each case below, how often
    by_batch->MarkBatchDirty();       // before any batch: nothing to mark
    std::vector<int64_t> last_slots;  // of the last batch that went through
    for (int step = 0; step < 400; ++step) {
      const std::string where = "step " + std::to_string(step);
      std::vector<int64_t> ids(step % 97 == 96 ? 60000 : step % 3 == 0 ? 9000 : 700);
      for (auto& id : ids) {
        id = static_cast<int64_t>(std::min<double>(kRows - 1, std::exp(std::uniform_real_distribution<>(0, 9.9)(rng))));
      }
      auto a = by_slot->Assign(ids);
      auto b = by_batch->Assign(ids);
      ASSERT_EQ(a.ok(), b.ok()) << where;
      if (!a.ok()) {  // refused: the last batch is still the one before, and its backward may come now
        ++seen["refused"];
        if (step % 2 == 0 && !last_slots.empty()) {
          ++seen["refused, then the batch before trained"];
          by_slot->MarkDirty(last_slots);
          by_batch->MarkBatchDirty();
        }
        continue;
      }
      ASSERT_EQ(a->slots, b->slots) << where;
      ASSERT_EQ(a->write_back.ids, b->write_back.ids) << where;
      ASSERT_EQ(a->write_back.slots, b->write_back.slots) << where;
      ASSERT_EQ(a->load.ids, b->load.ids) << where;
      last_slots = a->slots;
      auto backward = [&] {
        by_slot->MarkDirty(a->slots);
        by_batch->MarkBatchDirty();
      };
      const uint64_t roll = rng() % 20;
      if (roll == 0) {
        ++seen["flushed before its backward"];
        flushed += take_dirty(where + ", flushed before its backward");
        backward();
      } else if (roll < 4) {
        ++seen["evaluation"];  // no backward: its rows are as they were
      } else if (roll == 4) {
        ++seen["flushed after its backward, then a second backward"];
        backward();
        flushed += take_dirty(where + ", flushed after its backward");
        backward();
      } else if (roll == 5) {
        ++seen["rows changed otherwise"];  // a checkpoint's load, a reset
        const std::vector<int64_t> some = {a->slots[0], a->slots[a->slots.size() / 2]};
        by_slot->MarkDirty(some);
        by_batch->MarkDirty(some);
      } else if (roll == 6) {
        ++seen["two backwards"];
        backward();
        backward();
      } else {
        backward();
      }
      if (step % 100 == 50) {  // purged, then a backward of the batch whose rows went
        ++seen["purged"];
        flushed += take_dirty(where + ", purged");
        by_slot->Clear();
        by_batch->Clear();
        backward();
      }
    }
    flushed += take_dirty("at the end");
    for (const char* c : {"refused", "refused, then the batch before trained", "flushed before its backward",
                          "evaluation", "flushed after its backward, then a second backward",
                          "rows changed otherwise", "two backwards", "purged"}) {
      EXPECT_GT(seen[c], 0) << c;
    }
    EXPECT_GT(seen["evaluation"], 40);
    EXPECT_GT(flushed, 0u);
    const CacheCounters &x = by_slot->counters(), &y = by_batch->counters();
    EXPECT_GT(x.write_backs, 1000);
    EXPECT_EQ(std::vector<int64_t>({x.lookups, x.hits, x.evictions, x.write_backs, x.reloads}),
              std::vector<int64_t>({y.lookups, y.hits, y.evictions, y.write_backs, y.reloads}));
  }
}


// Training and evaluation taking turns, batch by batch, for longer than the
// directory keeps runs of untrained batches (it then writes dirtiness into
// each slot's byte): the same write-backs as marks slot by slot, and the
// same rows at a flush.
TEST_F(CacheDirectoryTest, TrainingAndEvaluationTakingTurnsForLongWriteBackWhatSlotMarksDo) {
  const CacheDirectoryConfig config{.slots = 64, .ways = 4, .overflow = 16};
  auto by_slot = CacheDirectory::Create(registry_, "lru", {}, config);
  auto by_batch = CacheDirectory::Create(registry_, "lru", {}, config);
  ASSERT_TRUE(by_slot.ok() && by_batch.ok());
  std::mt19937_64 rng(29);
  int64_t write_backs = 0;
  for (int step = 0; step < 5000; ++step) {
    std::vector<int64_t> ids = Batch(rng, 6, 300);
    auto a = by_slot->Assign(ids);
    auto b = by_batch->Assign(ids);
    ASSERT_TRUE(a.ok() && b.ok()) << step;
    ASSERT_EQ(a->write_back.ids, b->write_back.ids) << step;
    ASSERT_EQ(a->write_back.slots, b->write_back.slots) << step;
    write_backs += static_cast<int64_t>(a->write_back.ids.size());
    if (step % 2 == 0 || step % 7 == 0) {  // trained; the other odd steps evaluate
      by_slot->MarkDirty(a->slots);
      by_batch->MarkBatchDirty();
    }
  }
  EXPECT_GT(write_backs, 1000);
  const CacheDirectory::Move x = by_slot->TakeDirty(), y = by_batch->TakeDirty();
  EXPECT_EQ(x.ids, y.ids);
  EXPECT_GT(x.ids.size(), 0u);
}

}  // namespace
}  // namespace shardrec
