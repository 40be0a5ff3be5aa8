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

StatusOr<std::unique_ptr<KvStore>> OpenKvStore(const std::string& rendezvous, const std::string& prefix,
                                               int64_t default_timeout_ms) {
  const size_t colon = rendezvous.find(':');
  const std::string kind = rendezvous.substr(0, colon);
  const std::string rest = colon == std::string::npos ? "" : rendezvous.substr(colon + 1);
  if (prefix.empty()) return InvalidArgumentError("rendezvous " + rendezvous + ": the job prefix is empty");
  if (kind == "file" && !rest.empty()) return kv_store_impl::OpenFileStore(rest, prefix, default_timeout_ms);
  if (kind == "local" && !rest.empty()) return kv_store_impl::OpenLocalStore(rest, prefix, default_timeout_ms);
  if (kind == "redis") {
    const size_t port_colon = rest.rfind(':');
    int port = 0;
    const char* first = rest.data() + (port_colon == std::string::npos ? 0 : port_colon + 1);
    const char* last = rest.data() + rest.size();
    if (port_colon != std::string::npos && port_colon > 0 &&
        std::from_chars(first, last, port).ptr == last && port > 0 && port < 65536) {
      return kv_store_impl::OpenRedisStore(rest.substr(0, port_colon), port, prefix, default_timeout_ms);
    }
    return InvalidArgumentError("rendezvous '" + rendezvous + "': expected redis:HOST:PORT");
  }
  return InvalidArgumentError("rendezvous '" + rendezvous +
                              "': expected file:DIR, redis:HOST:PORT or local:NAME");
}

}  // namespace shardrec
