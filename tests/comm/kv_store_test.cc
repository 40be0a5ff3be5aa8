// The rendezvous stores the host opens (core/comm/kv_store.h): set, get,
// overwrite, waiting for a key another thread sets later, timeouts, and
// prefixes that keep two jobs apart — for file:, local: and (when
// redis-server is installed) redis:, plus the errors of stores that cannot
// work.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <thread>

#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "shardrec/core/comm/kv_store.h"

namespace shardrec {
namespace {

namespace fs = std::filesystem;

int FreePort() {
  const int s = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(s);
  return ntohs(a.sin_port);
}

// A redis-server on loopback for the test's life, when one is installed.
class RedisServer {
 public:
  RedisServer() {
    if (::access("/usr/bin/redis-server", X_OK) != 0) return;
    port_ = FreePort();
    pid_ = ::fork();
    if (pid_ == 0) {
      const int devnull = ::open("/dev/null", O_WRONLY);
      ::dup2(devnull, 1);
      ::dup2(devnull, 2);
      const std::string port = std::to_string(port_);
      ::execl("/usr/bin/redis-server", "redis-server", "--port", port.c_str(), "--bind", "127.0.0.1", "--save", "",
              "--appendonly", "no", "--dir", "/tmp", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200; ++i) {  // up to 10 s for it to listen
      if (OpenKvStore(Rendezvous(), "probe", 100).ok()) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~RedisServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  bool running() const { return pid_ > 0; }
  std::string Rendezvous() const { return "redis:127.0.0.1:" + std::to_string(port_); }

 private:
  int port_ = 0;
  pid_t pid_ = -1;
};

class KvStores : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string kind = GetParam();
    if (kind == "file") {
      dir_ = fs::temp_directory_path() / ("shardrec_kv_" + std::to_string(::getpid()));
      rendezvous_ = "file:" + dir_.string() + "/nested";  // created on open
    } else if (kind == "local") {
      rendezvous_ = "local:kv_test_" + std::to_string(::getpid());
    } else {
      static RedisServer server;
      if (!server.running()) GTEST_SKIP() << "redis-server is not installed (apt-get install redis-server)";
      rendezvous_ = server.Rendezvous();
    }
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  std::unique_ptr<KvStore> Open(const std::string& prefix) {
    auto s = OpenKvStore(rendezvous_, prefix + std::to_string(::getpid()), 2000);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  std::string rendezvous_;
  fs::path dir_;
};

TEST_P(KvStores, SetGetOverwriteAndBinaryValues) {
  auto s = Open("a");
  ASSERT_NE(s, nullptr);
  const std::string binary("x\0y/z\n", 6);
  ASSERT_TRUE(s->Set("k/with/slashes", binary).ok());
  auto v = s->Get("k/with/slashes", 0);
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v.value(), binary);
  ASSERT_TRUE(s->Set("k/with/slashes", "second").ok());
  EXPECT_EQ(s->Get("k/with/slashes", 0).value(), "second");
  ASSERT_TRUE(s->Set("empty", "").ok());
  EXPECT_EQ(s->Get("empty", 0).value(), "");
}

TEST_P(KvStores, GetWaitsForAKeySetLaterAndTimesOutNamingIt) {
  auto s = Open("b");
  ASSERT_NE(s, nullptr);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(s->Set("late", "here").ok());
  });
  auto v = s->Get("late", 3000);
  writer.join();
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  EXPECT_EQ(v.value(), "here");

  const auto start = std::chrono::steady_clock::now();
  auto missing = s->Get("never", 200);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), SR_DEADLINE_EXCEEDED);
  EXPECT_NE(missing.status().message().find("key 'never' did not appear within 200 ms"), std::string::npos)
      << missing.status().message();
  EXPECT_GE(secs, 0.19);
  EXPECT_LT(secs, 2.0);
}

TEST_P(KvStores, PrefixesKeepJobsApart) {
  auto job1 = Open("job1_");
  auto job2 = Open("job2_");
  ASSERT_NE(job1, nullptr);
  ASSERT_NE(job2, nullptr);
  ASSERT_TRUE(job1->Set("rank0", "from job 1").ok());
  EXPECT_EQ(job2->Get("rank0", 0).status().code(), SR_DEADLINE_EXCEEDED);
  ASSERT_TRUE(job2->Set("rank0", "from job 2").ok());
  EXPECT_EQ(job1->Get("rank0", 0).value(), "from job 1");
  EXPECT_EQ(job2->Get("rank0", 0).value(), "from job 2");
}

TEST_P(KvStores, TheAbiViewReachesTheSameKeys) {
  auto s = Open("abi");
  ASSERT_NE(s, nullptr);
  const sr_kv_store* abi = s->abi();
  ASSERT_GE(abi->struct_size, SR_STRUCT_SIZE(sr_kv_store, get));
  char err[128] = {0};
  ASSERT_EQ(abi->set(abi->ctx, "via_abi", "v", 1, err, sizeof err), SR_OK) << err;
  std::string got;
  auto sink = [](void* ctx, const void* value, size_t size) {
    static_cast<std::string*>(ctx)->assign(static_cast<const char*>(value), size);
  };
  ASSERT_EQ(abi->get(abi->ctx, "via_abi", 0, sink, &got, err, sizeof err), SR_OK) << err;
  EXPECT_EQ(got, "v");
  EXPECT_EQ(abi->get(abi->ctx, "absent", 0, sink, &got, err, 8), SR_DEADLINE_EXCEEDED);
  EXPECT_EQ(std::string(err).size(), 7u) << "the reason is truncated to the buffer";
}

INSTANTIATE_TEST_SUITE_P(Kinds, KvStores, ::testing::Values("file", "local", "redis"));

TEST(KvStoreErrors, UnreachableOrMalformedRendezvousFailsFast) {
  const auto start = std::chrono::steady_clock::now();
  auto redis = OpenKvStore("redis:127.0.0.1:" + std::to_string(FreePort()), "job", 1000);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 4.0);
  ASSERT_FALSE(redis.ok());
  EXPECT_EQ(redis.status().code(), SR_UNAVAILABLE);
  EXPECT_NE(redis.status().message().find("cannot connect"), std::string::npos) << redis.status().message();

  for (const char* bad : {"redis:host", "redis:host:0", "redis:host:99999", "tcp:1.2.3.4:5", "file:", "nothing"}) {
    auto s = OpenKvStore(bad, "job", 1000);
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), SR_INVALID_ARGUMENT) << bad;
  }
  EXPECT_EQ(OpenKvStore("local:x", "", 1000).status().code(), SR_INVALID_ARGUMENT) << "an empty prefix";
  auto under_file = OpenKvStore("file:/proc/version/sub", "job", 1000);
  ASSERT_FALSE(under_file.ok());
  EXPECT_NE(under_file.status().message().find("cannot create"), std::string::npos) << under_file.status().message();
}

}  // namespace
}  // namespace shardrec
