// The rendezvous stores the host opens for comm backends: where the ranks of
// a job meet and exchange addresses (Gloo) or ids (NCCL). Three kinds:
//   file:DIR          a directory every rank can see (one host, or a shared
//                     file system); one file per key, written atomically
//   redis:HOST:PORT   a Redis server (several hosts), through hiredis
//   local:NAME        a table inside this process (ranks as threads)
// Every key lives under the job's prefix, so two jobs with different
// prefixes never see each other's keys. A store that cannot be reached
// fails when it is opened, within a few seconds, with the reason.
//
// Thread-safe. A store is handed to plugins as an sr_kv_store (abi()),
// valid while the KvStore lives.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "shardrec/core/status.h"
#include "shardrec/plugin_api.h"

namespace shardrec {

// The longest wait any store (and `--timeout-ms`) takes: 30 days. Longer
// ones are clamped here, so a deadline (now + timeout) always fits the
// clock instead of overflowing it.
inline constexpr int64_t kMaxTimeoutMs = int64_t{30} * 24 * 3600 * 1000;

class KvStore {
 public:
  virtual ~KvStore() = default;
  // Sets `key` (relative to the prefix) to `value`, replacing an older one.
  virtual Status Set(const std::string& key, std::string_view value) = 0;
  // Waits up to timeout_ms for `key` (0: looks once; < 0: the default given
  // at open). DEADLINE_EXCEEDED when it never appeared.
  virtual StatusOr<std::string> Get(const std::string& key, int64_t timeout_ms) = 0;
  // "file:/tmp/rdzv (prefix job1)": for messages.
  virtual std::string Describe() const = 0;

  // The ABI view handed to plugins (sr_comm_create_args.store).
  const sr_kv_store* abi() const { return &abi_; }

 protected:
  KvStore();

 private:
  sr_kv_store abi_{};
};

// A rendezvous string taken apart: kind "file" (where = DIR), "redis"
// (where = HOST, port) or "local" (where = NAME). Errors quote the string and
// say what is wrong (no directory, no host, a port outside 1..65535, an
// unknown kind).
struct RendezvousAddress {
  std::string kind, where;
  int port = 0;
};
StatusOr<RendezvousAddress> ParseRendezvous(const std::string& rendezvous);

// Opens "file:DIR" (DIR is created if missing), "redis:HOST:PORT" or
// "local:NAME" with every key under `prefix`. `default_timeout_ms` is what
// Get(key, -1) waits.
StatusOr<std::unique_ptr<KvStore>> OpenKvStore(const std::string& rendezvous, const std::string& prefix,
                                               int64_t default_timeout_ms);

}  // namespace shardrec
