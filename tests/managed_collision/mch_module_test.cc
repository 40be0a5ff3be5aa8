// MchManagedCollisionModule against the brute-force TorchRec reference:
// the same rows for every id of every step, the same evicted rows at every
// round and the same slot holders, over random streams built to tie (few
// distinct ids, small counts) for each policy, decay, interval and
// threshold filter. Then buckets, the residual range, the input hash,
// counters and bad input.
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "../core/fixture_paths.h"
#include "mch_reference.h"
#include "shardrec/core/host_services.h"
#include "shardrec/core/managed_collision/managed_collision_collection.h"
#include "shardrec/core/managed_collision/mch_module.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec {
namespace {

using testing::ReferenceMch;

class MchModuleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_eviction_builtin.so")
            .ok());
  }
  MchManagedCollisionModule Make(ManagedCollisionConfig c, BucketRange range = {}) {
    auto m = MchManagedCollisionModule::Create(registry_, "t", std::move(c), range);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    return std::move(m).value();
  }

  HostServices services_;
  PluginRegistry registry_{&services_};
};

struct Case {
  std::string policy;
  double decay;
  int64_t interval;
  std::string threshold;
  double skew;
};

std::string Name(const Case& c) {
  return c.policy + " decay " + std::to_string(c.decay) + " interval " + std::to_string(c.interval) + " threshold " +
         c.threshold + " x" + std::to_string(c.skew);
}

