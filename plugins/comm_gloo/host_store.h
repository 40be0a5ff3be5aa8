// Gloo's rendezvous Store interface over the host's key/value store
// (sr_kv_store), so Gloo meets through whatever the host opened: a
// directory, a Redis server, an in-process table. Every key is put under
// `scope`, which names one communicator (the world, or one split of it).
#pragma once

#include <gloo/rendezvous/store.h>

#include <string>
#include <vector>

#include "shardrec/sdk/kv_store.hpp"

namespace shardrec::gloo_comm {

class HostStore final : public ::gloo::rendezvous::Store {
 public:
  HostStore(sdk::KvStore store, std::string scope, int64_t timeout_ms)
      : store_(store), scope_(std::move(scope)), timeout_ms_(timeout_ms) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.Set(scope_ + "/" + key, std::string(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    const std::string v = store_.Get(scope_ + "/" + key, timeout_ms_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(timeout_ms_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const std::string& k : keys) store_.Get(scope_ + "/" + k, timeout.count());
  }

 private:
  const sdk::KvStore store_;
  const std::string scope_;
  const int64_t timeout_ms_;
};

}  // namespace shardrec::gloo_comm
