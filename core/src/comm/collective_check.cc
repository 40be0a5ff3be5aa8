// The collective acceptance suite (collective_check.h). Element values are
// small integers, so sums over up to 7 ranks are exact in float16 and
// bfloat16 too and every comparison is exact. Receive buffers carry guard
// elements past their end that must come back untouched.
#include "shardrec/core/comm/collective_check.h"

#include <algorithm>
#include <cmath>

#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/sdk/collective_ops.hpp"

namespace shardrec {
namespace {

constexpr int64_t kGuard = 3;
constexpr double kSentinel = -99;
constexpr double kGuardAddend = 2;

// What rank `src` puts in element i of the slice meant for `dst`.
double Value(int src, int dst, int64_t i) { return static_cast<double>((src * 37 + dst * 11 + i * 7) % 64) - 32; }

void Set(Tensor& t, int64_t i, double v) {
  const DLDataType d = t.dtype();
  if (SameDType(d, dtype::kFloat32)) {
    t.data<float>()[i] = static_cast<float>(v);
  } else if (SameDType(d, dtype::kInt64)) {
    t.data<int64_t>()[i] = static_cast<int64_t>(v);
  } else if (SameDType(d, dtype::kFloat16)) {
    static_cast<uint16_t*>(t.raw_data())[i] = FloatToHalf(static_cast<float>(v));
  } else {
    static_cast<uint16_t*>(t.raw_data())[i] = FloatToBFloat16(static_cast<float>(v));
  }
}

double Get(const Tensor& t, int64_t i) {
  const DLDataType d = t.dtype();
  if (SameDType(d, dtype::kFloat32)) return t.data<float>()[i];
  if (SameDType(d, dtype::kInt64)) return static_cast<double>(t.data<int64_t>()[i]);
  if (SameDType(d, dtype::kFloat16)) return HalfToFloat(static_cast<const uint16_t*>(t.raw_data())[i]);
  return BFloat16ToFloat(static_cast<const uint16_t*>(t.raw_data())[i]);
}

// A flat buffer of n elements plus guards, every element `fill`.
Tensor Buffer(DLDataType dtype, int64_t n, double fill = kSentinel) {
  Tensor t = Tensor::Empty(dtype, {n + kGuard});
  for (int64_t i = 0; i < n + kGuard; ++i) Set(t, i, fill);
  return t;
}

// Elements per (src, dst) slice in each count pattern.
struct Pattern {
  const char* name;
  int64_t (*count)(int src, int dst, int world, int64_t base);
};
const Pattern kPatterns[] = {
    {"tiny", [](int, int, int, int64_t) -> int64_t { return 1; }},
    {"empty", [](int, int, int, int64_t) -> int64_t { return 0; }},
    // Zero-length slices between some pairs, and a 9x spread in the rest.
    {"uneven", [](int s, int d, int, int64_t b) -> int64_t { return (s * 3 + d * 5) % 4 == 0 ? 0 : b * (1 + (s + 2 * d) % 9); }},
    // Everything goes to the last rank.
    {"skewed", [](int, int d, int w, int64_t b) -> int64_t { return d == w - 1 ? b * 8 : 0; }},
};
constexpr int64_t kBase = 37;  // odd, so chunk splits never line up

double Reduce(int32_t op, double a, double b) {
  if (op == SR_REDUCE_SUM) return a + b;
  if (op == SR_REDUCE_MAX) return std::max(a, b);
  return std::min(a, b);
}

class Checker {
 public:
  Checker(const ProcessGroup& g, const CollectiveCheckOptions& o) : g_(g), o_(o), w_(g.world_size()), r_(g.rank()) {}