TEST_F(MchModuleTest, MatchesTheReferenceStepByStep) {
  std::vector<Case> cases;
  for (std::string policy : {"lru", "lfu", "distance_lfu"}) {
    for (int64_t interval : {1, 2, 3}) cases.push_back({policy, 1.0, interval, "none", 10});
    cases.push_back({policy, 2.0, 2, "none", 10});
    cases.push_back({policy, 1.0, 2, "average", 10});
    cases.push_back({policy, 1.0, 1, "dynamic", 0.5});
  }
  for (const Case& c : cases) {
    int64_t rounds_with_evictions = 0;
    for (int64_t zch : {2, 5, 9}) {
      for (uint64_t seed = 1; seed <= 20; ++seed) {
        SCOPED_TRACE(Name(c) + " zch " + std::to_string(zch) + " seed " + std::to_string(seed));
        ManagedCollisionConfig config;
        config.zch_size = zch;
        config.eviction_interval = c.interval;
        config.policy = c.policy;
        if (c.policy != "lfu") config.policy_options.Set("decay_exponent", std::to_string(c.decay));
        config.threshold = c.threshold == "average"   ? ThresholdFilter::kAverage
                           : c.threshold == "dynamic" ? ThresholdFilter::kDynamic
                                                      : ThresholdFilter::kNone;
        config.threshold_skew_multiplier = c.skew;
        config.eviction_mode = EvictionMode::kExact;  // TorchRec's rule, its tie order included
        MchManagedCollisionModule module = Make(config);
        ReferenceMch ref(zch, c.interval,
                         c.policy == "lru"   ? ReferenceMch::Policy::kLru
                         : c.policy == "lfu" ? ReferenceMch::Policy::kLfu
                                             : ReferenceMch::Policy::kDistanceLfu,
                         c.decay,
                         c.threshold == "average"   ? ReferenceMch::Filter::kAverage
                         : c.threshold == "dynamic" ? ReferenceMch::Filter::kDynamic
                                                    : ReferenceMch::Filter::kNone,
                         c.skew);
        std::mt19937_64 rng(seed);
        // Few distinct ids (some negative, some huge) so that counts tie often.
        const std::vector<int64_t> universe{-7, 0, 1, 2, 3, 5, 8, 13, 21, 34, 1'000'000'007, INT64_MAX - 1, INT64_MIN};
        for (int step = 0; step < 40; ++step) {
          std::vector<int64_t> ids(rng() % 7);
          for (auto& id : ids) id = universe[rng() % (step < 20 ? 6 : universe.size())];
          const bool training = step % 9 != 8;
          std::vector<int64_t> rows(ids.size());
          ASSERT_TRUE(module.Forward(ids, rows, training).ok());
          ASSERT_EQ(rows, ref.Forward(ids, training)) << "step " << step;
          const auto evicted = module.TakeEvictedRows();
          ASSERT_EQ(evicted, ref.TakeEvicted()) << "step " << step;
          rounds_with_evictions += !evicted.empty();
        }
        std::map<int64_t, int64_t> slots;
        for (const auto& s : module.Slots()) {
          if (s.occupied) slots[s.row] = s.id;
        }
        EXPECT_EQ(slots, ref.Slots());
      }
    }
    // The streams must make ids lose their slots, or the test shows little.
    EXPECT_GE(rounds_with_evictions, 10) << Name(c);
  }
}

TEST_F(MchModuleTest, BucketsAreIndependentReferences) {
  ManagedCollisionConfig config;
  config.zch_size = 30;  // buckets of 10 slots
  config.buckets = 3;
  config.eviction_interval = 2;
  config.policy = "lfu";
  config.eviction_mode = EvictionMode::kExact;
  MchManagedCollisionModule module = Make(config);
  std::vector<ReferenceMch> refs(3, ReferenceMch(10, 2, ReferenceMch::Policy::kLfu));
  std::mt19937_64 rng(5);
  for (int step = 0; step < 30; ++step) {
    std::vector<int64_t> ids(40);
    for (auto& id : ids) id = static_cast<int64_t>(rng() % 60);
    std::vector<int64_t> rows(ids.size());
    ASSERT_TRUE(module.Forward(ids, rows, true).ok());
    // Each bucket sees its own ids in input order.
    std::vector<std::vector<int64_t>> per(3);
    std::vector<std::vector<size_t>> where(3);
    for (size_t i = 0; i < ids.size(); ++i) {
      const auto b = static_cast<size_t>(module.BucketOf(ids[i]));
      per[b].push_back(ids[i]);
      where[b].push_back(i);
    }
    std::vector<int64_t> evicted;
    for (size_t b = 0; b < 3; ++b) {
      const auto want = refs[b].Forward(per[b], true);
      for (size_t k = 0; k < want.size(); ++k) {
        ASSERT_EQ(rows[where[b][k]], static_cast<int64_t>(b) * 10 + want[k]) << "step " << step << " bucket " << b;
      }
      for (int64_t r : refs[b].TakeEvicted()) evicted.push_back(static_cast<int64_t>(b) * 10 + r);
    }
    std::sort(evicted.begin(), evicted.end());
    ASSERT_EQ(module.TakeEvictedRows(), evicted);
  }
  // Every bucket got ids: the hash spreads them.
  std::set<int64_t> used;
  for (int64_t id = 0; id < 60; ++id) used.insert(module.BucketOf(id));
  EXPECT_EQ(used.size(), 3u);
}

TEST_F(MchModuleTest, ResidualRangeTakesTheMisses) {
  ManagedCollisionConfig config;
  config.zch_size = 4;
  config.mch_size = 16;
  config.policy = "lru";
  MchManagedCollisionModule module = Make(config);
  std::vector<int64_t> ids{100, 200, 300, 100}, rows(4);
  ASSERT_TRUE(module.Forward(ids, rows, /*training=*/false).ok());
  for (int64_t r : rows) EXPECT_TRUE(r >= 4 && r < 20) << r;
  EXPECT_EQ(rows[0], rows[3]) << "the same id hashes to the same residual row";
  ASSERT_TRUE(module.Forward(ids, rows, /*training=*/true).ok());  // round: 3 ids, 3 free slots
  for (int64_t r : rows) EXPECT_TRUE(r >= 0 && r < 3) << r;
  const ManagedCollisionStats s = module.stats();
  EXPECT_EQ(s.lookups, 8);
  EXPECT_EQ(s.residual, 4);
  EXPECT_EQ(s.hits, 4);
  EXPECT_EQ(s.defaulted, 0);
  EXPECT_EQ(s.admissions, 3);
  EXPECT_EQ(s.occupied, 3);
  EXPECT_EQ(s.capacity, 3);
}

TEST_F(MchModuleTest, InputHashMapsIntoItsRange) {
  ManagedCollisionConfig config;
  config.zch_size = 8;
  config.input_hash = IdHash::kFmix64;
  config.input_hash_size = 1000;
  MchManagedCollisionModule module = Make(config);
  std::vector<int64_t> ids{-5, 0, INT64_MAX, 123456789};
  std::vector<int64_t> copy = ids;
  module.Preprocess(copy);
  for (int64_t h : copy) EXPECT_TRUE(h >= 0 && h < 1000) << h;
  std::vector<int64_t> again = ids;
  module.Preprocess(again);
  EXPECT_EQ(copy, again);
}

TEST_F(MchModuleTest, CountersAddUp) {
  ManagedCollisionConfig config;
  config.zch_size = 101;
  config.eviction_interval = 3;
  config.policy = "distance_lfu";
  MchManagedCollisionModule module = Make(config);
  std::mt19937_64 rng(9);
  std::vector<int64_t> ids(500), rows(500);
  for (int step = 0; step < 30; ++step) {
    for (auto& id : ids) id = static_cast<int64_t>(rng() % 1000);
    ASSERT_TRUE(module.Forward(ids, rows, true).ok());
    for (int64_t r : rows) ASSERT_TRUE(r >= 0 && r < 101);
  }
  const ManagedCollisionStats s = module.stats();
  EXPECT_EQ(s.lookups, 30 * 500);
  EXPECT_EQ(s.hits + s.defaulted + s.residual, s.lookups);
  EXPECT_EQ(s.rounds, 10);
  EXPECT_EQ(s.capacity, 100);
  EXPECT_EQ(s.occupied, 100);
  EXPECT_GT(s.evictions, 0);
  EXPECT_EQ(s.admissions, s.evictions + 100) << "the first 100 admissions filled empty slots";
  EXPECT_GT(s.refusals, 0);
  EXPECT_GT(s.hit_rate(), 0.05);
  EXPECT_NEAR(s.default_rate(), 1.0 - s.hit_rate(), 1e-12);
}

TEST_F(MchModuleTest, BadConfigsAreRefusedByName) {
  auto parse = [](const std::string& spec) { return ParseManagedCollision("users", spec); };
  auto zero = parse("zch_size=0");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("users"), std::string::npos);
  EXPECT_NE(zero.status().message().find("zch_size must be > 0"), std::string::npos);
  auto interval = parse("zch_size=10,eviction_interval=0");
  ASSERT_FALSE(interval.ok());
  EXPECT_NE(interval.status().message().find("eviction_interval must be > 0"), std::string::npos);
  EXPECT_FALSE(parse("eviction_interval=3").ok()) << "zch_size is required";
  EXPECT_FALSE(parse("zch_size=ten").ok());
  EXPECT_FALSE(parse("zch_size=10,threshold=median").ok());
  EXPECT_FALSE(parse("zch_size=10,buckets=6").ok()) << "fewer than 2 slots per bucket";
  auto ok = parse("zch_size=10,policy=lfu,eviction_interval=4,threshold=dynamic,threshold_skew_multiplier=2");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  auto round_trip = parse(ManagedCollisionSpec(ok.value()));
  ASSERT_TRUE(round_trip.ok());
  EXPECT_EQ(ManagedCollisionSpec(round_trip.value()), ManagedCollisionSpec(ok.value()));

  ManagedCollisionConfig unknown;
  unknown.zch_size = 10;
  unknown.policy = "clairvoyant";
  auto m = MchManagedCollisionModule::Create(registry_, "users", unknown);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("users"), std::string::npos);
  EXPECT_NE(m.status().message().find("lru"), std::string::npos) << "lists what exists: " << m.status().message();

  ManagedCollisionConfig bad_option;
  bad_option.zch_size = 10;
  bad_option.policy_options.Set("decay_exponent", "-1");
  EXPECT_FALSE(MchManagedCollisionModule::Create(registry_, "users", bad_option).ok());
}

