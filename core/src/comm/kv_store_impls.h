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
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
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

}  // namespace shardrec::kv_store_impl