  CollectiveCheckReport Run() {
    for (const Pattern& p : kPatterns) {
      auto count = [&](int s, int d) { return p.count(s, d, w_, kBase); };
      for (DLDataType t : {dtype::kFloat32, dtype::kInt64, dtype::kFloat16}) {
        if (!AllToAllV(p.name, t, count)) return report_;
      }
      for (DLDataType t : {dtype::kFloat32, dtype::kInt64}) {
        if (!AllGatherV(p.name, t, count)) return report_;
      }
      for (auto [t, op] : {std::pair{dtype::kFloat32, SR_REDUCE_SUM}, std::pair{dtype::kFloat16, SR_REDUCE_SUM},
                           std::pair{dtype::kBFloat16, SR_REDUCE_SUM}, std::pair{dtype::kInt64, SR_REDUCE_SUM},
                           std::pair{dtype::kFloat32, SR_REDUCE_MAX}}) {
        if (!ReduceScatterV(p.name, t, op, count)) return report_;
      }
    }
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, kBase * 29}) {
      for (auto [t, op] : {std::pair{dtype::kFloat32, SR_REDUCE_SUM}, std::pair{dtype::kFloat32, SR_REDUCE_MAX},
                           std::pair{dtype::kFloat16, SR_REDUCE_SUM}, std::pair{dtype::kBFloat16, SR_REDUCE_SUM},
                           std::pair{dtype::kInt64, SR_REDUCE_SUM}}) {
        if (!AllReduce(std::to_string(n) + " elements", t, op, n, false)) return report_;
      }
    }
    if (!AllReduce("in place", dtype::kFloat32, SR_REDUCE_SUM, kBase * 5, true)) return report_;
    for (int root = 0; root < w_; ++root) {
      if (!Broadcast(root, 1000 + root)) return report_;
    }
    if (!Ok("barrier", g_.Barrier())) return report_;
    Progress("barrier: ok");
    if (!InFlight()) return report_;
    if (o_.large) {
      const int64_t elems = o_.large_bytes / 4;
      auto even = [&](int, int) { return (elems + w_ - 1) / w_; };
      if (!AllToAllV("large", dtype::kFloat32, even)) return report_;
      if (!AllGatherV("large", dtype::kFloat32, even)) return report_;
      if (!ReduceScatterV("large", dtype::kFloat32, SR_REDUCE_SUM, even)) return report_;
      if (!AllReduce("large", dtype::kFloat32, SR_REDUCE_SUM, elems, false)) return report_;
    }
    if (!SubGroups()) return report_;
    InvokeOnRank();
    return report_;
  }

 private:
  template <class Count>
  bool AllToAllV(const std::string& pattern, DLDataType t, Count count) {
    const std::string name = "all_to_all_v " + DTypeName(t) + " " + pattern;
    std::vector<int64_t> sc(w_), rc(w_);
    for (int q = 0; q < w_; ++q) {
      sc[q] = count(r_, q);
      rc[q] = count(q, r_);
    }
    Tensor send = Buffer(t, Sum(sc));
    for (int q = 0, off = 0; q < w_; off += static_cast<int>(sc[q]), ++q) {
      for (int64_t i = 0; i < sc[q]; ++i) Set(send, off + i, Value(r_, q, i));
    }
    Tensor recv = Buffer(t, Sum(rc));
    if (!Ok(name, g_.AllToAllV(send, sc, &recv, rc))) return false;
    std::vector<double> want;
    for (int q = 0; q < w_; ++q) {
      for (int64_t i = 0; i < rc[q]; ++i) want.push_back(Value(q, r_, i));
    }
    return Compare(name, recv, want);
  }

  template <class Count>
  bool AllGatherV(const std::string& pattern, DLDataType t, Count count) {
    const std::string name = "all_gather_v " + DTypeName(t) + " " + pattern;
    std::vector<int64_t> rc(w_);
    for (int q = 0; q < w_; ++q) rc[q] = count(q, 0);
    Tensor send = Buffer(t, rc[r_]);
    for (int64_t i = 0; i < rc[r_]; ++i) Set(send, i, Value(r_, 0, i));
    Tensor recv = Buffer(t, Sum(rc));
    if (!Ok(name, g_.AllGatherV(send, &recv, rc))) return false;
    std::vector<double> want;
    for (int q = 0; q < w_; ++q) {
      for (int64_t i = 0; i < rc[q]; ++i) want.push_back(Value(q, 0, i));
    }
    return Compare(name, recv, want);
  }

  template <class Count>
  bool ReduceScatterV(const std::string& pattern, DLDataType t, int32_t op, Count count) {
    const std::string name =
        "reduce_scatter_v " + DTypeName(t) + " " + sdk::ReduceOpName(op) + " " + pattern;
    std::vector<int64_t> rc(w_);
    for (int q = 0; q < w_; ++q) rc[q] = count(0, q);
    Tensor send = Buffer(t, Sum(rc));
    for (int q = 0, off = 0; q < w_; off += static_cast<int>(rc[q]), ++q) {
      for (int64_t i = 0; i < rc[q]; ++i) Set(send, off + i, Value(r_, q, i));
    }
    Tensor recv = Buffer(t, rc[r_]);
    if (!Ok(name, g_.ReduceScatterV(send, &recv, rc, op))) return false;
    std::vector<double> want(rc[r_]);
    for (int64_t i = 0; i < rc[r_]; ++i) {
      want[i] = Value(0, r_, i);
      for (int p = 1; p < w_; ++p) want[i] = Reduce(op, want[i], Value(p, r_, i));
    }
    return Compare(name, recv, want);
  }

