// A row file laid out as a log (RowFileSpec layout "log", core/src/cache/
// row_log.h): thousands of scattered writes of random sizes, with repeats
// and forgotten rows, go many times round the ring, and every row always
// reads back as its last write (a model beside it), through the pool of
// threads, io_uring (skipped, saying why, where it cannot be used) and a
// mapping; the ring never grows past its records, and its cleaning moves
// at most one current record per row written plus a lap's rows. Such a
// file is scratch only: Create and Open refuse it by name, and a copy of
// one is refused on opening. A write that fails part-way leaves the rows
// it may have overwritten torn, so Sync refuses until they are written
// again, and every other row still reads back.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstring>
#include <map>
#include <numeric>
#include <random>

#include "file_size_limit.h"
#include "shardrec/core/cache/row_file.h"
#include "temp_dir.h"

namespace shardrec {
namespace {

constexpr int64_t kRowBytes = 24;

RowFileSpec LogSpec(int64_t rows, std::string io = "threads") {
  return {rows, kRowBytes, "t0: 4 x float32 + 2 x float32 state", 4, std::move(io), "log"};
}

// Row r's bytes at version v: distinct for every (r, v).
void Fill(int64_t row, int v, std::byte* out) {
  for (int64_t b = 0; b < kRowBytes; ++b) out[b] = static_cast<std::byte>((row * 29 + b * 5 + v * 11) & 0xff);
}

// Every row of the model (row -> its last version) reads back as it.
void ExpectModel(const RowFile& f, const std::map<int64_t, int>& model, int64_t rows) {
  std::vector<int64_t> written;
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_EQ(f.Written(r), model.count(r) == 1) << "row " << r;
    if (model.count(r) == 1) written.push_back(r);
  }
  std::vector<std::byte> got(written.size() * kRowBytes), want(kRowBytes);
  ASSERT_TRUE(f.Read(written, got.data()).ok());
  for (size_t i = 0; i < written.size(); ++i) {
    Fill(written[i], model.at(written[i]), want.data());
    ASSERT_EQ(std::memcmp(got.data() + i * kRowBytes, want.data(), kRowBytes), 0) << "row " << written[i];
  }
}

class RowLogIo : public ::testing::TestWithParam<std::string> {};

TEST_P(RowLogIo, RowsReadBackAsLastWrittenManyTimesRoundTheRing) {
  testing::TempDir dir("rowlog");
  const std::string io = GetParam();
  constexpr int64_t kRows = 700;
  auto f = RowFile::CreateScratch(dir.path() / "t0.rows", LogSpec(kRows, io));
  if (!f.ok() && io == "io_uring") GTEST_SKIP() << "io_uring cannot be used here: " << f.status().message();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(f->layout(), "log");
  EXPECT_GE(f->memory_bytes(), kRows * 4) << "the row map: 4 bytes a row";
  struct stat st {};
  ASSERT_EQ(::stat((dir.path() / "t0.rows").c_str(), &st), 0);
  const auto size = st.st_size;  // the header, the map, and the ring (about 2 x the rows' records)
  EXPECT_GE(size, 2 * kRows * (kRowBytes + 8));
  std::map<int64_t, int> model;
  std::mt19937_64 rng(7);
  int64_t appended = 0;
  for (int v = 1; v <= 400; ++v) {
    // A hot tenth of the rows written often, the rest now and then, in
    // writes from 1 row to more than the ring's half (appended in pieces).
    const int64_t n = v % 50 == 0 ? 500 : 1 + static_cast<int64_t>(rng() % 60);
    std::vector<int64_t> rows(static_cast<size_t>(n));
    for (auto& r : rows) r = static_cast<int64_t>(rng() % (rng() % 3 == 0 ? kRows : kRows / 10));
    if (n > 2) rows[1] = rows[0];  // a repeat: the last copy wins
    std::vector<std::byte> bytes(rows.size() * kRowBytes);
    for (size_t i = 0; i < rows.size(); ++i) Fill(rows[i], v * 1000 + static_cast<int>(i), bytes.data() + i * kRowBytes);
    ASSERT_TRUE(f->Write(rows, bytes.data()).ok()) << "write " << v;
    for (size_t i = 0; i < rows.size(); ++i) model[rows[i]] = v * 1000 + static_cast<int>(i);
    appended += n;
    if (v % 37 == 0) {  // forgotten rows read as never written, and their records are garbage
      const std::vector<int64_t> gone = {rows[0], static_cast<int64_t>(rng() % kRows)};
      ASSERT_TRUE(f->Forget(gone).ok());
      for (int64_t r : gone) model.erase(r);
    }
    if (v % 20 == 0) ExpectModel(*f, model, kRows);
  }
  ExpectModel(*f, model, kRows);
  const RowFileCounters c = f->counters();
  EXPECT_EQ(c.rows_written, appended);
  EXPECT_GT(appended, 10 * kRows) << "many laps of the ring";
  EXPECT_GT(c.rows_relocated, 0) << "the cleaning moved rows still current";
  EXPECT_LE(c.rows_relocated, appended + kRows) << "at most one record moved per row written, plus a lap";
  ASSERT_EQ(::stat((dir.path() / "t0.rows").c_str(), &st), 0);
  EXPECT_EQ(st.st_size, size) << "the ring never grows";
  ASSERT_TRUE(f->Sync().ok());
}

INSTANTIATE_TEST_SUITE_P(Io, RowLogIo, ::testing::Values("threads", "io_uring", "mmap"));

TEST(RowLog, IsScratchOnlyAndAForeignLayoutIsRefused) {
  testing::TempDir dir("rowlog");
  auto made = RowFile::Create(dir.path() / "kept.rows", LogSpec(10));
  ASSERT_FALSE(made.ok());
  EXPECT_NE(made.status().message().find("made as scratch only"), std::string::npos) << made.status().message();
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "kept.rows"));
  auto opened = RowFile::Open(dir.path() / "kept.rows", LogSpec(10));
  EXPECT_NE(opened.status().message().find("cannot be opened again"), std::string::npos) << opened.status().message();
  RowFileSpec bad = LogSpec(10);
  bad.layout = "tree";
  auto refused = RowFile::CreateScratch(dir.path() / "tree.rows", bad);
  EXPECT_NE(refused.status().message().find("layout 'tree' is not in_place or log"), std::string::npos)
      << refused.status().message();
  auto huge = RowFile::CreateScratch(dir.path() / "huge.rows", LogSpec(int64_t{3} << 30));
  EXPECT_NE(huge.status().message().find("use layout in_place"), std::string::npos) << huge.status().message();

  // A copy of a log-laid file, even synced, is not opened as rows in place.
  const auto copy = dir.path() / "copy.rows";
  {
    auto f = RowFile::CreateScratch(dir.path() / "t0.rows", LogSpec(10));
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    const std::vector<int64_t> rows = {1, 2};
    std::vector<std::byte> bytes(2 * kRowBytes);
    ASSERT_TRUE(f->Write(rows, bytes.data()).ok());
    ASSERT_TRUE(f->Sync().ok());
    std::filesystem::copy_file(dir.path() / "t0.rows", copy);
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "t0.rows")) << "scratch: removed with its table";
  RowFileSpec in_place = LogSpec(10);
  in_place.layout = "in_place";
  auto reopened = RowFile::Open(copy, in_place);
  ASSERT_FALSE(reopened.ok());
  EXPECT_NE(reopened.status().message().find("laid out as a log"), std::string::npos) << reopened.status().message();
}

