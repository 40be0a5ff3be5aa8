// local:NAME — a table inside this process, for ranks that are threads
// (the role Gloo's HashStore plays in its tests). Readers block on a
// condition variable instead of polling.
#include <algorithm>
#include <condition_variable>
#include <map>
#include <mutex>

#include "kv_store_impls.h"

namespace shardrec::kv_store_impl {
namespace {

struct Table {
  std::mutex m;
  std::condition_variable cv;
  std::map<std::string, std::string> values;
};
Table& ProcessTable() {
  static Table table;
  return table;
}

class LocalStore final : public KvStore {
 public:
  LocalStore(std::string scope, std::string describe, int64_t default_timeout_ms)
      : scope_(std::move(scope)), describe_(std::move(describe)), default_timeout_ms_(default_timeout_ms) {}

  Status Set(const std::string& key, std::string_view value) override {
    Table& t = ProcessTable();
    {
      std::lock_guard<std::mutex> lock(t.m);
      t.values[scope_ + key] = std::string(value);
    }
    t.cv.notify_all();
    return Status::Ok();
  }

  StatusOr<std::string> Get(const std::string& key, int64_t timeout_ms) override {
    if (timeout_ms < 0) timeout_ms = default_timeout_ms_;
    timeout_ms = std::min(timeout_ms, kMaxTimeoutMs);
    Table& t = ProcessTable();
    std::unique_lock<std::mutex> lock(t.m);
    std::map<std::string, std::string>::iterator it;
    const bool found = t.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] {
      it = t.values.find(scope_ + key);
      return it != t.values.end();
    });
    if (!found) {
      return Status(SR_DEADLINE_EXCEEDED,
                    describe_ + ": key '" + key + "' did not appear within " + std::to_string(timeout_ms) + " ms");
    }
    return it->second;
  }

  std::string Describe() const override { return describe_; }

 private:
  const std::string scope_;
  const std::string describe_;
  const int64_t default_timeout_ms_;
};

}  // namespace

StatusOr<std::unique_ptr<KvStore>> OpenLocalStore(const std::string& name, const std::string& prefix,
                                                  int64_t default_timeout_ms) {
  return std::unique_ptr<KvStore>(new LocalStore(name + "\n" + prefix + "\n",
                                                 "rendezvous local:" + name + " (prefix " + prefix + ")",
                                                 default_timeout_ms));
}

}  // namespace shardrec::kv_store_impl
