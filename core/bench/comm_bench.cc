// RunCommBench (comm_bench.h).
#include "comm_bench.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#if SHARDREC_HAVE_GLOO
#include "gloo_direct.h"
#endif

namespace shardrec::bench {

namespace {

using Clock = std::chrono::steady_clock;

// The slowest rank's value.
StatusOr<double> Max(const ProcessGroup& g, double v) {
  Tensor t = Tensor::FromVector<double>({v}, {1});
  SR_RETURN_IF_ERROR(g.AllReduce(t, &t, SR_REDUCE_MAX));
  return t.data<double>()[0];
}

// Times `body` (one operation; returns its status): a calibration run sets
// the iterations per measurement (agreed across ranks), then `reps`
// measurements, each started by a barrier.
template <class Body>
StatusOr<Timing> Measure(const ProcessGroup& g, const CommBenchConfig& c, Body&& body) {
  SR_RETURN_IF_ERROR(body());  // warm-up: connections, page faults
  SR_RETURN_IF_ERROR(g.Barrier());
  auto t0 = Clock::now();
  SR_RETURN_IF_ERROR(body());
  SR_ASSIGN_OR_RETURN(double once, Max(g, std::chrono::duration<double>(Clock::now() - t0).count()));
  const int64_t iters = std::clamp<int64_t>(static_cast<int64_t>(c.min_time / std::max(once, 1e-7)), 1, 1000000);
  std::vector<double> times;
  for (int r = 0; r < c.reps; ++r) {
    SR_RETURN_IF_ERROR(g.Barrier());
    t0 = Clock::now();
    for (int64_t i = 0; i < iters; ++i) SR_RETURN_IF_ERROR(body());
    SR_ASSIGN_OR_RETURN(double t, Max(g, std::chrono::duration<double>(Clock::now() - t0).count() / iters));
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return Timing{times.front(), times[times.size() / 2]};
}

// The op on float buffers; `per_rank` floats in each per-peer slice.
struct Buffers {
  Tensor send, recv;
  std::vector<int64_t> counts;  // per peer
  int64_t per_rank = 0;
};

Buffers Layout(CommBenchOp op, int n, int64_t bytes) {
  const int64_t elems = std::max<int64_t>(bytes / 4, n);
  const int64_t per = std::max<int64_t>(elems / n, 1);
  Buffers b;
  b.per_rank = per;
  b.counts.assign(n, per);
  switch (op) {
    case CommBenchOp::kAllToAllV:
    case CommBenchOp::kReduceScatterV:
      b.send = Tensor::Zeros(dtype::kFloat32, {per * n});
      b.recv = Tensor::Zeros(dtype::kFloat32, {op == CommBenchOp::kAllToAllV ? per * n : per});
      break;
    case CommBenchOp::kAllGatherV:
      b.send = Tensor::Zeros(dtype::kFloat32, {per});
      b.recv = Tensor::Zeros(dtype::kFloat32, {per * n});
      break;
    case CommBenchOp::kAllReduce:
      b.per_rank = per * n;  // the whole buffer
      b.send = Tensor::Zeros(dtype::kFloat32, {per * n});
      b.recv = Tensor::Zeros(dtype::kFloat32, {per * n});
      break;
  }
  return b;
}

Status Run(const ProcessGroup& g, CommBenchOp op, Buffers& b) {
  switch (op) {
    case CommBenchOp::kAllToAllV: return g.AllToAllV(b.send, b.counts, &b.recv, b.counts);
    case CommBenchOp::kReduceScatterV: return g.ReduceScatterV(b.send, &b.recv, b.counts);
    case CommBenchOp::kAllGatherV: return g.AllGatherV(b.send, &b.recv, b.counts);
    case CommBenchOp::kAllReduce: return g.AllReduce(b.send, &b.recv);
  }
  return InternalError("unknown op");
}

double BusFactor(CommBenchOp op, int n) {
  if (n == 1) return 0;  // nothing crosses a bus
  const double f = static_cast<double>(n - 1) / n;
  return op == CommBenchOp::kAllReduce ? 2 * f : f;
}

}  // namespace

StatusOr<CommBenchOp> ParseCommBenchOp(const std::string& name) {
  for (CommBenchOp op : {CommBenchOp::kAllToAllV, CommBenchOp::kReduceScatterV, CommBenchOp::kAllGatherV,
                         CommBenchOp::kAllReduce}) {
    if (name == CommBenchOpName(op)) return op;
  }
  return InvalidArgumentError("unknown op '" + name +
                              "': all_to_all_v, reduce_scatter_v, all_gather_v or all_reduce");
}

const char* CommBenchOpName(CommBenchOp op) {
  switch (op) {
    case CommBenchOp::kAllToAllV: return "all_to_all_v";
    case CommBenchOp::kReduceScatterV: return "reduce_scatter_v";
    case CommBenchOp::kAllGatherV: return "all_gather_v";
    case CommBenchOp::kAllReduce: return "all_reduce";
  }
  return "?";
}

StatusOr<CommBenchResult> RunCommBench(const ProcessGroup& g, const CommBenchConfig& c,
                                       const std::function<void(const std::string&)>& progress) {
  const int n = g.world_size();
  auto say = [&](const std::string& s) {
    if (progress && g.rank() == 0) progress(s);
  };
  CommBenchResult r;
  Buffers big = Layout(c.op, n, c.bytes);
  const double bytes = static_cast<double>(c.op == CommBenchOp::kAllGatherV ? big.recv.nbytes() : big.send.nbytes());
  say(std::string(CommBenchOpName(c.op)) + ": " + std::to_string(static_cast<int64_t>(bytes)) + " bytes per rank");
  SR_ASSIGN_OR_RETURN(r.op, Measure(g, c, [&] { return Run(g, c.op, big); }));
  Buffers small = Layout(c.op, n, c.small_bytes);
  say("small messages: " + std::to_string(c.small_bytes) + " bytes");
  SR_ASSIGN_OR_RETURN(r.small, Measure(g, c, [&] { return Run(g, c.op, small); }));
  r.bus_factor = BusFactor(c.op, n);
  r.algbw_gbps = bytes / r.op.median / 1e9;
  r.busbw_gbps = r.algbw_gbps * r.bus_factor;

  if (c.baseline && g.backend() == "gloo") {
#if SHARDREC_HAVE_GLOO
    say("baseline: Gloo's own algorithm on the same buffers");
    SR_ASSIGN_OR_RETURN(std::unique_ptr<GlooDirect> direct, GlooDirect::Connect(g));
    std::function<void()> op =
        direct->Prepare(c.op, big.send.data<float>(), big.recv.data<float>(), big.per_rank);
    SR_ASSIGN_OR_RETURN(r.baseline, Measure(g, c, [&]() -> Status {
                          try {
                            op();
                          } catch (const std::exception& e) {
                            return UnavailableError(std::string("gloo direct: ") + e.what());
                          }
                          return Status::Ok();
                        }));
    r.baseline_name = c.op == CommBenchOp::kReduceScatterV ? "gloo::ReduceScatterHalvingDoubling (legacy, in place)"
                      : c.op == CommBenchOp::kAllReduce   ? "gloo::allreduce (ring)"
                      : c.op == CommBenchOp::kAllToAllV   ? "gloo::alltoallv"
                                                          : "gloo::allgatherv";
#endif
  } else if (c.baseline && g.backend() == "local") {
    // Every rank's thread copies as many bytes as the collective's buffer at
    // the same time: the memory bandwidth the threads share.
    say("baseline: memcpy of the same bytes by every rank at once");
    Tensor src = Tensor::Zeros(dtype::kUInt8, {static_cast<int64_t>(bytes)});
    Tensor dst = Tensor::Zeros(dtype::kUInt8, {static_cast<int64_t>(bytes)});
    SR_ASSIGN_OR_RETURN(r.baseline, Measure(g, c, [&]() -> Status {
                          std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
                          return Status::Ok();
                        }));
    r.baseline_name = "memcpy of the same bytes, every rank at once";
  }
  if (r.baseline.median > 0) r.baseline_ratio = r.baseline.median / r.op.median;
  return r;
}

}  // namespace shardrec::bench
