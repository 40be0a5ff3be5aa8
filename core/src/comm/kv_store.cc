// KvStore's ABI view and OpenKvStore's dispatch on the rendezvous string.
#include "shardrec/core/comm/kv_store.h"

#include <charconv>
#include <cstring>

#include "kv_store_impls.h"

namespace shardrec {

namespace {
// Copies a reason into a plugin's error buffer, truncated and terminated.
void WriteReason(const std::string& reason, char* err, size_t err_size) {
  if (err == nullptr || err_size == 0) return;
  const size_t n = std::min(reason.size(), err_size - 1);
  std::memcpy(err, reason.data(), n);
  err[n] = '\0';
}
}  // namespace

KvStore::KvStore() {
  abi_.struct_size = SR_STRUCT_SIZE(sr_kv_store, get);
  abi_.ctx = this;
  abi_.set = [](void* ctx, const char* key, const void* value, size_t size, char* err, size_t err_size) -> int32_t {
    try {
      if (key == nullptr || (value == nullptr && size > 0)) {
        WriteReason("NULL key or value", err, err_size);
        return SR_INVALID_ARGUMENT;
      }
      Status s = static_cast<KvStore*>(ctx)->Set(key, std::string_view(static_cast<const char*>(value), size));
      if (!s.ok()) WriteReason(s.message(), err, err_size);
      return s.code();
    } catch (const std::exception& e) {
      WriteReason(e.what(), err, err_size);
      return SR_INTERNAL;
    }
  };
  abi_.get = [](void* ctx, const char* key, int64_t timeout_ms, void (*sink)(void*, const void*, size_t),
                void* sink_ctx, char* err, size_t err_size) -> int32_t {
    try {
      if (key == nullptr || sink == nullptr) {
        WriteReason("NULL key or sink", err, err_size);
        return SR_INVALID_ARGUMENT;
      }
      StatusOr<std::string> v = static_cast<KvStore*>(ctx)->Get(key, timeout_ms);
      if (!v.ok()) {
        WriteReason(v.status().message(), err, err_size);
        return v.status().code();
      }
      sink(sink_ctx, v.value().data(), v.value().size());
      return SR_OK;
    } catch (const std::exception& e) {
      WriteReason(e.what(), err, err_size);
      return SR_INTERNAL;
    }
  };
}

StatusOr<RendezvousAddress> ParseRendezvous(const std::string& rendezvous) {
  const std::string quoted = "'" + rendezvous + "'";
  const size_t colon = rendezvous.find(':');
  RendezvousAddress a;
  a.kind = rendezvous.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : rendezvous.substr(colon + 1);
  if (a.kind == "file" || a.kind == "local") {
    if (rest.empty()) return InvalidArgumentError(quoted + " names no " + (a.kind == "file" ? "directory (file:DIR)" : "table (local:NAME)"));
    a.where = rest;
    return a;
  }
  if (a.kind == "redis") {
    const size_t port_colon = rest.rfind(':');
    if (port_colon == std::string::npos || port_colon == 0) return InvalidArgumentError(quoted + " is not redis:HOST:PORT");
    const std::string port = rest.substr(port_colon + 1);
    const char* first = port.data();
    const char* last = port.data() + port.size();
    auto [end, ec] = std::from_chars(first, last, a.port);
    if (port.empty() || port[0] < '0' || port[0] > '9' || ec != std::errc() || end != last || a.port < 1 ||
        a.port > 65535) {
      return InvalidArgumentError(quoted + ": port '" + port + "' is not a number in 1..65535");
    }
    a.where = rest.substr(0, port_colon);
    return a;
  }
  return InvalidArgumentError(quoted + " is neither file:DIR, redis:HOST:PORT nor local:NAME");
}

StatusOr<std::unique_ptr<KvStore>> OpenKvStore(const std::string& rendezvous, const std::string& prefix,
                                               int64_t default_timeout_ms) {
  if (prefix.empty()) return InvalidArgumentError("rendezvous " + rendezvous + ": the job prefix is empty");
  auto parsed = ParseRendezvous(rendezvous);
  if (!parsed.ok()) return parsed.status().WithContext("rendezvous");
  const RendezvousAddress& a = parsed.value();
  if (a.kind == "file") return kv_store_impl::OpenFileStore(a.where, prefix, default_timeout_ms);
  if (a.kind == "local") return kv_store_impl::OpenLocalStore(a.where, prefix, default_timeout_ms);
  return kv_store_impl::OpenRedisStore(a.where, a.port, prefix, default_timeout_ms);
}

}  // namespace shardrec
