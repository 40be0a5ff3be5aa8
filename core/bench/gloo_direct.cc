// GlooDirect (gloo_direct.h).
#include "gloo_direct.h"

#include <gloo/allreduce.h>
#include <gloo/allgatherv.h>
#include <gloo/alltoallv.h>
#include <gloo/math.h>
#include <gloo/reduce_scatter.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

namespace shardrec::bench {

namespace {
// Gloo's Store over the host's store.
class Store final : public ::gloo::rendezvous::Store {
 public:
  Store(KvStore& store, int64_t timeout_ms) : store_(store), timeout_ms_(timeout_ms) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    Check(store_.Set("bench_direct/" + key, std::string_view(data.data(), data.size())));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_.Get("bench_direct/" + key, timeout_ms_);
    Check(v.status());
    return std::vector<char>(v.value().begin(), v.value().end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, std::chrono::milliseconds(timeout_ms_)); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    for (const auto& k : keys) Check(store_.Get("bench_direct/" + k, timeout.count()).status());
  }

 private:
  static void Check(const Status& s) {
    if (!s.ok()) throw std::runtime_error(s.message());
  }
  KvStore& store_;
  int64_t timeout_ms_;
};
}  // namespace

struct GlooDirect::Impl {
  std::shared_ptr<::gloo::rendezvous::Context> context;
  std::unique_ptr<::gloo::ReduceScatterHalvingDoubling<float>> reduce_scatter;
  uint32_t tag = 0;
};

GlooDirect::GlooDirect(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GlooDirect::~GlooDirect() = default;

StatusOr<std::unique_ptr<GlooDirect>> GlooDirect::Connect(const ProcessGroup& group, const std::string& hostname,
                                                          const std::string& iface) {
  auto impl = std::make_unique<Impl>();
  try {
    ::gloo::transport::tcp::attr attr;
    attr.hostname = hostname;
    attr.iface = iface;
    if (hostname.empty() && iface.empty() && group.num_hosts() == 1) attr.hostname = "127.0.0.1";
    auto device = ::gloo::transport::tcp::CreateDevice(attr);
    Store store(group.store(), group.timeout_ms());
    impl->context = std::make_shared<::gloo::rendezvous::Context>(group.rank(), group.world_size());
    impl->context->setTimeout(std::chrono::milliseconds(group.timeout_ms()));
    impl->context->connectFullMesh(store, device);
  } catch (const std::exception& e) {
    return UnavailableError(std::string("gloo direct baseline: cannot connect: ") + e.what());
  }
  return std::unique_ptr<GlooDirect>(new GlooDirect(std::move(impl)));
}

std::function<void()> GlooDirect::Prepare(CommBenchOp op, float* send, float* recv, int64_t per_rank) {
  auto ctx = impl_->context;
  const int n = ctx->size;
  Impl* impl = impl_.get();
  switch (op) {
    case CommBenchOp::kAllToAllV:
      return [=] {
        ::gloo::AlltoallvOptions o(ctx);
        o.setInput(send, std::vector<int64_t>(n, per_rank));
        o.setOutput(recv, std::vector<int64_t>(n, per_rank));
        o.setTag(++impl->tag);
        ::gloo::alltoallv(o);
      };
    case CommBenchOp::kAllGatherV:
      return [=] {
        ::gloo::AllgathervOptions o(ctx);
        o.setInput(send, static_cast<size_t>(per_rank));
        o.setOutput(recv, std::vector<size_t>(n, static_cast<size_t>(per_rank)));
        o.setTag(++impl->tag);
        ::gloo::allgatherv(o);
      };
    case CommBenchOp::kAllReduce:
      return [=] {
        ::gloo::AllreduceOptions o(ctx);
        o.setInput(send, static_cast<size_t>(per_rank));
        o.setOutput(recv, static_cast<size_t>(per_rank));
        o.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&::gloo::sum<float>));
        o.setTag(++impl->tag);
        ::gloo::allreduce(o);
      };
    case CommBenchOp::kReduceScatterV:
      // Gloo 0.5's only reduce-scatter: the legacy algorithm, in place on
      // the send buffer, bound to its pointer at construction.
      impl->reduce_scatter = std::make_unique<::gloo::ReduceScatterHalvingDoubling<float>>(
          ctx, std::vector<float*>{send}, static_cast<int>(per_rank * n),
          std::vector<int>(n, static_cast<int>(per_rank)));
      return [=] { impl->reduce_scatter->run(); };
    default: break;
  }
  return [] {};
}

}  // namespace shardrec::bench
