// Discovery and version handling of the plugin registry: the frozen v1.0
// fixture and a newer-minor fixture load (ABI rule 2), the directory beside
// the executable and SHARDREC_PLUGIN_PATH are scanned, lookups name what
// exists, and a library stays loaded exactly as long as something uses it.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <tuple>
#include <optional>

#include "fixture_paths.h"
#include "shardrec/core/dl_view.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec {
namespace {

using testing::Fixture;

// Scores 3 candidates with `policy` and returns the scores.
std::vector<double> ScoreThree(const EvictionPolicy& policy) {
  std::vector<int64_t> counts{5, 1, 9}, last{3, 4, 1}, window{1, 1, 0};
  std::vector<double> scores(3, -1);
  DLView c(counts.data(), {3}), l(last.data(), {3}), w(window.data(), {3}), s(scores.data(), {3});
  sr_eviction_score_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_eviction_score_args, scores);
  a.now = 5;
  a.num_candidates = 3;
  a.counts = c.get();
  a.last_access = l.get();
  a.window_counts = w.get();
  a.scores = s.get();
  Status st = policy.Score(a);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return scores;
}

DiscoveryOptions Only(std::vector<std::filesystem::path> files) {
  DiscoveryOptions d;
  d.plugin_files = std::move(files);
  d.use_environment = false;
  d.use_default_dir = false;
  return d;
}

TEST(Registry, FrozenV10PluginLoadsAndWorks) {
  HostServices services;
  PluginRegistry registry(&services);
  registry.Discover(Only({Fixture("frozen", "eviction", "frozen")}));
  ASSERT_EQ(registry.libraries().size(), 1u) << registry.skipped()[0].reason.ToString();
  EXPECT_EQ(registry.libraries()[0]->AbiVersion(), "1.0");
  auto ref = registry.Find(SR_KIND_EVICTION, "frozen_lfu");
  ASSERT_TRUE(ref.ok());
  auto policy = EvictionPolicy::Create(ref.value(), OptionList());
  ASSERT_TRUE(policy.ok()) << policy.status().ToString();
  EXPECT_EQ(ScoreThree(policy.value()), (std::vector<double>{5, 1, 9}));
}

TEST(Registry, NewerMinorPluginLoadsAndItsExtraFieldsAreIgnored) {
  HostServices services;
  PluginRegistry registry(&services);
  registry.Discover(Only({Fixture("newer_minor", "eviction", "newer")}));
  ASSERT_EQ(registry.libraries().size(), 1u) << registry.skipped()[0].reason.ToString();
  EXPECT_EQ(registry.libraries()[0]->AbiVersion(),
            std::to_string(SR_ABI_MAJOR) + "." + std::to_string(SR_ABI_MINOR + 1));
  auto ref = registry.Find(SR_KIND_EVICTION, "newer_policy");
  ASSERT_TRUE(ref.ok());
  EXPECT_GT(ref->component->struct_size, sizeof(sr_component));
  auto policy = EvictionPolicy::Create(ref.value(), OptionList());
  ASSERT_TRUE(policy.ok());
  EXPECT_FALSE(policy->HasSelect());
  EXPECT_EQ(ScoreThree(policy.value()), (std::vector<double>{5, 1, 9}));
}

TEST(Registry, AComponentOfANewerMinorsKindIsSkipped) {
  HostServices services;
  PluginRegistry registry(&services);
  registry.Discover(Only({Fixture("future_kind", "bundle", "future")}));
  ASSERT_EQ(registry.libraries().size(), 1u) << registry.skipped()[0].reason.ToString();
  EXPECT_TRUE(registry.Find(SR_KIND_EVICTION, "future_policy").ok()) << "the known component loads";
  EXPECT_EQ(registry.libraries()[0]->Components().size(), 1u) << "the future kind's component is not offered";
  for (int32_t kind : {SR_KIND_SHARDER, SR_KIND_KERNEL, SR_KIND_COMM, SR_KIND_EVICTION, SR_KIND_CODEC}) {
    for (const auto& c : registry.Components(kind)) EXPECT_NE(c.name(), "future_thing");
  }
  // At this host's own minor an unknown kind is an error, naming it.
  PluginRegistry strict(&services);
  strict.Discover(Only({Fixture("unknown_kind", "bundle", "unknownkind")}));
  ASSERT_EQ(strict.libraries().size(), 0u);
  ASSERT_EQ(strict.skipped().size(), 1u);
  EXPECT_NE(strict.skipped()[0].reason.message().find("unknown kind 99"), std::string::npos)
      << strict.skipped()[0].reason.ToString();
}

