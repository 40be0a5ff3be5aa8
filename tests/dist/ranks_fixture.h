// A test fixture for the distribution engine: runs a body on N ranks as
// threads of this process, over the comm backend named by the test
// parameter ("local" or "gloo", the latter through an in-process rendezvous).
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <thread>
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
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        ProcessGroupConfig c;
        c.comm = GetParam();
        c.rendezvous = "local:" + name;
        c.prefix = "test";
        c.timeout_ms = 20000;
        c.placement = {r, world, r, world};
        auto g = ProcessGroup::Create(registry_, c);
        ASSERT_TRUE(g.ok()) << g.status().ToString();
        body(g.value());
      });
    }
    for (auto& t : threads) t.join();
  }
  HostServices services_;
  PluginRegistry registry_{&services_};
};

}  // namespace shardrec
