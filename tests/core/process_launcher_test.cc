// LaunchLocalRanks with /bin/sh ranks: the variables each rank gets, the
// result when all succeed, a failing, killed or unstartable rank bringing the
// others down quickly, and a signal to the launcher reaching the ranks.
#include "shardrec/core/launch/process_launcher.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

#include "temp_dir.h"

namespace shardrec {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

using TempDir = testing::TempDir;

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::map<std::string, std::string> ReadEnvFile(const fs::path& path) {
  std::map<std::string, std::string> env;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) env[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return env;
}

LaunchSpec ShellRanks(int n, const std::string& script, std::vector<std::string>* log_lines) {
  LaunchSpec spec;
  spec.command = {"/bin/sh", "-c", script};
  spec.nproc_per_node = n;
  spec.grace_seconds = 2;
  spec.log = [log_lines](const std::string& line) { log_lines->push_back(line); };
  return spec;
}

std::string Joined(const std::vector<std::string>& lines) {
  std::string all;
  for (const std::string& l : lines) all += l + "\n";
  return all;
}

sigset_t CurrentMask() {
  sigset_t mask;
  pthread_sigmask(SIG_SETMASK, nullptr, &mask);
  return mask;
}

TEST(LaunchLocalRanks, AllSucceed) {
  std::vector<std::string> log;
  const sigset_t before = CurrentMask();
  StatusOr<LaunchResult> r = LaunchLocalRanks(ShellRanks(3, "exit 0", &log));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0);
  EXPECT_EQ(r->failed_rank, -1);
  EXPECT_EQ(r->message, "");
  // The launcher blocks signals while it runs and gives the mask back.
  const sigset_t after = CurrentMask();
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) {
    EXPECT_EQ(sigismember(&before, sig), sigismember(&after, sig)) << "signal " << sig;
  }
}

TEST(LaunchLocalRanks, RanksExitingEarlyWithZeroAreFine) {
  std::vector<std::string> log;
  StatusOr<LaunchResult> r = LaunchLocalRanks(ShellRanks(3, "if [ $RANK = 2 ]; then sleep 0.5; fi; exit 0", &log));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 0) << Joined(log);
}

TEST(LaunchLocalRanks, EachRankGetsItsVariables) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  std::vector<std::string> log;
  LaunchSpec spec = ShellRanks(3, "env > \"$OUT_DIR/env.$LOCAL_RANK\"", &log);
  spec.nnodes = 2;
  spec.node_rank = 1;
  spec.rdzv = "file:/shared/rdzv";
  spec.run_id = "job42";
  spec.master_addr = "10.1.2.3";
  spec.extra_env = {{"OUT_DIR", dir.path().string()}, {"WORLD_SIZE_HINT", "x"}};
  StatusOr<LaunchResult> r = LaunchLocalRanks(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->exit_code, 0) << Joined(log);
  std::string port;
  for (int i = 0; i < 3; ++i) {
    std::map<std::string, std::string> env = ReadEnvFile(dir.path() / ("env." + std::to_string(i)));
    EXPECT_EQ(env["RANK"], std::to_string(3 + i));
    EXPECT_EQ(env["WORLD_SIZE"], "6");
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(i));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "3");
    EXPECT_EQ(env["GROUP_RANK"], "1");
    EXPECT_EQ(env["MASTER_ADDR"], "10.1.2.3");
    EXPECT_EQ(env["SHARDREC_RDZV"], "file:/shared/rdzv");
    EXPECT_EQ(env["SHARDREC_RUN_ID"], "job42");
    EXPECT_EQ(env["TORCHELASTIC_RUN_ID"], "job42");
    EXPECT_EQ(env["WORLD_SIZE_HINT"], "x");
    // The launcher's own environment is passed on.
    EXPECT_EQ(env["PATH"], std::getenv("PATH"));
    // Port 0 asks for a free one, the same for every rank.
    if (i == 0) port = env["MASTER_PORT"];
    EXPECT_EQ(env["MASTER_PORT"], port);
  }
  EXPECT_GT(std::stoi(port), 0);
}

TEST(LaunchLocalRanks, LauncherVariablesReplaceInheritedOnes) {
  TempDir dir;
  std::vector<std::string> log;
  setenv("RANK", "99", 1);
  setenv("SHARDREC_RDZV", "file:/stale", 1);
  LaunchSpec spec = ShellRanks(1, "echo \"$RANK ${SHARDREC_RDZV-unset}\" > \"$OUT_DIR/out\"", &log);
  spec.extra_env = {{"OUT_DIR", dir.path().string()}};
  spec.master_port = 1234;
  StatusOr<LaunchResult> r = LaunchLocalRanks(spec);
  unsetenv("RANK");
  unsetenv("SHARDREC_RDZV");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  // No rendezvous given: the stale one is removed, not passed on.
  EXPECT_EQ(ReadFile(dir.path() / "out"), "0 unset\n");
}

