// Output that survives errors and kills (issue 16): a directory replaced as
// a whole (StagedDirectory), leftovers of dead writers removed by PID, byte
// sizes parsed without overflow, and the memory check before allocating.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "shardrec/core/io/leftovers.h"
#include "shardrec/core/io/staged_directory.h"
#include "shardrec/core/resources/memory.h"
#include "shardrec/core/text/byte_size.h"
#include "temp_dir.h"

namespace shardrec {
namespace {

namespace fs = std::filesystem;

using TempDir = testing::TempDir;

void Write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A PID that existed and is gone: a child that has exited and been reaped.
pid_t DeadPid() {
  const pid_t pid = fork();
  if (pid == 0) _exit(0);
  waitpid(pid, nullptr, 0);
  return pid;
}

TEST(StagedDirectory, CreatesANewDirectoryOnCommit) {
  TempDir t;
  const fs::path out = t.path() / "nested" / "out";
  auto staged = StagedDirectory::Begin(out, {"a.txt"});
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  Write(staged->staging() / "a.txt", "new");
  EXPECT_FALSE(fs::exists(out)) << "visible before Commit";
  ASSERT_TRUE(staged->Commit().ok());
  EXPECT_EQ(Read(out / "a.txt"), "new");
  EXPECT_FALSE(fs::exists(staged->staging()));
}

TEST(StagedDirectory, ReplacesTheOldSetWholeAndLeavesNothingBeside) {
  TempDir t;
  const fs::path out = t.path() / "out";
  Write(out / "a.txt", "old a");
  Write(out / "sub" / "b.txt", "old b");
  auto staged = StagedDirectory::Begin(out.string() + "/", {"a.txt", "sub"});
  ASSERT_TRUE(staged.ok()) << staged.status().ToString();
  Write(staged->staging() / "a.txt", "new a");
  ASSERT_TRUE(staged->Commit().ok());
  EXPECT_EQ(Read(out / "a.txt"), "new a");
  EXPECT_FALSE(fs::exists(out / "sub")) << "an old file survived into the new set";
  EXPECT_EQ(std::distance(fs::directory_iterator(t.path()), fs::directory_iterator()), 1);
}

TEST(StagedDirectory, WithoutCommitTheOldSetStaysAndTheStagingGoes) {
  TempDir t;
  const fs::path out = t.path() / "out";
  Write(out / "a.txt", "old");
  fs::path staging;
  {
    auto staged = StagedDirectory::Begin(out, {"a.txt"});
    ASSERT_TRUE(staged.ok());
    staging = staged->staging();
    Write(staging / "a.txt", "half");
  }  // an error while writing: the object goes without Commit
  EXPECT_EQ(Read(out / "a.txt"), "old");
  EXPECT_FALSE(fs::exists(staging));
}

TEST(StagedDirectory, RefusesWhatItWouldDestroy) {
  TempDir t;
  Write(t.path() / "out" / "mine.txt", "keep");
  auto foreign = StagedDirectory::Begin(t.path() / "out", {"a.txt"});
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.status().code(), SR_FAILED_PRECONDITION);
  EXPECT_NE(foreign.status().message().find("mine.txt"), std::string::npos) << foreign.status().message();
  Write(t.path() / "file", "x");
  auto file = StagedDirectory::Begin(t.path() / "file", {});
  ASSERT_FALSE(file.ok());
  EXPECT_NE(file.status().message().find("is not a directory"), std::string::npos);
  EXPECT_FALSE(StagedDirectory::Begin("/", {}).ok());
  EXPECT_FALSE(StagedDirectory::Begin(fs::current_path(), {}).ok());
  EXPECT_EQ(Read(t.path() / "out" / "mine.txt"), "keep");
}

TEST(StagedDirectory, RemovesTheStagingOfAKilledWriter) {
  TempDir t;
  const fs::path out = t.path() / "out";
  const fs::path dead = t.path() / (".out.new." + std::to_string(DeadPid()));
  const fs::path live = t.path() / (".out.new." + std::to_string(getppid()));
  Write(dead / "a.txt", "half");
  Write(live / "a.txt", "another writer's, still running");
  auto staged = StagedDirectory::Begin(out, {"a.txt"});
  ASSERT_TRUE(staged.ok());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
}

TEST(Leftovers, OnlyDeadWritersOwnNamesAreRemoved) {
  TempDir t;
  const std::string dead = std::to_string(DeadPid());
  Write(t.path() / ("shardrec-rdzv-" + dead + "-abc123") / "x", "");
  Write(t.path() / ("shardrec-rdzv-" + std::to_string(getpid()) + "-abc123") / "x", "");
  Write(t.path() / ("shardrec-rdzv-" + dead + "x"), "");       // not PID then '-'
  Write(t.path() / "shardrec-rdzv-abc", "");                    // no PID
  Write(t.path() / ("other-" + dead), "");                      // another prefix
  EXPECT_EQ(RemoveLeftoversOfDeadProcesses(t.path(), "shardrec-rdzv-"), 1);
  EXPECT_EQ(std::distance(fs::directory_iterator(t.path()), fs::directory_iterator()), 4);
  EXPECT_EQ(RemoveLeftoversOfDeadProcesses(t.path() / "missing", "x"), 0);
}

TEST(ByteSize, ParsesWhatPeopleWriteAndRefusesTheRest) {
  EXPECT_EQ(ParseByteSize("1000").value(), 1000);
  EXPECT_EQ(ParseByteSize("2KiB").value(), 2048);
  EXPECT_EQ(ParseByteSize("1.5GiB").value(), int64_t{3} << 29);
  EXPECT_EQ(ParseByteSize("512M").value(), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("2TiB").value(), int64_t{2} << 40);
  for (const char* bad : {"", "0", "-1", "1e30GiB", "nan", "inf", "12 MiB", "5PB", "GiB", "1e19"}) {
    EXPECT_FALSE(ParseByteSize(bad).ok()) << bad;
  }
  EXPECT_EQ(FormatByteSize(812), "812 B");
  EXPECT_EQ(FormatByteSize(3 << 10), "3.0 KiB");
  EXPECT_EQ(FormatByteSize(int64_t{32} << 30), "32.00 GiB");
}

TEST(Memory, ChecksAgainstTheLimitAndNamesBothFigures) {
  const MemoryLimit flag{4096, "--max-memory"};
  EXPECT_TRUE(CheckMemory(4096, flag, "the tables", "--max-memory").ok());
  const Status over = CheckMemory(4097, flag, "the tables", "--max-memory");
  EXPECT_EQ(over.code(), SR_RESOURCE_EXHAUSTED);
  EXPECT_NE(over.message().find("the tables need 4.0 KiB (4097 bytes), more than --max-memory 4.0 KiB"),
            std::string::npos)
      << over.message();
  EXPECT_TRUE(CheckMemory(int64_t{1} << 62, MemoryLimit{}, "x", "--max-memory").ok()) << "unknown: nothing refused";
  auto available = ReadAvailableMemory();
  ASSERT_TRUE(available.ok()) << available.status().ToString();
  EXPECT_GT(available->bytes, 0);
  const MemoryLimit machine = MemoryLimitFor(0, "--max-memory");
  EXPECT_EQ(machine.source, available->source);
  const Status huge = CheckMemory(int64_t{1} << 62, machine, "the tables", "--max-memory");
  EXPECT_NE(huge.message().find("available here (" + machine.source + ")"), std::string::npos) << huge.message();
}

}  // namespace
}  // namespace shardrec