TEST(Registry, DefaultDirectoryBesideTheExecutableHoldsTheBuiltPlugins) {
  EXPECT_EQ(std::filesystem::weakly_canonical(DefaultPluginDir()),
            std::filesystem::weakly_canonical(SHARDREC_BUILT_PLUGIN_DIR));
  HostServices services;
  PluginRegistry registry(&services);
  DiscoveryOptions d;
  d.use_environment = false;
  registry.Discover(d);
  EXPECT_TRUE(registry.Find(SR_KIND_EVICTION, "lru").ok());
  EXPECT_TRUE(registry.Find(SR_KIND_EVICTION, "distance_lfu").ok());
}

TEST(Registry, EnvironmentPathIsScanned) {
  const auto dir = testing::MakeTempDir("envpath");
  std::filesystem::copy_file(Fixture("good", "bundle", "fixture"), dir / "libshardrec_bundle_fixture.so");
  const std::string value = "/nonexistent_for_test:" + dir.string();
  ASSERT_EQ(setenv("SHARDREC_PLUGIN_PATH", value.c_str(), 1), 0);
  HostServices services;
  PluginRegistry registry(&services);
  DiscoveryOptions d;
  d.use_default_dir = false;
  registry.Discover(d);
  unsetenv("SHARDREC_PLUGIN_PATH");
  EXPECT_TRUE(registry.Find(SR_KIND_SHARDER, "fixture_one_rank").ok());
  ASSERT_EQ(registry.skipped().size(), 1u);
  EXPECT_EQ(registry.skipped()[0].path, "/nonexistent_for_test");
  std::filesystem::remove_all(dir);
}

// Issue 16, defect 9: a command loads only the kinds it uses. Here a
// directory holds an eviction plugin whose initialize() segfaults: a
// discovery for kernels must not touch it (this test would crash).
TEST(Registry, OnlyTheKindsAskedForAreLoaded) {
  const auto dir = testing::MakeTempDir("kinds");
  std::filesystem::copy_file(Fixture("init_crashes", "eviction", "initcrashes"),
                             dir / "libshardrec_eviction_initcrashes.so");
  std::filesystem::copy_file(Fixture("good", "bundle", "fixture"), dir / "libshardrec_bundle_fixture.so");
  HostServices services;
  PluginRegistry registry(&services);
  DiscoveryOptions d;
  d.use_environment = false;
  d.use_default_dir = false;
  d.plugin_dirs = {dir};
  d.kinds = {SR_KIND_KERNEL};
  registry.Discover(d);
  EXPECT_TRUE(registry.skipped().empty()) << registry.skipped()[0].reason.ToString();
  ASSERT_EQ(registry.libraries().size(), 1u) << "bundles are always loaded";
  EXPECT_EQ(registry.libraries()[0]->name(), "fixture");
  std::filesystem::remove_all(dir);
}

