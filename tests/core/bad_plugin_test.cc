// Each way a library can be wrong is refused with one clear reason, the
// library is recorded as skipped, and the registry goes on working.
#include <gtest/gtest.h>

#include <fstream>

#include "fixture_paths.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec {
namespace {

using testing::Fixture;

struct BadCase {
  const char* variant;
  const char* kind;
  const char* name;
  const char* reason;  // a substring the refusal must contain
};

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.variant; }

class BadPluginTest : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadPluginTest, RefusedWithReasonAndRegistryGoesOn) {
  const BadCase& c = GetParam();
  HostServices services;
  PluginRegistry registry(&services);
  const Status s = registry.LoadLibrary(Fixture(c.variant, c.kind, c.name));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find(c.reason), std::string::npos) << s.ToString();
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << "one line: " << s.message();
  EXPECT_TRUE(registry.libraries().empty());
  ASSERT_EQ(registry.skipped().size(), 1u);
  // The host goes on: a good library still loads after the bad one.
  EXPECT_TRUE(registry.LoadLibrary(Fixture("good", "bundle", "fixture")).ok());
  EXPECT_EQ(registry.libraries().size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(
    Refusals, BadPluginTest,
    ::testing::Values(
        BadCase{"wrong_major", "eviction", "major", "ABI major 2 does not match host ABI major 1"},
        BadCase{"no_symbol", "eviction", "nosymbol", "missing entry symbol shardrec_plugin_get_api_v1"},
        BadCase{"null_entry", "eviction", "nullentry", "required entry 'score' is NULL"},
        BadCase{"small_struct", "eviction", "small", "struct_size 64 is smaller than the 96 bytes"},
        BadCase{"name_mismatch", "eviction", "misnamed",
                "plugin name 'somethingelse' does not match the file name's 'misnamed'"},
        BadCase{"kind_mismatch", "sharder", "kindwrong",
                "is of kind eviction but the file name says sharder"},
        BadCase{"init_fails", "eviction", "initfails",
                "initialize failed: the fixture's licence server is unreachable"},
        BadCase{"entry_throws", "eviction", "throws", "threw an exception across the C boundary"}),
    [](const auto& param_info) { return std::string(param_info.param.variant); });

TEST(BadPluginFiles, NotASharedLibraryEmptyFileMissingFileAndBadName) {
  const auto dir = testing::MakeTempDir("badfiles");
  {
    std::ofstream(dir / "libshardrec_eviction_text.so") << "this is not an ELF file\n";
    std::ofstream(dir / "libshardrec_eviction_empty.so");
    std::ofstream(dir / "plugin.so") << "x";
  }
  HostServices services;
  PluginRegistry registry(&services);
  Status text = registry.LoadLibrary(dir / "libshardrec_eviction_text.so");
  EXPECT_NE(text.message().find("not a shared library"), std::string::npos) << text.ToString();
  Status empty = registry.LoadLibrary(dir / "libshardrec_eviction_empty.so");
  EXPECT_EQ(empty.message(), "empty file");
  Status missing = registry.LoadLibrary(dir / "libshardrec_eviction_gone.so");
  EXPECT_EQ(missing.code(), SR_NOT_FOUND);
  Status badname = registry.LoadLibrary(dir / "plugin.so");
  EXPECT_NE(badname.message().find("libshardrec_<kind>_<name>.so"), std::string::npos);
  EXPECT_EQ(registry.skipped().size(), 4u);
  std::filesystem::remove_all(dir);
}

TEST(BadPluginFiles, DirectoryScanSkipsBadOnesAndLoadsTheRest) {
  const auto dir = testing::MakeTempDir("scan");
  std::filesystem::copy_file(Fixture("good", "bundle", "fixture"), dir / "libshardrec_bundle_fixture.so");
  std::filesystem::copy_file(Fixture("wrong_major", "eviction", "major"),
                             dir / "libshardrec_eviction_major.so");
  std::ofstream(dir / "libshardrec_eviction_empty.so");
  std::ofstream(dir / "README.txt") << "not a plugin, not even looked at\n";
  HostServices services;
  PluginRegistry registry(&services);
  DiscoveryOptions d;
  d.plugin_dirs = {dir, dir / "does_not_exist"};
  d.use_environment = false;
  d.use_default_dir = false;
  registry.Discover(d);
  ASSERT_EQ(registry.libraries().size(), 1u);
  EXPECT_EQ(registry.libraries()[0]->name(), "fixture");
  ASSERT_EQ(registry.skipped().size(), 3u);  // wrong major, empty, missing directory
  bool saw_missing_dir = false;
  for (const auto& s : registry.skipped()) {
    saw_missing_dir |= s.reason.message() == "plugin directory does not exist";
  }
  EXPECT_TRUE(saw_missing_dir);
  std::filesystem::remove_all(dir);
}

TEST(BadPluginFiles, DuplicateComponentRefusedNamingBothFiles) {
  HostServices services;
  PluginRegistry registry(&services);
  const auto a = Fixture("dup_a", "eviction", "dup_a");
  const auto b = Fixture("dup_b", "eviction", "dup_b");
  ASSERT_TRUE(registry.LoadLibrary(a).ok());
  Status s = registry.LoadLibrary(b);
  EXPECT_EQ(s.code(), SR_ALREADY_EXISTS);
  EXPECT_NE(s.message().find(a.string()), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(b.string()), std::string::npos) << s.message();
  EXPECT_EQ(registry.libraries().size(), 1u);
}

}  // namespace
}  // namespace shardrec
