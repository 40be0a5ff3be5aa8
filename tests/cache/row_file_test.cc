// RowFile (core/include/shardrec/core/cache/row_file.h): scattered batched
// writes and reads round-trip (repeats: the last copy wins; runs longer
// than one preadv), the file reopens after Sync() with its rows and its
// map of written rows, and every file that cannot be trusted is refused
// by name: a writer killed after a change (SIGKILL in a child process), a
// write that failed part-way (not marked clean until written again whole),
// another table's spec, a corrupt or truncated header, a file that is not
// a row file, and an existing path on Create. The round trip runs on the
// pool of threads, through io_uring (skipped, saying why, where io_uring
// cannot be used) and through a shared mapping (io mmap), which reserves
// the file's space when made, refusing a file it cannot hold, and whose
// rows a killed writer leaves as the threads' do.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>

#include <linux/magic.h>
#include <sys/vfs.h>

#include "file_size_limit.h"
#include "shardrec/core/cache/row_file.h"
#include "temp_dir.h"

namespace shardrec {
namespace {

constexpr int64_t kRowBytes = 40;

RowFileSpec Spec(int64_t rows = 5000, std::string description = "t0: 6 x float32 + 4 x float32 state",
                 std::string io = "threads") {
  return {rows, kRowBytes, std::move(description), 4, std::move(io)};
}

// Row r's bytes at version v: distinct for every (r, v).
std::vector<std::byte> Bytes(std::span<const int64_t> rows, int v) {
  std::vector<std::byte> out(rows.size() * kRowBytes);
  for (size_t i = 0; i < rows.size(); ++i) {
    for (int64_t b = 0; b < kRowBytes; ++b) {
      out[i * kRowBytes + static_cast<size_t>(b)] = static_cast<std::byte>((rows[i] * 31 + b * 7 + v * 13) & 0xff);
    }
  }
  return out;
}

void ExpectRows(const RowFile& f, std::span<const int64_t> rows, const std::vector<std::byte>& want) {
  std::vector<std::byte> got(rows.size() * kRowBytes);
  ASSERT_TRUE(f.Read(rows, got.data()).ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(std::memcmp(got.data() + i * kRowBytes, want.data() + i * kRowBytes, kRowBytes), 0) << "row " << rows[i];
  }
}

// Whether files under `dir` leave the page cache when asked (ext4, xfs,
// btrfs; not tmpfs, ZFS, FUSE or network file systems).
bool DropsPageCache(const std::filesystem::path& dir) {
  struct statfs fs {};
  return ::statfs(dir.c_str(), &fs) == 0 &&
         (fs.f_type == EXT4_SUPER_MAGIC || fs.f_type == XFS_SUPER_MAGIC || fs.f_type == BTRFS_SUPER_MAGIC);
}

// Every test but this one and the mmap ones runs on the pool of threads;
// this one also through io_uring, where this build and the kernel allow it,
// and through a shared mapping.
class RowFileIo : public ::testing::TestWithParam<std::string> {};

TEST_P(RowFileIo, ScatteredWritesAndReadsRoundTripAndReopenAfterSync) {
  testing::TempDir dir("rowfile");
  const auto path = dir.path() / "t0.rows";
  const std::string io = GetParam();
  auto Spec = [&io]() { return shardrec::Spec(5000, "t0: 6 x float32 + 4 x float32 state", io); };
  if (io == "io_uring") {
    auto probe = RowFile::Create(dir.path() / "probe.rows", Spec());
    if (!probe.ok()) GTEST_SKIP() << "io_uring cannot be used here: " << probe.status().message();
    EXPECT_EQ(probe->io_backend(), "io_uring");
  }
  std::vector<int64_t> rows(3000);
  std::iota(rows.begin(), rows.begin() + 1500, 100);  // one run longer than IOV_MAX (1024)
  std::mt19937_64 rng(3);
  for (size_t i = 1500; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(rng() % 5000);
  {
    auto f = RowFile::Create(path, Spec());
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    EXPECT_FALSE(f->Written(100));
    ASSERT_TRUE(f->Write(rows, Bytes(rows, 1).data()).ok());
    // Repeats in one call: the last copy wins.
    const std::vector<int64_t> twice = {7, 8, 7};
    auto b = Bytes(twice, 2);
    std::memcpy(b.data() + 2 * kRowBytes, Bytes(std::vector<int64_t>{7}, 3).data(), kRowBytes);
    ASSERT_TRUE(f->Write(twice, b.data()).ok());
    std::vector<int64_t> shuffled = rows;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    for (auto& r : shuffled) {
      if (r == 7 || r == 8) r = 100;  // rewritten above
    }
    ExpectRows(*f, shuffled, Bytes(shuffled, 1));
    ExpectRows(*f, std::vector<int64_t>{7}, Bytes(std::vector<int64_t>{7}, 3));
    ExpectRows(*f, std::vector<int64_t>{8}, Bytes(std::vector<int64_t>{8}, 2));
    ASSERT_TRUE(f->Sync().ok());
    EXPECT_EQ(f->counters().syncs, 1);
  }
  auto f = RowFile::Open(path, Spec());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  for (int64_t r : rows) EXPECT_TRUE(f->Written(r)) << r;
  int64_t never = 0;  // a row no write named
  while (std::find(rows.begin(), rows.end(), never) != rows.end() || never == 7 || never == 8) ++never;
  EXPECT_FALSE(f->Written(never)) << never;
  EXPECT_FALSE(f->Written(-1));
  EXPECT_FALSE(f->Written(5000));
  std::vector<int64_t> some(rows.begin() + 1400, rows.begin() + 1600);
  for (auto& r : some) {
    if (r == 7 || r == 8) r = 100;
  }
  ExpectRows(*f, some, Bytes(some, 1));
  EXPECT_EQ(f->counters().rows_read, static_cast<int64_t>(some.size()));
  EXPECT_EQ(f->io_backend(), io == "threads" ? "4 threads" : io);
}

// DropPageCache (bench cache --drop-page-cache): the rows' pages go to the
// disk and leave the page cache (on ext4, xfs and btrfs; elsewhere the
// kernel may keep them), every row still reads back, through a mapping
// too, and the file is no more trusted than before: a file written and
// dropped but not synced is refused on reopening.
TEST_P(RowFileIo, RowsDroppedFromThePageCacheReadBackAndTheFileIsTrustedNoMore) {
  testing::TempDir dir("rowfile");
  const auto path = dir.path() / "t0.rows";
  const std::string io = GetParam();
  const RowFileSpec spec = Spec(20000, "t0: 6 x float32 + 4 x float32 state", io);
  std::vector<int64_t> rows(20000);
  std::iota(rows.begin(), rows.end(), 0);
  {
    auto f = RowFile::Create(path, spec);
    if (!f.ok() && io == "io_uring") GTEST_SKIP() << "io_uring cannot be used here: " << f.status().message();
    ASSERT_TRUE(f.ok()) << f.status().ToString();
    ASSERT_TRUE(f->Write(rows, Bytes(rows, 1).data()).ok());
    auto before = f->ResidentBytes();
    ASSERT_TRUE(before.ok()) << before.status().ToString();
    ASSERT_TRUE(f->DropPageCache().ok());
    auto after = f->ResidentBytes();
    ASSERT_TRUE(after.ok());
    // Where the file system caches in the page cache and drops on request
    // (not tmpfs, ZFS, FUSE or network ones), the pages must have gone.
    if (DropsPageCache(dir.path())) {
      EXPECT_GT(*before, 0) << "rows just written sit in the page cache";
      EXPECT_LT(*after, *before / 4) << "the file's pages left the page cache";
    }
    std::vector<int64_t> some(rows.begin() + 3000, rows.begin() + 3500);
    std::shuffle(some.begin(), some.end(), std::mt19937_64(4));
    ExpectRows(*f, some, Bytes(some, 1));
    ASSERT_TRUE(f->Write(some, Bytes(some, 2).data()).ok());  // and it takes writes after
    ASSERT_TRUE(f->DropPageCache().ok());
    ExpectRows(*f, some, Bytes(some, 2));
  }
  auto reopened = RowFile::Open(path, spec);
  ASSERT_FALSE(reopened.ok()) << "written and dropped but never synced: still marked open";
  EXPECT_EQ(reopened.status().code(), SR_FAILED_PRECONDITION) << reopened.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(Io, RowFileIo, ::testing::Values("threads", "io_uring", "mmap"));

// Rows read by system calls read only their own pages: the file is opened
// with POSIX_FADV_RANDOM, so the kernel does not read ahead around a read
// (it would on pages read one after another, as here, or next to cached
// ones, as the log's appends leave them: from the disk that read 35% more
// bytes, docs/benchmarks.md). Rows of one page each, dropped from the page
// cache, then read one call a row: eight rows, eight pages.
class RowFileReadAhead : public ::testing::TestWithParam<std::string> {};

TEST_P(RowFileReadAhead, RowsReadOneByOneBringOnlyTheirOwnPages) {
  testing::TempDir dir("rowfile");
  const std::string io = GetParam();
  constexpr int64_t kPageRow = 4096, kRows = 512;
  auto f = RowFile::Create(dir.path() / "t0.rows", {kRows, kPageRow, "t0: 1024 x float32", 4, io});
  if (!f.ok() && io == "io_uring") GTEST_SKIP() << "io_uring cannot be used here: " << f.status().message();
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  std::vector<int64_t> all(kRows);
  std::iota(all.begin(), all.end(), 0);
  ASSERT_TRUE(f->Write(all, std::vector<std::byte>(kRows * kPageRow, std::byte{7}).data()).ok());
  ASSERT_TRUE(f->DropPageCache().ok());
  auto dropped = f->ResidentBytes();
  ASSERT_TRUE(dropped.ok()) << dropped.status().ToString();
  if (!DropsPageCache(dir.path()) || *dropped > 4 * kPageRow) {
    GTEST_SKIP() << "this file system keeps the file's pages in memory (not ext4, xfs or btrfs), so reads never "
                    "reach the disk and read no pages ahead";
  }
  std::vector<std::byte> row(kPageRow);
  for (int64_t r = 100; r < 108; ++r) {
    const int64_t one[] = {r};
    ASSERT_TRUE(f->Read(one, row.data()).ok());
    ASSERT_EQ(row[0], std::byte{7});
  }
  auto read = f->ResidentBytes();
  ASSERT_TRUE(read.ok());
  EXPECT_LE(*read - *dropped, 8 * kPageRow + 2 * 4096)
      << "8 rows of a page each read one by one brought " << (*read - *dropped) / 4096
      << " pages into the page cache: the kernel read ahead";
  EXPECT_GE(*read - *dropped, 8 * kPageRow) << "the rows read are in the page cache";
}

INSTANTIATE_TEST_SUITE_P(Io, RowFileReadAhead, ::testing::Values("threads", "io_uring"));

// io auto takes io_uring where this build and the kernel allow it (asked
// for by name, the ring is refused otherwise), else the pool, and says why.
TEST(RowFile, AutoTakesTheRingWhereItCanElseThePoolSayingWhy) {
  testing::TempDir dir("rowfile");
  auto ring = RowFile::Create(dir.path() / "ring.rows", Spec(100, "t0", "io_uring"));
  auto autof = RowFile::Create(dir.path() / "auto.rows", Spec(100, "t0", "auto"));
  ASSERT_TRUE(autof.ok()) << autof.status().ToString();
  if (ring.ok()) {
    EXPECT_EQ(autof->io_backend(), "io_uring");
  } else {
    EXPECT_EQ(autof->io_backend().rfind("4 threads (io auto: io_uring cannot be used here: ", 0), 0u)
        << autof->io_backend();
  }
  const std::vector<int64_t> rows = {3, 99, 0};
  ASSERT_TRUE(autof->Write(rows, Bytes(rows, 1).data()).ok());
  ExpectRows(*autof, rows, Bytes(rows, 1));
}

// io mmap takes the rows' whole space when the file is made (a store into
// a hole the disk cannot hold would end the process, not fail a call); the
// threads leave the file sparse. A file the space cannot be taken for is
// refused, naming it, and not left behind.
TEST(RowFile, MappedRowsReserveTheirSpaceOrAreRefused) {
  testing::TempDir dir("rowfile");
  constexpr int64_t kRows = 100000;  // 4 MB of rows
  const auto blocks = [](const std::filesystem::path& p) {
    struct stat st {};
    EXPECT_EQ(::stat(p.c_str(), &st), 0);
    return static_cast<int64_t>(st.st_blocks) * 512;
  };
  {
    auto sparse = RowFile::Create(dir.path() / "sparse.rows", Spec(kRows));
    ASSERT_TRUE(sparse.ok()) << sparse.status().ToString();
    auto mapped = RowFile::Create(dir.path() / "mapped.rows", Spec(kRows, "t0", "mmap"));
    ASSERT_TRUE(mapped.ok()) << mapped.status().ToString();
    EXPECT_LT(blocks(dir.path() / "sparse.rows"), kRows * kRowBytes / 4);
    EXPECT_GE(blocks(dir.path() / "mapped.rows"), kRows * kRowBytes);
  }
  const auto path = dir.path() / "big.rows";
  auto refused = [&] {
    // The header and the map fit; the rows do not (refused when sized, before the
    // reservation: a disk too full for the reservation is not made in a test).
    const testing::FileSizeLimit limit(1 << 20);
    EXPECT_TRUE(limit.ok());
    return RowFile::Create(path, Spec(kRows, "t0", "mmap"));
  }();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find(path.string()), std::string::npos) << refused.status().message();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(RowFile, BadRowsAreRefusedByName) {
  testing::TempDir dir("rowfile");
  auto io = RowFile::Create(dir.path() / "io.rows", Spec(10, "x", "dma"));
  ASSERT_FALSE(io.ok());
  EXPECT_NE(io.status().message().find("io 'dma' is not auto, threads, io_uring or mmap"), std::string::npos)
      << io.status().message();
  auto f = RowFile::Create(dir.path() / "t.rows", Spec(10));
  ASSERT_TRUE(f.ok());
  std::vector<std::byte> buf(kRowBytes);
  const std::vector<int64_t> outside = {10}, negative = {-1}, unwritten = {3};
  auto w = f->Write(outside, buf.data());
  EXPECT_NE(w.message().find("row 10 is outside [0, 10)"), std::string::npos) << w.message();
  EXPECT_FALSE(f->Write(negative, buf.data()).ok());
  auto r = f->Read(unwritten, buf.data());
  EXPECT_NE(r.message().find("row 3 is not written yet"), std::string::npos) << r.message();
  EXPECT_FALSE(RowFile::Create(dir.path() / "bad.rows", Spec(0)).ok());
  EXPECT_FALSE(RowFile::Create(dir.path() / "huge.rows", {int64_t{1} << 50, 64, "x", 4}).ok());
  EXPECT_FALSE(RowFile::Create(dir.path() / "threads.rows", {10, 8, "x", 0}).ok());
}

// A write that fails part-way may leave torn rows: Sync refuses to mark
// the file clean until those rows are written again whole. Writes past
// RLIMIT_FSIZE fail with EFBIG (SIGXFSZ ignored), the rows before it land.
TEST(RowFile, AWriteThatFailedPartWayIsNotMarkedCleanUntilWrittenAgain) {
  testing::TempDir dir("rowfile");
  const auto path = dir.path() / "t0.rows";
  auto f = RowFile::Create(path, Spec());
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  const std::vector<int64_t> first = {1, 2, 3}, torn = {4, 4000}, part = {4}, fresh = {4001};
  ASSERT_TRUE(f->Write(first, Bytes(first, 1).data()).ok());
  ASSERT_TRUE(f->Write(torn, Bytes(torn, 0).data()).ok());  // both written before the write that fails
  ASSERT_TRUE(f->Sync().ok());
  constexpr uint64_t kPastRow4 = 16384 + 100 * kRowBytes;  // past the header, the map and row 4; short of row 4000
  {
    std::vector<int64_t> rows = torn;
    rows.push_back(fresh[0]);  // never written: its bytes do not matter, so it is not torn
    const Status failed = [&] {
      const testing::FileSizeLimit limit(kPastRow4);
      EXPECT_TRUE(limit.ok());
      return f->Write(rows, Bytes(rows, 2).data());
    }();
    ASSERT_FALSE(failed.ok());
    EXPECT_NE(failed.message().find("File too large"), std::string::npos) << failed.message();
  }
  auto refused = f->Sync();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.message().find("2 rows of a write that failed part-way"), std::string::npos) << refused.message();
  EXPECT_NE(refused.message().find(path.string()), std::string::npos) << refused.message();
  ASSERT_TRUE(f->Write(part, Bytes(part, 3).data()).ok());
  EXPECT_FALSE(f->Sync().ok()) << "row 4000 is still torn";
  ASSERT_TRUE(f->Write(torn, Bytes(torn, 4).data()).ok());
  ASSERT_TRUE(f->Sync().ok());
  EXPECT_FALSE(f->Written(fresh[0]));
  // A torn row forgotten (it reads as never written) no longer holds Sync back.
  {
    const testing::FileSizeLimit limit(kPastRow4);
    EXPECT_TRUE(limit.ok());
    EXPECT_FALSE(f->Write(torn, Bytes(torn, 5).data()).ok());
  }
  EXPECT_FALSE(f->Sync().ok());
  const std::vector<int64_t> far = {4000};
  ASSERT_TRUE(f->Forget(far).ok());
  ASSERT_TRUE(f->Write(part, Bytes(part, 4).data()).ok());
  ASSERT_TRUE(f->Sync().ok());
  f = RowFile::Create(dir.path() / "other.rows", Spec());  // closes t0.rows
  auto reopened = RowFile::Open(path, Spec());
  ASSERT_TRUE(reopened.ok()) << reopened.status().ToString();
  ExpectRows(*reopened, first, Bytes(first, 1));
  ExpectRows(*reopened, part, Bytes(part, 4));
  EXPECT_FALSE(reopened->Written(4000));
}

TEST(RowFile, FilesThatCannotBeTrustedAreRefused) {
  testing::TempDir dir("rowfile");
  const auto path = dir.path() / "t0.rows";
  const std::vector<int64_t> rows = {1, 2, 3};
  {
    auto f = RowFile::Create(path, Spec());
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Write(rows, Bytes(rows, 1).data()).ok());
    ASSERT_TRUE(f->Sync().ok());
  }
  auto exists = RowFile::Create(path, Spec());
  EXPECT_NE(exists.status().message().find("exists already"), std::string::npos);
  auto other_rows = RowFile::Open(path, Spec(4000));
  EXPECT_NE(other_rows.status().message().find("wanted 4000 rows"), std::string::npos)
      << other_rows.status().message();
  auto other_table = RowFile::Open(path, Spec(5000, "t1: 6 x float32 + 4 x float32 state"));
  EXPECT_NE(other_table.status().message().find("of other rows"), std::string::npos)
      << other_table.status().message();
  ASSERT_TRUE(RowFile::Open(path, Spec()).ok());

  // Written after the last Sync, then closed: "open" on disk.
  {
    auto f = RowFile::Open(path, Spec());
    ASSERT_TRUE(f.ok());
    ASSERT_TRUE(f->Write(rows, Bytes(rows, 2).data()).ok());
  }
  auto unclean = RowFile::Open(path, Spec());
  EXPECT_NE(unclean.status().message().find("killed run"), std::string::npos) << unclean.status().message();

  // A corrupt header, a truncated file and a stranger.
  const auto corrupt = dir.path() / "corrupt.rows", truncated = dir.path() / "truncated.rows";
  for (const auto& p : {corrupt, truncated}) {
    auto f = RowFile::Create(p, Spec());
    ASSERT_TRUE(f.ok() && f->Sync().ok());
  }
  {
    std::fstream io(corrupt, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(20);
    io.put('\x7f');
  }
  EXPECT_NE(RowFile::Open(corrupt, Spec()).status().message().find("header is corrupt"), std::string::npos);
  std::filesystem::resize_file(truncated, 4096 + 4096 + 100);
  EXPECT_NE(RowFile::Open(truncated, Spec()).status().message().find("truncated"), std::string::npos);
  const auto stranger = dir.path() / "notes.txt";
  std::ofstream(stranger) << std::string(5000, 'x');
  EXPECT_NE(RowFile::Open(stranger, Spec()).status().message().find("not a row file"), std::string::npos);
  EXPECT_FALSE(RowFile::Open(dir.path() / "missing.rows", Spec()).ok());
}

// A child process writes and is killed by SIGKILL: after a change since
// its last Sync the file is refused; killed right after a Sync, it opens
// with every synced row.
// A writer killed after a change leaves a file Open refuses; one killed
// right after Sync leaves every row. The same whether the rows went
// through the threads' pwritev or the shared mapping's stores.
class RowFileKilled : public ::testing::TestWithParam<std::string> {};

TEST_P(RowFileKilled, AWriterKilledMidRunLeavesAFileThatIsRefused) {
  testing::TempDir dir("rowfile");
  const std::vector<int64_t> rows = {10, 11, 4000};
  const std::string io = GetParam();
  const auto Spec = [&io] { return shardrec::Spec(5000, "t0: 6 x float32 + 4 x float32 state", io); };
  for (bool change_after_sync : {true, false}) {
    const auto path = dir.path() / (change_after_sync ? "dirty.rows" : "synced.rows");
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      auto f = RowFile::Create(path, Spec());
      if (!f.ok() || !f->Write(rows, Bytes(rows, 1).data()).ok() || !f->Sync().ok()) ::_exit(3);
      if (change_after_sync && !f->Write(rows, Bytes(rows, 2).data()).ok()) ::_exit(4);
      ::raise(SIGKILL);
      ::_exit(5);
    }
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the child did not reach its kill: " << status;
    auto f = RowFile::Open(path, Spec());
    if (change_after_sync) {
      EXPECT_FALSE(f.ok());
      EXPECT_NE(f.status().message().find("killed run"), std::string::npos) << f.status().message();
    } else {
      ASSERT_TRUE(f.ok()) << f.status().ToString();
      ExpectRows(*f, rows, Bytes(rows, 1));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Io, RowFileKilled, ::testing::Values("threads", "mmap"));

}  // namespace
}  // namespace shardrec
