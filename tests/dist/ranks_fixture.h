// A test fixture for the distribution engine: runs a body on N ranks as
// threads of this process, over the comm backend named by the test
// parameter ("local" or "gloo", the latter through an in-process rendezvous).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/host_services.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec {

class RanksTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const auto path = std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / ("libshardrec_comm_" + GetParam() + ".so");
    if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " was not built";
    ASSERT_TRUE(registry_.LoadLibrary(path).ok());
  }
  // Runs body(group) on `world` threads.
  void OnRanks(int world, const std::function<void(const ProcessGroup&)>& body) {
    static std::atomic<int> job{0};
    const std::string name = "dist_test_" + std::to_string(::getpid()) + "_" + std::to_string(++job);
    ProcessGroupConfig c;
    c.comm = GetParam();
    c.rendezvous = "local:" + name;
    c.prefix = "test";
    c.timeout_ms = 20000;
    auto ref = registry_.Find(SR_KIND_COMM, GetParam());
    ASSERT_TRUE(ref.ok()) << ref.status().ToString();
    RunRanksAsThreads(ref.value(), c, world, [&](int, StatusOr<ProcessGroup> g) {
      ASSERT_TRUE(g.ok()) << g.status().ToString();
      body(g.value());
    });
  }
  HostServices services_;
  PluginRegistry registry_{&services_};
};

}  // namespace shardrec
