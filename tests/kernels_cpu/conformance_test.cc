// The conformance kit's kernel checks: the CPU kernel passes every one (and
// skips none, since it declares every capability), and a kernel with
// deliberate bugs fails exactly the checks those bugs break — a kit that
// cannot fail proves nothing.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "kernel_test_util.h"
#include "shardrec/core/conformance.h"

namespace shardrec::testing {
namespace {

std::vector<ConformanceCheck> KernelChecks(const ComponentRef& ref) {
  std::vector<ConformanceCheck> checks = RunConformance(ref.library, PluginOptions());
  std::vector<ConformanceCheck> mine;
  for (const auto& c : checks) {
    if (c.component == "kernel " + ref.name()) mine.push_back(c);
  }
  return mine;
}

TEST(CpuKernelConformance, PassesEveryCheckAndSkipsNone) {
  const std::vector<ConformanceCheck> checks = KernelChecks(CpuKernelRef());
  int passed = 0;
  for (const auto& c : checks) {
    EXPECT_EQ(c.result, CheckResult::kPass) << c.check << ": " << c.detail;
    passed += c.result == CheckResult::kPass;
  }
  EXPECT_GE(passed, 30);
}

TEST(CpuKernelConformance, CatchesAKernelWithDeliberateBugs) {
  const ComponentRef ref = LoadComponent(
      (std::filesystem::path(SHARDREC_SLOPPY_KERNEL_DIR) / "libshardrec_kernel_sloppy.so").string(),
      SR_KIND_KERNEL, "sloppy");
  std::set<std::string> failed, passed, skipped;
  for (const auto& c : KernelChecks(ref)) {
    if (c.result == CheckResult::kFail) failed.insert(c.check);
    if (c.result == CheckResult::kPass) passed.insert(c.check);
    if (c.result == CheckResult::kSkip) skipped.insert(c.check);
  }
  const std::set<std::string> want_failed = {
      "forward sum with per-id weights (float32 tables)",
      "forward mean with per-id weights (float32 tables)",
      "forward with an id out of range (FATAL) writes nothing",
      "reset_rows restores the initial values (sdk::InitialWeight) of exactly the given rows",
  };
  EXPECT_EQ(failed, want_failed);
  EXPECT_TRUE(passed.count(
      "forward sum, two tables of different dims, an empty bag, output guards (float32 tables)"));
  EXPECT_TRUE(passed.count("forward mean (float32 tables)"));
  EXPECT_TRUE(passed.count("backward with sgd, two steps, repeated ids, matches the reference"));
  EXPECT_TRUE(passed.count(
      "initial weights equal sdk::InitialWeight at (global row, global column) (float32 tables)"));
  // Undeclared capabilities are skipped, not failed.
  EXPECT_TRUE(skipped.count("forward (float16 tables)"));
  EXPECT_TRUE(skipped.count("forward pooling none (float32 tables)"));
}

}  // namespace
}  // namespace shardrec::testing
