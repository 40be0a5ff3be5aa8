// Where the test fixtures were built (tests/fixtures/Fixtures.cmake).
#pragma once

#include <filesystem>
#include <string>

#include <unistd.h>

namespace shardrec::testing {

// The library of fixture `variant`, e.g. Fixture("wrong_major", "eviction", "major").
inline std::filesystem::path Fixture(const std::string& variant, const std::string& kind,
                                     const std::string& name) {
  return std::filesystem::path(SHARDREC_FIXTURE_DIR) / variant /
         ("libshardrec_" + kind + "_" + name + ".so");
}

// A fresh empty directory under the system temp dir, removed by the caller.
inline std::filesystem::path MakeTempDir(const std::string& tag) {
  auto dir = std::filesystem::temp_directory_path() /
             ("shardrec_" + tag + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace shardrec::testing