// Issue 16, defect 10: places another user could write are refused, and so
// are the current directory and relative SHARDREC_PLUGIN_PATH entries,
// unless allow_unsafe_paths (then loaded with a warning).
TEST(Registry, UnsafePluginPathsAreRefusedUnlessAllowed) {
  const auto dir = testing::MakeTempDir("unsafe");
  const auto lib = dir / "libshardrec_bundle_fixture.so";
  std::filesystem::copy_file(Fixture("good", "bundle", "fixture"), lib);
  auto discover = [&](DiscoveryOptions d, bool allow) {
    HostServices services;
    auto registry = std::make_unique<PluginRegistry>(&services);
    d.use_default_dir = false;
    d.allow_unsafe_paths = allow;
    registry->Discover(d);
    const bool loaded = registry->Find(SR_KIND_SHARDER, "fixture_one_rank").ok();
    const std::string why = registry->skipped().empty() ? "" : registry->skipped()[0].reason.message();
    return std::make_pair(loaded, why);
  };
  DiscoveryOptions by_dir;
  by_dir.use_environment = false;
  by_dir.plugin_dirs = {dir};
  EXPECT_TRUE(discover(by_dir, false).first);

  std::filesystem::permissions(dir, std::filesystem::perms::others_write, std::filesystem::perm_options::add);
  auto [loaded, why] = discover(by_dir, false);
  EXPECT_FALSE(loaded);
  EXPECT_NE(why.find(dir.string() + " is world-writable"), std::string::npos) << why;
  EXPECT_TRUE(discover(by_dir, true).first);
  std::filesystem::permissions(dir, std::filesystem::perms::others_write, std::filesystem::perm_options::remove);

  std::filesystem::permissions(lib, std::filesystem::perms::others_write, std::filesystem::perm_options::add);
  DiscoveryOptions by_file;
  by_file.use_environment = false;
  by_file.plugin_files = {lib};
  std::tie(loaded, why) = discover(by_file, false);
  EXPECT_FALSE(loaded);
  EXPECT_NE(why.find(lib.string() + " is world-writable"), std::string::npos) << why;
  std::filesystem::permissions(lib, std::filesystem::perms::others_write, std::filesystem::perm_options::remove);

  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir);
  DiscoveryOptions dot;
  dot.use_environment = false;
  dot.plugin_dirs = {"."};
  std::tie(loaded, why) = discover(dot, false);
  EXPECT_FALSE(loaded);
  EXPECT_NE(why.find("is the current directory"), std::string::npos) << why;
  EXPECT_TRUE(discover(dot, true).first);
  ASSERT_EQ(setenv("SHARDREC_PLUGIN_PATH", ".", 1), 0);
  DiscoveryOptions env;
  std::tie(loaded, why) = discover(env, false);
  unsetenv("SHARDREC_PLUGIN_PATH");
  std::filesystem::current_path(cwd);
  EXPECT_FALSE(loaded);
  EXPECT_NE(why.find("is relative"), std::string::npos) << why;
  std::filesystem::remove_all(dir);
}

TEST(Registry, FindNamesWhatExistsAndDefaultsToPriority) {
  HostServices services;
  PluginRegistry registry(&services);
  DiscoveryOptions d;
  d.use_environment = false;
  registry.Discover(d);
  auto missing = registry.Find(SR_KIND_EVICTION, "arc");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), SR_NOT_FOUND);
  EXPECT_NE(missing.status().message().find("unknown eviction 'arc' (available: lru, lfu, distance_lfu)"),
            std::string::npos)
      << missing.status().message();
  auto best = registry.Find(SR_KIND_EVICTION, "");
  ASSERT_TRUE(best.ok());
  EXPECT_EQ(best->name(), "lru");  // priority 10
  auto comm = registry.Find(SR_KIND_COMM, "");
  ASSERT_TRUE(comm.ok());
  EXPECT_EQ(comm->name(), "local");  // priority 10, above gloo's 5
}

TEST(Registry, SameFileTwiceIsLoadedOnce) {
  HostServices services;
  PluginRegistry registry(&services);
  const auto good = Fixture("good", "bundle", "fixture");
  registry.Discover(Only({good, good}));
  EXPECT_EQ(registry.libraries().size(), 1u);
  EXPECT_TRUE(registry.skipped().empty());
}

bool IsMapped(const std::filesystem::path& path) {
  void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
  if (h != nullptr) dlclose(h);  // drop the reference NOLOAD just took
  return h != nullptr;
}

TEST(Registry, LibraryOutlivesItsObjectsAndIsUnloadedAfterThem) {
  const auto path = Fixture("good", "bundle", "fixture");
  ASSERT_FALSE(IsMapped(path));
  HostServices services;
  std::optional<EvictionPolicy> policy;
  {
    PluginRegistry registry(&services);
    registry.Discover(Only({path}));
    auto ref = registry.Find(SR_KIND_EVICTION, "fixture_recency");
    ASSERT_TRUE(ref.ok());
    auto created = EvictionPolicy::Create(ref.value(), OptionList());
    ASSERT_TRUE(created.ok());
    policy.emplace(std::move(created).value());
  }  // the registry is gone; the policy keeps its library loaded
  EXPECT_TRUE(IsMapped(path));
  EXPECT_EQ(ScoreThree(*policy), (std::vector<double>{3, 4, 1}));
  policy.reset();
  EXPECT_FALSE(IsMapped(path)) << "hidden visibility should let the library unload";
}

}  // namespace
}  // namespace shardrec