TEST_F(MchModuleTest, AFailingPolicyChangesNothing) {
  const auto lib = testing::Fixture("score_throws", "eviction", "scorethrows");
  ASSERT_TRUE(registry_.LoadLibrary(lib).ok());
  std::string name;
  for (const auto& ref : registry_.Components(SR_KIND_EVICTION)) {
    if (ref.library->path() == std::filesystem::absolute(lib)) name = ref.name();
  }
  ASSERT_FALSE(name.empty());

  // Two tables: the healthy one must not run its round either.
  EmbeddingTableConfig a, b;
  a.name = "a", a.num_embeddings = 4, a.embedding_dim = 2, a.feature_names = {"fa"};
  b.name = "b", b.num_embeddings = 4, b.embedding_dim = 2, b.feature_names = {"fb"};
  ManagedCollisionConfig good, bad;
  good.zch_size = bad.zch_size = 4;
  good.eviction_interval = bad.eviction_interval = 2;
  bad.policy = name;
  auto mcc = ManagedCollisionCollection::Create(registry_, {a, b}, {{"a", good}, {"b", bad}});
  ASSERT_TRUE(mcc.ok()) << mcc.status().ToString();
  auto kjt = KeyedJaggedTensor::FromLengths({"fa", "fb"}, {11, 12, 21, 22}, {2, 2});
  ASSERT_TRUE(kjt.ok());
  auto first = mcc->Forward(kjt.value(), true);  // step 1: no round yet
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  auto failed = mcc->Forward(kjt.value(), true);  // step 2: the rounds
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("table b"), std::string::npos) << failed.status().message();
  EXPECT_NE(failed.status().message().find("nothing was applied"), std::string::npos) << failed.status().message();
  for (const auto& module : mcc->modules()) {
    EXPECT_EQ(module.iteration(), 1) << module.table();
    EXPECT_EQ(module.stats().occupied, 0) << module.table();
    EXPECT_EQ(module.stats().lookups, 4 / 2) << module.table();
  }
  EXPECT_TRUE(mcc->Evict().empty());
  // Retrying fails the same way, and inference still works.
  EXPECT_FALSE(mcc->Forward(kjt.value(), true).ok());
  auto eval = mcc->Forward(kjt.value(), false);
  ASSERT_TRUE(eval.ok());
  EXPECT_EQ(eval->values(), (std::vector<int64_t>{3, 3, 3, 3})) << "every id reads its table's default row";
}

}  // namespace
}  // namespace shardrec
