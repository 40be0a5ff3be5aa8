// redis:HOST:PORT — keys in a Redis server, reached through hiredis (the
// client Debian's Gloo is built with). One connection per store, guarded
// by a mutex: stores see a few calls per collective set-up and one per
// heartbeat, never the data path. Readers poll GET.
#include <hiredis/hiredis.h>

#include <mutex>

#include "kv_store_impls.h"

namespace shardrec::kv_store_impl {
namespace {

struct ReplyDeleter {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyDeleter>;

class RedisStore final : public PollingStore {
 public:
  RedisStore(redisContext* ctx, std::string prefix, std::string describe, int64_t default_timeout_ms)
      : PollingStore(std::move(describe), default_timeout_ms), ctx_(ctx), prefix_(std::move(prefix)) {}
  ~RedisStore() override { redisFree(ctx_); }

  Status Set(const std::string& key, std::string_view value) override {
    const std::string k = prefix_ + "/" + key;
    std::lock_guard<std::mutex> lock(m_);
    Reply r(static_cast<redisReply*>(
        redisCommand(ctx_, "SET %b %b", k.data(), k.size(), value.data(), value.size())));
    if (r == nullptr) return UnavailableError(describe_ + ": SET " + key + ": " + ctx_->errstr);
    if (r->type == REDIS_REPLY_ERROR) return UnavailableError(describe_ + ": SET " + key + ": " + r->str);
    return Status::Ok();
  }

  StatusOr<bool> TryRead(const std::string& key, std::string* value) override {
    const std::string k = prefix_ + "/" + key;
    std::lock_guard<std::mutex> lock(m_);
    Reply r(static_cast<redisReply*>(redisCommand(ctx_, "GET %b", k.data(), k.size())));
    if (r == nullptr) return UnavailableError(describe_ + ": GET " + key + ": " + ctx_->errstr);
    if (r->type == REDIS_REPLY_ERROR) return UnavailableError(describe_ + ": GET " + key + ": " + r->str);
    if (r->type != REDIS_REPLY_STRING) return false;
    value->assign(r->str, r->len);
    return true;
  }

 private:
  redisContext* const ctx_;
  const std::string prefix_;
  std::mutex m_;
};

}  // namespace

StatusOr<std::unique_ptr<KvStore>> OpenRedisStore(const std::string& host, int port, const std::string& prefix,
                                                  int64_t default_timeout_ms) {
  const std::string describe =
      "rendezvous redis:" + host + ":" + std::to_string(port) + " (prefix " + prefix + ")";
  // An unreachable server is reported now: connecting gives up after 3 s.
  const timeval connect_timeout{3, 0};
  redisContext* ctx = redisConnectWithTimeout(host.c_str(), port, connect_timeout);
  if (ctx == nullptr) return UnavailableError(describe + ": cannot allocate a connection");
  if (ctx->err != 0) {
    std::string why = ctx->errstr;
    redisFree(ctx);
    return UnavailableError(describe + ": cannot connect: " + why + " (is redis-server running there?)");
  }
  // Replies, too, must not hang forever on a server that stopped answering.
  const timeval io_timeout{10, 0};
  redisSetTimeout(ctx, io_timeout);
  Reply pong(static_cast<redisReply*>(redisCommand(ctx, "PING")));
  if (pong == nullptr || pong->type == REDIS_REPLY_ERROR) {
    std::string why = pong ? pong->str : ctx->errstr;
    redisFree(ctx);
    return UnavailableError(describe + ": the server does not answer PING: " + why);
  }
  return std::unique_ptr<KvStore>(new RedisStore(ctx, "shardrec/" + prefix, describe, default_timeout_ms));
}

}  // namespace shardrec::kv_store_impl