// Past RLIMIT_FSIZE the append fails (EFBIG, SIGXFSZ ignored) while the
// ring is cleaning: the call's rows written before, and the current rows
// the cleaning was moving, are torn; Sync refuses until they are written
// again; every row that was neither still reads back.
TEST(RowLog, AWriteThatFailsLeavesTheRowsItMayHaveOverwrittenTorn) {
  testing::TempDir dir("rowlog");
  constexpr int64_t kRows = 200;
  auto f = RowFile::CreateScratch(dir.path() / "t0.rows", LogSpec(kRows));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::map<int64_t, int> model;
  // Every row once (the ring's first half), then the last 20 rows over
  // and over until the ring is full: its head then holds rows 0..179,
  // current, which the next write's cleaning must move.
  std::vector<int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  std::vector<std::byte> bytes(kRows * kRowBytes);
  for (int64_t r = 0; r < kRows; ++r) Fill(r, 1, bytes.data() + r * kRowBytes);
  ASSERT_TRUE(f->Write(all, bytes.data()).ok());
  for (int64_t r = 0; r < kRows; ++r) model[r] = 1;
  const std::vector<int64_t> hot(all.end() - 20, all.end());
  for (int v = 2; v < 12; ++v) {
    for (int64_t r = 0; r < 20; ++r) Fill(hot[static_cast<size_t>(r)], v, bytes.data() + r * kRowBytes);
    ASSERT_TRUE(f->Write(hot, bytes.data()).ok());
    for (int64_t r : hot) model[r] = v;
  }
  ASSERT_EQ(f->counters().rows_relocated, 0) << "the ring has not come round yet";
  for (int64_t r = 0; r < 20; ++r) Fill(hot[static_cast<size_t>(r)], 99, bytes.data() + r * kRowBytes);
  const Status failed = [&] {
    const testing::FileSizeLimit limit(8192 + 8);  // the header and the map; not one record of the ring
    EXPECT_TRUE(limit.ok());
    return f->Write(hot, bytes.data());
  }();
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.message().find("File too large"), std::string::npos) << failed.message();
  auto refused = f->Sync();
  ASSERT_FALSE(refused.ok());
  // The 20 rows of the call and the 180 the cleaning was moving.
  EXPECT_NE(refused.message().find("200 rows of a write that failed part-way"), std::string::npos)
      << refused.message();
  // Written again whole, every row: the file is whole again.
  for (int64_t r = 0; r < kRows; ++r) Fill(r, 7, bytes.data() + r * kRowBytes);
  ASSERT_TRUE(f->Write(all, bytes.data()).ok());
  for (int64_t r = 0; r < kRows; ++r) model[r] = 7;
  ASSERT_TRUE(f->Sync().ok());
  ExpectModel(*f, model, kRows);
}

}  // namespace
}  // namespace shardrec