TEST(LaunchLocalRanks, FailingRankStopsTheOthersQuickly) {
  std::vector<std::string> log;
  const auto start = Clock::now();
  StatusOr<LaunchResult> r =
      LaunchLocalRanks(ShellRanks(4, "if [ $RANK = 2 ]; then sleep 0.2; exit 3; fi; sleep 30", &log));
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_EQ(r->failed_rank, 2);
  EXPECT_NE(r->message.find("rank 2 (local rank 2, pid "), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("exited with code 3"), std::string::npos) << r->message;
  EXPECT_LT(seconds, 10) << "the other ranks were not stopped";
  EXPECT_NE(Joined(log).find("stopping the other 3 rank(s)"), std::string::npos) << Joined(log);
}

TEST(LaunchLocalRanks, RankKilledBySignalIsNamedWithIt) {
  std::vector<std::string> log;
  StatusOr<LaunchResult> r =
      LaunchLocalRanks(ShellRanks(2, "if [ $RANK = 1 ]; then kill -KILL $$; fi; sleep 30", &log));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_EQ(r->failed_rank, 1);
  EXPECT_NE(r->message.find("rank 1 "), std::string::npos) << r->message;
  EXPECT_NE(r->message.find("was killed by signal 9 (SIGKILL)"), std::string::npos) << r->message;
}

TEST(LaunchLocalRanks, RankIgnoringSigtermIsKilledAfterGrace) {
  std::vector<std::string> log;
  // Rank 1 ignores SIGTERM (and so does its sleep).
  LaunchSpec spec = ShellRanks(2, "if [ $RANK = 0 ]; then sleep 0.2; exit 1; fi; trap '' TERM; sleep 30", &log);
  spec.grace_seconds = 0.5;
  const auto start = Clock::now();
  StatusOr<LaunchResult> r = LaunchLocalRanks(spec);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failed_rank, 0);
  EXPECT_GE(seconds, 0.6);
  EXPECT_LT(seconds, 10);
  EXPECT_NE(Joined(log).find("sending SIGKILL"), std::string::npos) << Joined(log);
}

TEST(LaunchLocalRanks, MissingExecutableIsReported) {
  std::vector<std::string> log;
  LaunchSpec spec = ShellRanks(2, "", &log);
  spec.command = {"shardrec-no-such-program", "--flag"};
  StatusOr<LaunchResult> r = LaunchLocalRanks(spec);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_EQ(r->failed_rank, 0);
  EXPECT_NE(r->message.find("cannot run 'shardrec-no-such-program': No such file or directory"), std::string::npos)
      << r->message;
  spec.command = {"/nonexistent/dir/prog"};
  r = LaunchLocalRanks(spec);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->message.find("cannot run '/nonexistent/dir/prog'"), std::string::npos) << r->message;
}

TEST(LaunchLocalRanks, BadSpecIsRefused) {
  std::vector<std::string> log;
  LaunchSpec spec = ShellRanks(0, "true", &log);
  EXPECT_EQ(LaunchLocalRanks(spec).status().code(), SR_INVALID_ARGUMENT);
  spec = ShellRanks(1, "true", &log);
  spec.command.clear();
  EXPECT_EQ(LaunchLocalRanks(spec).status().code(), SR_INVALID_ARGUMENT);
  spec = ShellRanks(1, "true", &log);
  spec.nnodes = 2;
  spec.node_rank = 2;
  EXPECT_EQ(LaunchLocalRanks(spec).status().code(), SR_INVALID_ARGUMENT);
  spec.node_rank = -1;
  EXPECT_EQ(LaunchLocalRanks(spec).status().code(), SR_INVALID_ARGUMENT);
  spec.node_rank = 0;
  spec.grace_seconds = -1;
  EXPECT_EQ(LaunchLocalRanks(spec).status().code(), SR_INVALID_ARGUMENT);
}

// Waits for `pid` up to `timeout`; its wait status, or nullopt.
std::optional<int> WaitFor(pid_t pid, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return std::nullopt;
}

