// ClickLogReader: Criteo TSV (plain, gzip, several files) and TorchRec's
// NumPy layout, read as one global stream split over ranks; shuffling the
// same way on every rank; epochs; resuming at a position; bad lines; the
// spec's checks.
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "shardrec/core/data/click_log_reader.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec::data {
namespace {

namespace fs = std::filesystem;

class ClickLogTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt::format("shardrec_click_{}_{}", getpid(),
                                                   ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Sample i: label i % 2, int_0 = i, int_1 = -1, cat_0 = 7 i + 1 (hex), the rest 0.
  static std::string Line(int64_t i) {
    std::string s = fmt::format("{}\t{}\t-1", i % 2, i);
    for (int j = 2; j < kCriteoDense; ++j) s += "\t";
    s += fmt::format("\t{:x}", 7 * i + 1);
    for (int j = 1; j < kCriteoSparse; ++j) s += "\t";
    return s;
  }
  fs::path WriteTsv(const std::string& name, int64_t first, int64_t count, bool gzip = false,
                    const std::string& bad_line = "", int64_t bad_at = -1, bool final_newline = true) {
    std::string text;
    for (int64_t i = first; i < first + count; ++i) {
      text += (i - first == bad_at ? bad_line : Line(i));
      if (final_newline || i + 1 < first + count) text += "\n";
    }
    const fs::path path = dir_ / name;
    if (gzip) {
      gzFile gz = gzopen(path.c_str(), "wb");
      gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
      gzclose(gz);
    } else {
      std::ofstream(path) << text;
    }
    return path;
  }
  static ClickLogOptions Options(int rank, int world, int64_t batch) {
    ClickLogOptions o;
    o.rank = rank;
    o.world = world;
    o.batch = batch;
    for (int f = 0; f < kCriteoSparse; ++f) {
      o.features.push_back(fmt::format("c{}", f));
      o.num_embeddings.push_back(f == 0 ? 5 : 1000);
    }
    o.prefetch = 2;
    return o;
  }
  static std::unique_ptr<ClickLogReader> Open(const std::string& spec, const ClickLogOptions& o) {
    auto parsed = ClickLogSpec::Parse(spec);
    EXPECT_TRUE(parsed.ok()) << parsed.status().ToString();
    auto reader = ClickLogReader::Open(parsed.value(), o);
    EXPECT_TRUE(reader.ok()) << reader.status().ToString();
    return reader.ok() ? std::move(reader).value() : nullptr;
  }
  // The sample index of every sample of a batch (int_0 = i, so log1p(i)).
  static std::vector<int64_t> Samples(const ClickBatch& b) {
    std::vector<int64_t> out;
    for (int64_t k = 0; k < b.dense.size(0); ++k) {
      out.push_back(std::llround(std::expm1(static_cast<double>(b.dense.data<float>()[k * kCriteoDense]))));
    }
    return out;
  }
  static std::vector<std::vector<int64_t>> Epoch(ClickLogReader& r) {
    std::vector<std::vector<int64_t>> out;
    for (;;) {
      auto b = r.Next();
      EXPECT_TRUE(b.ok()) << b.status().ToString();
      if (!b.ok() || !b->has_value()) break;
      out.push_back(Samples(**b));
    }
    return out;
  }

  fs::path dir_;
};

TEST_F(ClickLogTest, OneRankReadsTheFileInOrderAndDropsTheTail) {
  const auto path = WriteTsv("day_0.tsv", 0, 10);
  auto r = Open("criteo:" + path.string(), Options(0, 1, 3));
  ASSERT_TRUE(r);
  auto b = r->Next();
  ASSERT_TRUE(b.ok() && b->has_value()) << b.status().ToString();
  const ClickBatch& batch = **b;
  EXPECT_EQ(Samples(batch), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(batch.labels.data<float>()[1], 1.0f);
  // int_1 = -1 is clamped: log(1 + 0) = 0.
  EXPECT_EQ(batch.dense.data<float>()[1], 0.0f);
  // cat_0 = 7 i + 1 mod 5 rows; the other features' empty values are row 0.
  EXPECT_EQ(batch.sparse.keys()[0], "c0");
  EXPECT_EQ(batch.sparse.values()[0], 1);
  EXPECT_EQ(batch.sparse.values()[1], 8 % 5);
  EXPECT_EQ(batch.sparse.values()[2], 15 % 5);
  EXPECT_EQ(batch.sparse.values()[3], 0);
  EXPECT_EQ(batch.sparse.lengths(), std::vector<int64_t>(3 * kCriteoSparse, 1));
  EXPECT_EQ(batch.position, 3);
  // 10 samples, batches of 3: three batches, the tenth sample dropped.
  auto rest = Epoch(*r);
  EXPECT_EQ(rest, (std::vector<std::vector<int64_t>>{{3, 4, 5}, {6, 7, 8}}));
  auto after = r->Next();
  ASSERT_TRUE(after.ok());
  EXPECT_FALSE(after->has_value()) << "past the epoch's end";
  ASSERT_TRUE(r->StartEpoch(1).ok());
  EXPECT_EQ(Epoch(*r).size(), 3u);
  EXPECT_EQ(ClickLogReader::CountSamples(ClickLogSpec::Parse("criteo:" + path.string()).value()).value(), 10);
}

TEST_F(ClickLogTest, RanksShareEachGlobalBatchInRankOrder) {
  const auto path = WriteTsv("log.tsv", 0, 10);
  auto r0 = Open("criteo:" + path.string(), Options(0, 2, 2));
  auto r1 = Open("criteo:" + path.string(), Options(1, 2, 2));
  EXPECT_EQ(Epoch(*r0), (std::vector<std::vector<int64_t>>{{0, 1}, {4, 5}}));
  EXPECT_EQ(Epoch(*r1), (std::vector<std::vector<int64_t>>{{2, 3}, {6, 7}}));
}

TEST_F(ClickLogTest, ShuffleIsTheSameOnEveryRankAndFollowsTheSeed) {
  const auto path = WriteTsv("log.tsv", 0, 64);
  auto shuffled = [&](int rank, uint64_t seed) {
    auto o = Options(rank, 2, 4);
    o.shuffle_buffer = 16;
    o.seed = seed;
    auto r = Open("criteo:" + path.string(), o);
    return Epoch(*r);
  };
  const auto a0 = shuffled(0, 1), a1 = shuffled(1, 1);
  ASSERT_EQ(a0.size(), 8u);
  // Each window of 16 (two global batches) is a permutation of its samples.
  for (size_t w = 0; w < 4; ++w) {
    std::set<int64_t> seen;
    for (size_t k = 2 * w; k < 2 * w + 2; ++k) {
      seen.insert(a0[k].begin(), a0[k].end());
      seen.insert(a1[k].begin(), a1[k].end());
    }
    EXPECT_EQ(seen.size(), 16u);
    EXPECT_EQ(*seen.begin(), static_cast<int64_t>(16 * w));
    EXPECT_EQ(*seen.rbegin(), static_cast<int64_t>(16 * w + 15));
  }
  EXPECT_NE(a0[0], (std::vector<int64_t>{0, 1, 2, 3})) << "shuffled";
  EXPECT_EQ(shuffled(0, 1), a0) << "the same seed, the same order";
  EXPECT_NE(shuffled(0, 2), a0) << "another seed, another order";
  // The next epoch is shuffled anew.
  auto o = Options(0, 2, 4);
  o.shuffle_buffer = 16;
  o.seed = 1;
  auto r = Open("criteo:" + path.string(), o);
  Epoch(*r);
  ASSERT_TRUE(r->StartEpoch(1).ok());
  EXPECT_NE(Epoch(*r), a0);
}

TEST_F(ClickLogTest, ResumingAtAPositionContinuesTheSameSequence) {
  const auto path = WriteTsv("log.tsv", 0, 100);
  auto o = Options(1, 2, 3);
  o.shuffle_buffer = 20;
  o.seed = 9;
  auto straight = Open("criteo:" + path.string(), o);
  std::vector<std::vector<int64_t>> all;
  int64_t position_after_5 = 0;
  for (int k = 0;; ++k) {
    auto b = straight->Next();
    ASSERT_TRUE(b.ok());
    if (!b->has_value()) break;
    all.push_back(Samples(**b));
    if (k == 4) position_after_5 = (*b)->position;
  }
  auto resumed = Open("criteo:" + path.string(), o);
  ASSERT_TRUE(resumed->StartEpoch(0, position_after_5).ok());
  const auto rest = Epoch(*resumed);
  EXPECT_EQ(rest, std::vector<std::vector<int64_t>>(all.begin() + 5, all.end()));
}

TEST_F(ClickLogTest, GzipAndSeveralFilesAreOneStream) {
  WriteTsv("day_0.tsv.gz", 0, 5, /*gzip=*/true);
  WriteTsv("day_1.tsv", 5, 4, false, "", -1, /*final_newline=*/false);
  WriteTsv("notes.md", 0, 1);  // not a click log: ignored in a directory
  auto r = Open("criteo:" + dir_.string(), Options(0, 1, 3));
  EXPECT_EQ(Epoch(*r), (std::vector<std::vector<int64_t>>{{0, 1, 2}, {3, 4, 5}, {6, 7, 8}}));
  EXPECT_EQ(ClickLogReader::CountSamples(ClickLogSpec::Parse("criteo:" + dir_.string()).value()).value(), 9);
}

TEST_F(ClickLogTest, ABadLineIsNamedOrSkipped) {
  const auto path = WriteTsv("bad.tsv", 0, 8, false, "1\tnot-a-number", 4);
  auto r = Open("criteo:" + path.string(), Options(0, 1, 4));
  auto first = r->Next();
  ASSERT_TRUE(first.ok() && first->has_value());
  auto second = r->Next();
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find(path.string() + ":5: field 2 (int_0): 'not-a-number' is not an integer"),
            std::string::npos)
      << second.status().message();
  auto o = Options(0, 1, 4);
  o.skip_bad_lines = true;
  auto skipping = Open("criteo:" + path.string(), o);
  ASSERT_TRUE(skipping->Next().ok());
  auto b = skipping->Next();
  ASSERT_TRUE(b.ok() && b->has_value()) << b.status().ToString();
  EXPECT_EQ(Samples(**b), (std::vector<int64_t>{5, 6, 7}));
  EXPECT_EQ((*b)->bad_lines, 1);
}

TEST_F(ClickLogTest, TorchRecNumpyLayoutByItsConventions) {
  // As torchrec.datasets.criteo's preprocessing writes a day: dense float32
  // [rows, 13] = log(x + 3), sparse int32 [rows, 26] (hashes past 2^31
  // wrap negative), labels int32 [rows, 1].
  auto write_day = [&](int day, int64_t first, int64_t rows) {
    Tensor dense = Tensor::Empty(dtype::kFloat32, {rows, kCriteoDense});
    Tensor sparse = Tensor::Empty(dtype::kInt32, {rows, kCriteoSparse});
    Tensor labels = Tensor::Empty(dtype::kInt32, {rows, 1});
    for (int64_t i = 0; i < rows; ++i) {
      for (int j = 0; j < kCriteoDense; ++j) dense.data<float>()[i * kCriteoDense + j] = std::log(static_cast<float>(first + i + j + 3));
      for (int j = 0; j < kCriteoSparse; ++j) sparse.data<int32_t>()[i * kCriteoSparse + j] = static_cast<int32_t>((first + i) * (j % 2 ? 1 : -1) - 1);
      labels.data<int32_t>()[i] = static_cast<int32_t>((first + i) % 3 == 0);
    }
    ASSERT_TRUE(WriteNpy(dir_ / fmt::format("day_{}_dense.npy", day), dense).ok());
    ASSERT_TRUE(WriteNpy(dir_ / fmt::format("day_{}_sparse.npy", day), sparse).ok());
    ASSERT_TRUE(WriteNpy(dir_ / fmt::format("day_{}_labels.npy", day), labels).ok());
  };
  write_day(0, 0, 3);
  write_day(1, 3, 4);
  const auto spec = ClickLogSpec::Parse("criteo:" + dir_.string());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->kind, ClickLogSpec::Kind::kNpy);
  EXPECT_EQ(ClickLogReader::CountSamples(spec.value()).value(), 7);
  auto r = ClickLogReader::Open(spec.value(), Options(0, 1, 7));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto b = (*r)->Next();
  ASSERT_TRUE(b.ok() && b->has_value()) << b.status().ToString();
  const ClickBatch& batch = **b;
  for (int64_t i = 0; i < 7; ++i) {
    // Dense as stored (already log(x + 3)); the days in order.
    EXPECT_FLOAT_EQ(batch.dense.data<float>()[i * kCriteoDense + 2], std::log(static_cast<float>(i + 2 + 3)));
    EXPECT_EQ(batch.labels.data<float>()[i], static_cast<float>(i % 3 == 0));
    // c0 holds -i - 1: numpy's floor modulo into 5 rows, as TorchRec's % gives.
    const int64_t v = -i - 1;
    EXPECT_EQ(batch.sparse.values()[static_cast<size_t>(i)], ((v % 5) + 5) % 5);
  }
}

TEST_F(ClickLogTest, SpecsAndOptionsAreChecked) {
  EXPECT_FALSE(ClickLogSpec::Parse("tsv:/x").ok());
  auto missing = ClickLogSpec::Parse("criteo:" + (dir_ / "nope.tsv").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos);
  auto empty = ClickLogSpec::Parse("criteo:" + dir_.string());
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("no day_N_dense.npy and no .tsv"), std::string::npos);
  const auto path = WriteTsv("log.tsv", 0, 4);
  auto o = Options(0, 1, 2);
  o.features.pop_back();
  auto r = ClickLogReader::Open(ClickLogSpec::Parse("criteo:" + path.string()).value(), o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("26 categorical columns; the tables have 25 features"), std::string::npos);
  EXPECT_FALSE(ClickLogReader::Open(ClickLogSpec::Parse("criteo:" + path.string()).value(), Options(2, 2, 2)).ok());
}

}  // namespace
}  // namespace shardrec::data