  bool AllReduce(const std::string& what, DLDataType t, int32_t op, int64_t n, bool in_place) {
    const std::string name = "all_reduce " + DTypeName(t) + " " + sdk::ReduceOpName(op) + " " + what;
    // All-reduce wants equal sizes, so the guards are reduced too: they
    // hold kGuardAddend, small enough for exact bfloat16 sums.
    Tensor send = Buffer(t, n, kGuardAddend);
    for (int64_t i = 0; i < n; ++i) Set(send, i, Value(r_, 0, i));
    Tensor recv = in_place ? send : Buffer(t, n);  // a copy shares storage
    if (!Ok(name, g_.AllReduce(send, &recv, op))) return false;
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = Value(0, 0, i);
      for (int p = 1; p < w_; ++p) want[i] = Reduce(op, want[i], Value(p, 0, i));
    }
    for (int64_t i = 0; i < kGuard; ++i) {
      double v = kGuardAddend;
      for (int p = 1; p < w_; ++p) v = Reduce(op, v, kGuardAddend);
      want.push_back(v);
    }
    return Compare(name, recv, want, /*guards=*/false);
  }

  bool Broadcast(int root, int64_t n) {
    const std::string name = "broadcast from rank " + std::to_string(root);
    Tensor buf = Buffer(dtype::kFloat32, n);
    if (r_ == root) {
      for (int64_t i = 0; i < n; ++i) Set(buf, i, Value(root, 0, i));
    }
    if (!Ok(name, g_.Broadcast(&buf, root))) return false;
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = Value(root, 0, i);
    return Compare(name, buf, want);
  }

  // Five requests outstanding at once, waited on in reverse order.
  bool InFlight() {
    const std::string name = "five requests in flight";
    std::vector<int64_t> sc(w_), rc(w_), gc(w_, 5);
    for (int q = 0; q < w_; ++q) {
      sc[q] = 2 + (r_ + q) % 3;
      rc[q] = 2 + (q + r_) % 3;
    }
    Tensor a2a_send = Buffer(dtype::kFloat32, Sum(sc)), a2a_recv = Buffer(dtype::kFloat32, Sum(rc));
    for (int q = 0, off = 0; q < w_; off += static_cast<int>(sc[q]), ++q) {
      for (int64_t i = 0; i < sc[q]; ++i) Set(a2a_send, off + i, Value(r_, q, i));
    }
    Tensor ar_send = Buffer(dtype::kFloat32, 100), ar_recv = Buffer(dtype::kFloat32, 100);
    for (int64_t i = 0; i < 100 + kGuard; ++i) Set(ar_send, i, Value(r_, 0, i));
    Tensor ag_send = Buffer(dtype::kInt64, 5), ag_recv = Buffer(dtype::kInt64, 5 * w_);
    for (int64_t i = 0; i < 5; ++i) Set(ag_send, i, Value(r_, 1, i));
    Tensor rs_send = Buffer(dtype::kFloat32, 5 * w_), rs_recv = Buffer(dtype::kFloat32, 5);
    for (int q = 0; q < w_; ++q) {
      for (int64_t i = 0; i < 5; ++i) Set(rs_send, q * 5 + i, Value(r_, q, i));
    }
    std::vector<StatusOr<CommRequest>> requests;
    requests.push_back(g_.PostAllToAllV(a2a_send, sc, &a2a_recv, rc));
    requests.push_back(g_.PostAllReduce(ar_send, &ar_recv));
    requests.push_back(g_.PostAllGatherV(ag_send, &ag_recv, gc));
    requests.push_back(g_.PostReduceScatterV(rs_send, &rs_recv, gc));
    requests.push_back(g_.PostBarrier());
    for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
      if (!Ok(name, it->ok() ? it->value().Wait(g_.timeout_ms()) : it->status())) return false;
    }
    std::vector<double> want_a2a, want_ar(100 + kGuard), want_ag, want_rs(5);
    for (int q = 0; q < w_; ++q) {
      for (int64_t i = 0; i < rc[q]; ++i) want_a2a.push_back(Value(q, r_, i));
      for (int64_t i = 0; i < 5; ++i) want_ag.push_back(Value(q, 1, i));
    }
    for (int64_t i = 0; i < 100 + kGuard; ++i) {
      for (int p = 0; p < w_; ++p) want_ar[i] += Value(p, 0, i);
    }
    for (int64_t i = 0; i < 5; ++i) {
      for (int p = 0; p < w_; ++p) want_rs[i] += Value(p, r_, i);
    }
    return Compare(name + ": all_to_all_v", a2a_recv, want_a2a) &&
           Compare(name + ": all_reduce", ar_recv, want_ar, false) &&
           Compare(name + ": all_gather_v", ag_recv, want_ag) &&
           Compare(name + ": reduce_scatter_v", rs_recv, want_rs);
  }

  bool SubGroups() {
    const int L = g_.local_world_size(), host = r_ / L;
    auto check = [&](const std::string& name, StatusOr<ProcessGroup> sub, std::vector<int64_t> members) {
      if (!Ok(name, sub.ok() ? Status::Ok() : sub.status())) return false;
      const ProcessGroup& s = sub.value();
      Tensor mine = Tensor::FromVector<int64_t>({r_}, {1});
      Tensor all = Buffer(dtype::kInt64, static_cast<int64_t>(members.size()));
      if (!Ok(name, s.AllGatherV(mine, &all, std::vector<int64_t>(members.size(), 1)))) return false;
      return Compare(name + " all_gather_v of global ranks", all,
                     std::vector<double>(members.begin(), members.end()));
    };
    std::vector<int64_t> same_host, same_local;
    for (int l = 0; l < L; ++l) same_host.push_back(host * L + l);
    for (int h = 0; h < g_.num_hosts(); ++h) same_local.push_back(h * L + g_.local_rank());
    if (!check("intra-host group", g_.IntraHost(), same_host)) return false;
    if (!check("cross-host group", g_.CrossHost(), same_local)) return false;
    Progress("intra-/cross-host groups: ok");
    return true;
  }

  void InvokeOnRank() {
    const int chosen = w_ - 1;
    StatusOr<std::string> got = g_.InvokeOnRankAndBroadcastResult(
        chosen, [&]() -> StatusOr<std::string> { return "computed on rank " + std::to_string(r_); });
    if (!got.ok() || got.value() != "computed on rank " + std::to_string(chosen)) {
      Fail("invoke_on_rank_and_broadcast_result", got.ok() ? "got '" + got.value() + "'" : got.status().message());
      return;
    }
    StatusOr<std::string> err = g_.InvokeOnRankAndBroadcastResult(
        0, []() -> StatusOr<std::string> { return InvalidArgumentError("planned failure"); });
    if (err.ok() || err.status().message().find("planned failure") == std::string::npos) {
      Fail("invoke_on_rank_and_broadcast_result error", "the error did not reach every rank");
      return;
    }
    ++report_.passed;
    Progress("invoke_on_rank_and_broadcast_result: ok");
  }

  static int64_t Sum(const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t x : v) s += x;
    return s;
  }

  bool Ok(const std::string& name, const Status& s) {
    if (s.ok()) return true;
    Fail(name, s.message());
    return false;
  }

  bool Compare(const std::string& name, const Tensor& got, const std::vector<double>& want, bool guards = true) {
    const int64_t n = static_cast<int64_t>(want.size());
    for (int64_t i = 0; i < n; ++i) {
      if (Get(got, i) != want[i]) {
        Fail(name, "element " + std::to_string(i) + " is " + std::to_string(Get(got, i)) + ", expected " +
                       std::to_string(want[i]));
        return true;  // a wrong value leaves the communicator usable
      }
    }
    for (int64_t i = n; guards && i < got.numel(); ++i) {
      if (Get(got, i) != kSentinel) {
        Fail(name, "wrote past the end of recv (guard element " + std::to_string(i - n) + ")");
        return true;
      }
    }
    ++report_.passed;
    Progress(name + ": ok");
    return true;
  }

  void Fail(const std::string& name, const std::string& why) {
    report_.failures.push_back(name + ": rank " + std::to_string(r_) + ": " + why);
  }
  void Progress(const std::string& line) {
    if (r_ == 0 && o_.progress) o_.progress(line);
  }

  const ProcessGroup& g_;
  const CollectiveCheckOptions& o_;
  const int w_, r_;
  CollectiveCheckReport report_;
};

}  // namespace

CollectiveCheckReport RunCollectiveChecks(const ProcessGroup& group, const CollectiveCheckOptions& options) {
  return Checker(group, options).Run();
}

}  // namespace shardrec
