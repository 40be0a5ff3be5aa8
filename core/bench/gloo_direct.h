// Gloo's own collectives called directly on the bench's buffers: the
// baseline `shardrec bench comm --comm gloo` divides by. Its own full mesh,
// met through the group's store under "bench_direct", so nothing of the
// plugin is on this path.
#pragma once

#include <functional>
#include <memory>

#include "comm_bench.h"

namespace shardrec::bench {

class GlooDirect {
 public:
  // Binds like the plugin: `hostname` or `iface` when given, else 127.0.0.1
  // on one host and this host's name across hosts.
  static StatusOr<std::unique_ptr<GlooDirect>> Connect(const ProcessGroup& group, const std::string& hostname,
                                                       const std::string& iface);
  ~GlooDirect();

  // Gloo's algorithm for `op` on float buffers laid out as the bench lays
  // them (equal per-rank slices of `per_rank` elements).
  std::function<void()> Prepare(CommBenchOp op, float* send, float* recv, int64_t per_rank);

 private:
  struct Impl;
  explicit GlooDirect(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardrec::bench