bool WaitForFiles(const fs::path& dir, const std::string& prefix, int n, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    int found = 0;
    for (int i = 0; i < n; ++i) found += fs::exists(dir / (prefix + std::to_string(i))) ? 1 : 0;
    if (found == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// The launcher runs in a child of the test (signals are process-wide);
// its exit code is the launch result's.
TEST(LaunchLocalRanks, SignalToLauncherReachesTheRanks) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string d = dir.path().string();
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchSpec spec;
    spec.command = {"/bin/sh", "-c",
                    "trap 'echo TERM > \"" + d + "/term.$LOCAL_RANK\"; exit 0' TERM; touch \"" + d +
                        "/up.$LOCAL_RANK\"; sleep 30 & wait"};
    spec.nproc_per_node = 3;
    spec.grace_seconds = 5;
    spec.log = [](const std::string&) {};
    StatusOr<LaunchResult> r = LaunchLocalRanks(spec);
    _exit(r.ok() ? r->exit_code : 99);
  }
  const bool up = WaitForFiles(dir.path(), "up.", 3, std::chrono::seconds(20));
  kill(launcher, SIGTERM);
  std::optional<int> status = WaitFor(launcher, std::chrono::seconds(20));
  if (!status) {
    kill(launcher, SIGKILL);
    waitpid(launcher, nullptr, 0);
  }
  ASSERT_TRUE(up) << "the ranks did not start";
  ASSERT_TRUE(status.has_value()) << "the launcher did not stop";
  ASSERT_TRUE(WIFEXITED(*status));
  EXPECT_EQ(WEXITSTATUS(*status), 128 + SIGTERM);
  // Each rank got the SIGTERM and could run its own handler.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ReadFile(dir.path() / ("term." + std::to_string(i))), "TERM\n") << "rank " << i;
  }
}

// Issue 16, defect 6: a launcher killed with SIGKILL (no chance to stop
// anyone) used to leave its ranks running. They die with it now.
TEST(LaunchLocalRanks, RanksDieWithALauncherKilledBySigkill) {
  TempDir dir;
  ASSERT_FALSE(dir.path().empty());
  const std::string d = dir.path().string();
  const pid_t launcher = fork();
  ASSERT_GE(launcher, 0);
  if (launcher == 0) {
    LaunchSpec spec;
    // Each rank writes its PID, then sleeps in the foreground (exec: the
    // rank process is the sleep itself).
    spec.command = {"/bin/sh", "-c", "echo $$ > \"" + d + "/pid.$LOCAL_RANK.tmp\"; mv \"" + d +
                                         "/pid.$LOCAL_RANK.tmp\" \"" + d + "/pid.$LOCAL_RANK\"; exec sleep 30"};
    spec.nproc_per_node = 2;
    spec.log = [](const std::string&) {};
    StatusOr<LaunchResult> r = LaunchLocalRanks(spec);
    _exit(r.ok() ? r->exit_code : 99);
  }
  const bool up = WaitForFiles(dir.path(), "pid.", 2, std::chrono::seconds(20));
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  ASSERT_TRUE(up) << "the ranks did not start";
  for (int i = 0; i < 2; ++i) {
    const pid_t rank = static_cast<pid_t>(std::stol(ReadFile(dir.path() / ("pid." + std::to_string(i)))));
    // The rank is re-parented and reaped by init (or a subreaper) once it
    // dies; until then kill(pid, 0) finds it.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    bool gone = false;
    while (!gone && Clock::now() < deadline) {
      gone = kill(rank, 0) != 0 && errno == ESRCH;
      if (!gone) {
        std::ifstream stat("/proc/" + std::to_string(rank) + "/stat");
        std::string pid_field, comm, state;
        gone = (stat >> pid_field >> comm >> state) && state == "Z";  // dead, not yet reaped
      }
      if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    if (!gone) kill(rank, SIGKILL);
    EXPECT_TRUE(gone) << "rank " << i << " (pid " << rank << ") outlived its launcher";
  }
}

// A stopped rank (SIGSTOP) cannot act on SIGTERM until it is continued: the
// launcher sends SIGCONT after SIGTERM, so stopping costs no grace period.
TEST(LaunchLocalRanks, StoppedRankIsContinuedToTakeItsSigterm) {
  std::vector<std::string> log;
  LaunchSpec spec = ShellRanks(2, "if [ $RANK = 0 ]; then sleep 0.5; exit 1; fi; kill -STOP $$; sleep 30", &log);
  spec.grace_seconds = 20;
  const auto start = Clock::now();
  StatusOr<LaunchResult> r = LaunchLocalRanks(spec);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->failed_rank, 0);
  EXPECT_LT(seconds, 10) << "the stopped rank sat out the grace period";
  EXPECT_EQ(Joined(log).find("sending SIGKILL"), std::string::npos) << Joined(log);
}

}  // namespace
}  // namespace shardrec
