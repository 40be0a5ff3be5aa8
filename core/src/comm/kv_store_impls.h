// The store kinds behind OpenKvStore (kv_store.h), one file each.
#pragma once

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "shardrec/core/comm/kv_store.h"

namespace shardrec::kv_store_impl {

StatusOr<std::unique_ptr<KvStore>> OpenFileStore(const std::string& dir, const std::string& prefix,
                                                 int64_t default_timeout_ms);
StatusOr<std::unique_ptr<KvStore>> OpenRedisStore(const std::string& host, int port, const std::string& prefix,
                                                  int64_t default_timeout_ms);
StatusOr<std::unique_ptr<KvStore>> OpenLocalStore(const std::string& name, const std::string& prefix,
                                                  int64_t default_timeout_ms);

// Calls `probe` (StatusOr<bool>: true when found) with a growing pause, from
// 0.2 ms to 20 ms, until it finds or timeout_ms passed; false on timeout.
// For stores that cannot block on a key.
template <class Probe>
StatusOr<bool> PollUntil(int64_t timeout_ms, Probe&& probe) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(std::clamp<int64_t>(timeout_ms, 0, kMaxTimeoutMs));
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    SR_ASSIGN_OR_RETURN(bool found, probe());
    if (found) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    std::this_thread::sleep_for(std::min<Clock::duration>(pause, deadline - now));
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

// A store that cannot block on a key (a directory, Redis GET): Get() polls
// TryRead() with PollUntil's back-off.
class PollingStore : public KvStore {
 public:
  PollingStore(std::string describe, int64_t default_timeout_ms)
      : describe_(std::move(describe)), default_timeout_ms_(default_timeout_ms) {}

  StatusOr<std::string> Get(const std::string& key, int64_t timeout_ms) final {
    if (timeout_ms < 0) timeout_ms = default_timeout_ms_;
    std::string value;
    SR_ASSIGN_OR_RETURN(bool found, PollUntil(timeout_ms, [&] { return TryRead(key, &value); }));
    if (!found) {
      return Status(SR_DEADLINE_EXCEEDED,
                    describe_ + ": key '" + key + "' did not appear within " + std::to_string(timeout_ms) + " ms");
    }
    return value;
  }
  std::string Describe() const final { return describe_; }

 protected:
  // Reads `key` into *value if it is set now: true when found.
  virtual StatusOr<bool> TryRead(const std::string& key, std::string* value) = 0;
  const std::string describe_;

 private:
  const int64_t default_timeout_ms_;
};

}  // namespace shardrec::kv_store_impl
