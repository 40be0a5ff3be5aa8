// Binary metrics against values worked by hand, and over ranks (threads)
// against one process.
#include <gtest/gtest.h>

#include <cmath>
#include <mutex>

#include "dist/ranks_fixture.h"
#include "shardrec/core/metrics/binary_metrics.h"

namespace shardrec::metrics {
namespace {

TEST(BinaryMetrics, AucByHand) {
  EXPECT_EQ(Auc(std::vector<float>{0.1f, 0.4f, 0.35f, 0.8f}, std::vector<float>{0, 0, 1, 1}), 0.75);  // sklearn's example
  EXPECT_EQ(Auc(std::vector<float>{1, 2, 3}, std::vector<float>{0, 0, 1}), 1.0);
  EXPECT_EQ(Auc(std::vector<float>{3, 2, 1}, std::vector<float>{0, 0, 1}), 0.0);
  // Ties count half: one positive tied with one of two negatives.
  EXPECT_EQ(Auc(std::vector<float>{1, 1, 0}, std::vector<float>{1, 0, 0}), 0.75);
  EXPECT_EQ(Auc(std::vector<float>{5, 5, 5, 5}, std::vector<float>{1, 0, 1, 0}), 0.5);
  EXPECT_TRUE(std::isnan(Auc(std::vector<float>{1, 2}, std::vector<float>{1, 1}))) << "one class only";
}

TEST(BinaryMetrics, LossNeCalibrationAccuracyByHand) {
  const std::vector<float> logits = {0.0f, std::log(3.0f), -std::log(3.0f), 2.0f};  // p = 0.5, 0.75, 0.25, 0.881
  const std::vector<float> labels = {1, 1, 0, 0};
  const BinaryMetrics m = ComputeBinaryMetrics(logits, labels);
  const double p3 = 1.0 / (1.0 + std::exp(-2.0));
  const double ce = (-std::log(0.5) - std::log(0.75) - std::log(0.75) - std::log(1 - p3)) / 4;
  EXPECT_NEAR(m.log_loss, ce, 1e-7);
  EXPECT_NEAR(m.ne, ce / std::log(2.0), 1e-7);  // mean label 0.5: entropy log 2
  EXPECT_NEAR(m.calibration, (0.5 + 0.75 + 0.25 + p3) / 2, 1e-7);
  EXPECT_EQ(m.accuracy, 0.75);  // 0.5 >= 0.5 counts as 1: right; 0.881 wrong
  EXPECT_EQ(m.mean_label, 0.5);
  EXPECT_EQ(m.samples, 4);
  // Extreme logits stay finite (no log(0)).
  const BinaryMetrics big = ComputeBinaryMetrics(std::vector<float>{100.0f, -100.0f}, std::vector<float>{0, 1});
  EXPECT_NEAR(big.log_loss, 100.0, 1e-6);
}

TEST(BinaryMetrics, WindowKeepsTheLastSamples) {
  MetricWindow w(3);
  w.Add(std::vector<float>{1, 2}, std::vector<float>{0, 1});
  w.Add(std::vector<float>{3, 4}, std::vector<float>{1, 0});
  EXPECT_EQ(w.logits(), (std::vector<float>{2, 3, 4}));
  EXPECT_EQ(w.labels(), (std::vector<float>{1, 1, 0}));
}

class MetricsOverRanks : public RanksTest {};

TEST_P(MetricsOverRanks, EqualOneProcessOverTheUnion) {
  std::vector<float> logits, labels;
  for (int i = 0; i < 90; ++i) {
    logits.push_back(std::sin(0.37f * static_cast<float>(i)) * 3);
    labels.push_back(static_cast<float>((i * 7) % 5 < 2));
  }
  const BinaryMetrics want = ComputeBinaryMetrics(logits, labels);
  std::mutex mu;
  OnRanks(3, [&](const ProcessGroup& group) {
    const int r = group.rank();
    // Unequal shares: 20, 30, 40.
    const size_t first = r == 0 ? 0 : r == 1 ? 20 : 50, n = r == 0 ? 20 : r == 1 ? 30 : 40;
    auto got = ComputeOverRanks(&group, std::span<const float>(logits).subspan(first, n),
                                std::span<const float>(labels).subspan(first, n));
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_EQ(got->samples, 90);
    EXPECT_EQ(got->auc, want.auc);
    EXPECT_NEAR(got->log_loss, want.log_loss, 1e-12);
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, MetricsOverRanks, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec::metrics
