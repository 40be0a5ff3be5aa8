// The conformance kit passes well-behaved plugins and catches broken ones:
// a kit that cannot fail proves nothing.
#include <gtest/gtest.h>

#include <set>

#include "fixture_paths.h"
#include "shardrec/core/conformance.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec {
namespace {

using testing::Fixture;

std::vector<ConformanceCheck> Check(const std::filesystem::path& path) {
  static HostServices services;
  PluginRegistry registry(&services);
  Status s = registry.LoadLibrary(path);
  EXPECT_TRUE(s.ok()) << s.ToString();
  if (!s.ok()) return {};
  return RunConformance(registry.libraries()[0], PluginOptions());
}

std::set<std::string> Failed(const std::vector<ConformanceCheck>& checks) {
  std::set<std::string> failed;
  for (const auto& c : checks) {
    if (c.result == CheckResult::kFail) failed.insert(c.check + " (" + c.detail + ")");
  }
  return failed;
}

// The names of the checks that failed (`failed`), or of the others.
std::set<std::string> Names(const std::vector<ConformanceCheck>& checks, bool failed) {
  std::set<std::string> names;
  for (const auto& c : checks) {
    if ((c.result == CheckResult::kFail) == failed) names.insert(c.check);
  }
  return names;
}

TEST(Conformance, BuiltinEvictionPoliciesPass) {
  auto checks = Check(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) /
                      "libshardrec_eviction_builtin.so");
  EXPECT_GE(checks.size(), 30u);
  EXPECT_TRUE(Failed(checks).empty()) << *Failed(checks).begin();
}

TEST(Conformance, FixtureBundleWithSharderAndPolicyPasses) {
  auto checks = Check(Fixture("good", "bundle", "fixture"));
  EXPECT_TRUE(Failed(checks).empty()) << *Failed(checks).begin();
  bool saw_sharder = false;
  for (const auto& c : checks) saw_sharder |= c.check.find("placement valid") != std::string::npos;
  EXPECT_TRUE(saw_sharder);
}

TEST(Conformance, SloppyPluginFails) {
  auto checks = Check(Fixture("nonconforming", "eviction", "sloppy"));
  const std::set<std::string> names = Names(checks, /*failed=*/true);
  EXPECT_TRUE(names.count("create refuses an unknown option"));
  EXPECT_TRUE(names.count("every score is a number (finite or -inf)"));
  EXPECT_TRUE(names.count("score refuses a float32 scores tensor"));
}

// A policy that declares `incremental` but scores -count: an access lowers
// its score, and the kit says so.
TEST(Conformance, AFalseIncrementalPromiseFails) {
  auto checks = Check(Fixture("false_incremental", "eviction", "falseinc"));
  const std::set<std::string> failed = Names(checks, /*failed=*/true),
                              passed = Names(checks, /*failed=*/false);
  EXPECT_TRUE(failed.count("incremental: an access never lowers a score")) << checks.size();
  EXPECT_TRUE(passed.count("incremental: idle entries keep their order at any now"));
}

// A policy that declares `incremental` and keeps the order promises, but
// scores each entry against the others in the call: the incremental round
// scores holders and candidates in separate calls, and the kit says so.
TEST(Conformance, AnIncrementalScoreThatDependsOnTheOtherEntriesFails) {
  auto checks = Check(Fixture("relative_incremental", "eviction", "relativeinc"));
  const std::set<std::string> failed = Names(checks, /*failed=*/true),
                              passed = Names(checks, /*failed=*/false);
  EXPECT_TRUE(failed.count("incremental: an entry's score depends on that entry alone")) << checks.size();
  EXPECT_TRUE(passed.count("incremental: idle entries keep their order at any now"));
  EXPECT_TRUE(passed.count("incremental: an access never lowers a score"));
}

TEST(Conformance, BuiltinIncrementalPoliciesKeepTheirPromise) {
  auto checks = Check(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_eviction_builtin.so");
  size_t promises = 0;
  for (const auto& c : checks) promises += c.check.rfind("incremental:", 0) == 0 && c.result == CheckResult::kPass;
  EXPECT_EQ(promises, 2u * 4u) << "lru and lfu, four checks each";
}

}  // namespace
}  // namespace shardrec
