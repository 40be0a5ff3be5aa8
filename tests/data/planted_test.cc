// The planted click log: samples are a pure function of (seed, index), the
// click rate is near the aim, the lines parse back to the same row, and the
// written file reads back through the click-log reader with the same labels;
// the planted logits rank the labels well above chance.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "shardrec/core/data/click_log_reader.h"
#include "shardrec/core/data/planted_click_log.h"
#include "shardrec/core/metrics/binary_metrics.h"

namespace shardrec::data {
namespace {

TEST(PlantedClickLog, SamplesAreDeterministicAndParseBack) {
  PlantedClickModel a(PlantedClickModelOptions{}), b(PlantedClickModelOptions{});
  PlantedClickModelOptions other;
  other.seed = 2;
  PlantedClickModel c(other);
  double la = 0, lb = 0, lc = 0;
  std::array<bool, kCriteoFields> missing{};
  const CriteoRow ra = a.Sample(12345, &la, &missing), rb = b.Sample(12345, &lb), rc = c.Sample(12345, &lc);
  EXPECT_EQ(la, lb);
  EXPECT_EQ(ra.sparse, rb.sparse);
  EXPECT_NE(ra.sparse, rc.sparse);
  CriteoRow parsed;
  ASSERT_TRUE(ParseCriteoLine(PlantedClickModel::Line(ra, missing), &parsed).ok());
  EXPECT_EQ(parsed.label, ra.label);
  EXPECT_EQ(parsed.dense, ra.dense);
  EXPECT_EQ(parsed.sparse, ra.sparse);
}

TEST(PlantedClickLog, ClickRateAndSignal) {
  PlantedClickModel m(PlantedClickModelOptions{});
  std::vector<float> logits, labels;
  for (int64_t i = 0; i < 50000; ++i) {
    double l = 0;
    labels.push_back(m.Sample(i, &l).label);
    logits.push_back(static_cast<float>(l));
  }
  const auto metrics = metrics::ComputeBinaryMetrics(logits, labels);
  EXPECT_NEAR(metrics.mean_label, 0.25, 0.02);
  EXPECT_GT(metrics.auc, 0.70) << "the planted model must leave something to learn";
  EXPECT_LT(metrics.auc, 0.95);
  EXPECT_NEAR(metrics.calibration, 1.0, 0.05) << "labels are drawn from the planted probabilities";
}

TEST(PlantedClickLog, WrittenFilesReadBack) {
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("shardrec_planted_{}", getpid());
  std::filesystem::create_directories(dir);
  PlantedClickModel m(PlantedClickModelOptions{});
  std::vector<float> logits, labels;
  for (const char* name : {"a.tsv", "b.tsv.gz"}) {
    logits.clear();
    labels.clear();
    ASSERT_TRUE(WritePlantedTsv(m, 100, 64, dir / name, &logits, &labels).ok());
    ClickLogOptions o;
    o.batch = 64;
    for (int f = 0; f < kCriteoSparse; ++f) {
      o.features.push_back(fmt::format("c{}", f));
      o.num_embeddings.push_back(1000);
    }
    auto r = ClickLogReader::Open(ClickLogSpec::Parse(fmt::format("criteo:{}", (dir / name).string())).value(), o);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    auto b = (*r)->Next();
    ASSERT_TRUE(b.ok() && b->has_value()) << b.status().ToString();
    EXPECT_EQ((*b)->labels.span<float>().size(), 64u);
    EXPECT_TRUE(std::equal(labels.begin(), labels.end(), (*b)->labels.span<float>().begin())) << name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir / (".tmp.a.tsv." + std::to_string(getpid())))) << "no temporary left";
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace shardrec::data
