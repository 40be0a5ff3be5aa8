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

using Body = std::function<Status()>;

// Times each body (one operation; returns its status): a calibration run
// sets each one's iterations per measurement (agreed across ranks), then
// `reps` rounds measure every body once, in turn, each measurement started
// by a barrier. Interleaving puts a plugin and its baseline under the same
// machine noise, which on a small VM moves both by tens of percent.
StatusOr<std::vector<Timing>> Measure(const ProcessGroup& g, const CommBenchConfig& c,
                                      const std::vector<Body>& bodies) {
  std::vector<int64_t> iters;
  for (const Body& body : bodies) {
    SR_RETURN_IF_ERROR(body());  // warm-up: connections, page faults
    SR_RETURN_IF_ERROR(g.Barrier());
    const auto t0 = Clock::now();
    SR_RETURN_IF_ERROR(body());
    SR_ASSIGN_OR_RETURN(double once, Max(g, std::chrono::duration<double>(Clock::now() - t0).count()));
    iters.push_back(std::clamp<int64_t>(static_cast<int64_t>(c.min_time / std::max(once, 1e-7)), 1, 1000000));
  }
  std::vector<std::vector<double>> times(bodies.size());
  for (int r = 0; r < c.reps; ++r) {
    for (size_t b = 0; b < bodies.size(); ++b) {
      SR_RETURN_IF_ERROR(g.Barrier());
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < iters[b]; ++i) SR_RETURN_IF_ERROR(bodies[b]());
      SR_ASSIGN_OR_RETURN(double t, Max(g, std::chrono::duration<double>(Clock::now() - t0).count() / iters[b]));
      times[b].push_back(t);
    }
  }
  std::vector<Timing> out;
  for (auto& t : times) {
    std::sort(t.begin(), t.end());
    out.push_back(Timing{t.front(), t[t.size() / 2]});
  }
  return out;
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
    default: break;  // ParseCommBenchOp admits only the four above
  }
  return b;
}

Status Run(const ProcessGroup& g, CommBenchOp op, Buffers& b) {
  switch (op) {
    case CommBenchOp::kAllToAllV: return g.AllToAllV(b.send, b.counts, &b.recv, b.counts);
    case CommBenchOp::kReduceScatterV: return g.ReduceScatterV(b.send, &b.recv, b.counts);
    case CommBenchOp::kAllGatherV: return g.AllGatherV(b.send, &b.recv, b.counts);
    case CommBenchOp::kAllReduce: return g.AllReduce(b.send, &b.recv);
    default: break;
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

StatusOr<CommBenchResult> RunCommBench(const ProcessGroup& g, const CommBenchConfig& c,
                                       const std::function<void(const std::string&)>& progress) {
  const int n = g.world_size();
  auto say = [&](const std::string& s) {
    if (progress && g.rank() == 0) progress(s);
  };
  CommBenchResult r;
  Buffers big = Layout(c.op, n, c.bytes);
  const double bytes = static_cast<double>(c.op == CommBenchOp::kAllGatherV ? big.recv.nbytes() : big.send.nbytes());
  std::vector<Body> bodies = {[&] { return Run(g, c.op, big); }};

  // The baseline, measured in turn with the collective.
#if SHARDREC_HAVE_GLOO
  std::unique_ptr<GlooDirect> direct;
  std::function<void()> direct_op;
#endif
  Tensor src, dst;
  if (c.baseline && g.backend() == "gloo") {
#if SHARDREC_HAVE_GLOO
    SR_ASSIGN_OR_RETURN(direct, GlooDirect::Connect(g, c.gloo_hostname, c.gloo_iface));
    direct_op = direct->Prepare(c.op, big.send.data<float>(), big.recv.data<float>(), big.per_rank);
    bodies.push_back([&]() -> Status {
      try {
        direct_op();
      } catch (const std::exception& e) {
        return UnavailableError(std::string("gloo direct: ") + e.what());
      }
      return Status::Ok();
    });
    r.baseline_name = c.op == CommBenchOp::kReduceScatterV ? "gloo::ReduceScatterHalvingDoubling (legacy, in place)"
                      : c.op == CommBenchOp::kAllReduce   ? "gloo::allreduce (ring)"
                      : c.op == CommBenchOp::kAllToAllV   ? "gloo::alltoallv"
                                                          : "gloo::allgatherv";
#endif
  } else if (c.baseline && g.backend() == "local") {
    // Every rank's thread copies as many bytes as the collective's buffer at
    // the same time: the memory bandwidth the threads share.
    src = Tensor::Zeros(dtype::kUInt8, {static_cast<int64_t>(bytes)});
    dst = Tensor::Zeros(dtype::kUInt8, {static_cast<int64_t>(bytes)});
    bodies.push_back([&]() -> Status {
      std::memcpy(dst.raw_data(), src.raw_data(), src.nbytes());
      return Status::Ok();
    });
    r.baseline_name = "memcpy of the same bytes, every rank at once";
  }
  say(std::string(CommBenchOpName(c.op)) + ": " + std::to_string(static_cast<int64_t>(bytes)) + " bytes per rank" +
      (r.baseline_name.empty() ? "" : ", in turn with the baseline: " + r.baseline_name));
  SR_ASSIGN_OR_RETURN(std::vector<Timing> timed, Measure(g, c, bodies));
  r.op = timed[0];
  if (timed.size() > 1) r.baseline = timed[1];

  Buffers small = Layout(c.op, n, c.small_bytes);
  say("small messages: " + std::to_string(c.small_bytes) + " bytes");
  SR_ASSIGN_OR_RETURN(std::vector<Timing> small_timed, Measure(g, c, {[&] { return Run(g, c.op, small); }}));
  r.small = small_timed[0];
  r.bus_factor = BusFactor(c.op, n);
  r.algbw_gbps = bytes / r.op.median / 1e9;
  r.busbw_gbps = r.algbw_gbps * r.bus_factor;
  if (r.baseline.median > 0) {
    r.baseline_ratio = r.baseline.median / r.op.median;
    r.baseline_ratio_best = r.baseline.best / r.op.best;
  }
  return r;
}

}  // namespace shardrec::bench
