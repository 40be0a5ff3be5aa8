// shardrec plugin SDK — a collective's arguments, checked on this rank and
// copied (the host's count arrays are borrowed only for the call), plus the
// element-wise reductions every CPU backend needs. A comm backend receives a
// `Collective` from CommVtable (sdk/comm.hpp) and never sees a raw
// sr_collective_args.
#ifndef SHARDREC_SDK_COLLECTIVE_HPP_
#define SHARDREC_SDK_COLLECTIVE_HPP_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/abi/comm.h"
#include "shardrec/sdk/collective_ops.hpp"
#include "shardrec/sdk/dtype.hpp"
#include "shardrec/sdk/half.hpp"
#include "shardrec/sdk/status.hpp"
#include "shardrec/sdk/tensor.hpp"

namespace shardrec::sdk {

// One collective as this rank posted it. Counts are elements; displacements
// are their prefix sums (slices packed in rank order, sr_collective_args).
struct Collective {
  CollectiveOp op = CollectiveOp::kBarrier;
  DLDataType dtype{kDLUInt, 8, 1};
  size_t elem_size = 1;
  DLDevice device{kDLCPU, 0};
  const char* send = nullptr;  // byte_offset applied
  char* recv = nullptr;
  int64_t send_numel = 0;
  int64_t recv_numel = 0;
  std::vector<int64_t> send_counts, send_displs;  // all_to_all_v
  std::vector<int64_t> recv_counts, recv_displs;  // all_to_all_v, reduce_scatter_v, all_gather_v
  int32_t reduce_op = SR_REDUCE_SUM;
  int32_t root = 0;
  void* stream = nullptr;
  // Digests of the counts, set by SealCounts() on the rank that posted the
  // collective: with them CheckAgreement costs O(world) per rank instead of
  // O(world^2) (comparing every pair of count vectors).
  struct Digests {
    bool sealed = false;
    uint64_t recv_counts = 0;  // the recv_counts vector, position by position
    uint64_t a2a_sent = 0;     // sum over q of (me, q, send_counts[q])
    uint64_t a2a_expected = 0; // sum over p of (p, me, recv_counts[p])
  } digests;

  size_t Bytes(int64_t elements) const { return static_cast<size_t>(elements) * elem_size; }
};

namespace detail {
// splitmix64's finaliser: a 64-bit mix whose sums tell count matrices apart
// except with probability about 2^-64.
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
inline uint64_t MixEntry(uint64_t from, uint64_t to, int64_t count) {
  return Mix(Mix(from * 0x100000001b3ull + to) ^ static_cast<uint64_t>(count));
}
}  // namespace detail

// Fills c.digests for the collective `rank` posted (O(world)).
inline void SealCounts(Collective& c, int rank) {
  Collective::Digests d;
  for (size_t p = 0; p < c.recv_counts.size(); ++p) {
    d.recv_counts += detail::MixEntry(p, p, c.recv_counts[p]);
    d.a2a_expected += detail::MixEntry(p, static_cast<uint64_t>(rank), c.recv_counts[p]);
  }
  for (size_t q = 0; q < c.send_counts.size(); ++q) {
    d.a2a_sent += detail::MixEntry(static_cast<uint64_t>(rank), q, c.send_counts[q]);
  }
  d.sealed = true;
  c.digests = d;
}

// The element types the reductions below handle, by DTypeName, for a
// backend's "reduce_dtypes" attribute.
inline constexpr const char* kReducibleDTypeNames[] = {"float16", "bfloat16", "float32",
                                                       "float64", "int32",    "int64"};

// True for the element types the reductions below handle.
inline bool IsReducible(DLDataType t) {
  if (t.lanes != 1) return false;
  if (t.code == kDLFloat) return t.bits == 16 || t.bits == 32 || t.bits == 64;
  if (t.code == kDLBfloat) return t.bits == 16;
  if (t.code == kDLInt) return t.bits == 32 || t.bits == 64;
  return false;
}

namespace detail {

struct FlatTensor {
  char* data = nullptr;
  int64_t numel = 0;
};

// A dense tensor of any shape, read as flat elements.
inline FlatTensor Flatten(const DLTensor* t, const char* what, DLDeviceType device_type) {
  if (t == nullptr) throw InvalidArgument(std::string(what) + ": tensor is NULL");
  if (t->device.device_type != device_type) {
    throw InvalidArgument(std::string(what) + ": expected device type " + std::to_string(device_type) +
                          ", got " + std::to_string(t->device.device_type));
  }
  if (t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8 != 0) {
    throw InvalidArgument(std::string(what) + ": unsupported dtype " + DTypeName(t->dtype));
  }
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr)) {
    throw InvalidArgument(std::string(what) + ": malformed shape");
  }
  int64_t numel = 1, contiguous = 1;
  for (int d = t->ndim - 1; d >= 0; --d) {
    if (t->shape[d] < 0) throw InvalidArgument(std::string(what) + ": negative extent in shape " + ShapeString(*t));
    if (t->strides != nullptr && t->shape[d] != 1 && t->strides[d] != contiguous) {
      throw InvalidArgument(std::string(what) + ": must be contiguous, got shape " + ShapeString(*t) +
                            " with non-dense strides");
    }
    contiguous *= t->shape[d];
    numel *= t->shape[d];
  }
  if (t->data == nullptr && numel > 0) throw InvalidArgument(std::string(what) + ": data is NULL");
  return {static_cast<char*>(t->data) + t->byte_offset, numel};
}

inline std::vector<int64_t> Counts(const int64_t* counts, int world, const char* what) {
  if (counts == nullptr) throw InvalidArgument(std::string(what) + " is NULL");
  std::vector<int64_t> v(counts, counts + world);
  for (int r = 0; r < world; ++r) {
    if (v[r] < 0) {
      throw InvalidArgument(std::string(what) + "[" + std::to_string(r) + "] is negative (" +
                            std::to_string(v[r]) + ")");
    }
  }
  return v;
}

inline std::vector<int64_t> Displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

inline int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

inline void NeedAtLeast(int64_t have, int64_t need, const char* what, const char* why) {
  if (have < need) {
    throw InvalidArgument(std::string(what) + " holds " + std::to_string(have) + " elements but " + why +
                          " needs " + std::to_string(need));
  }
}

inline bool Overlap(const char* a, size_t an, const char* b, size_t bn) {
  return an > 0 && bn > 0 && a < b + bn && b < a + an;
}

}  // namespace detail

// Checks `args` for `op` as posted by `rank` of `world` ranks whose tensors
// live on `device_type`, and copies what the collective needs. Everything
// one rank can see is checked here (NULLs, negative counts, counts larger
// than the buffers, dtype and device, root range, forbidden aliasing); what
// only the ranks together can see (counts that disagree across ranks) is
// the backend's to check.
inline Collective ParseCollective(CollectiveOp op, const sr_collective_args* a, int rank, int world,
                                  DLDeviceType device_type) {
  Collective c;
  c.op = op;
  if (op == CollectiveOp::kBarrier) return c;
  if (a == nullptr) throw InvalidArgument(std::string(CollectiveName(op)) + ": args are NULL");
  c.stream = a->stream;
  c.reduce_op = a->reduce_op;
  c.root = a->root;
  detail::FlatTensor recv = detail::Flatten(a->recv, "recv", device_type);
  c.recv = recv.data;
  c.recv_numel = recv.numel;
  c.dtype = a->recv->dtype;
  c.elem_size = a->recv->dtype.bits / 8;
  c.device = a->recv->device;
  if (op != CollectiveOp::kBroadcast) {
    detail::FlatTensor send = detail::Flatten(a->send, "send", device_type);
    if (!SameDType(a->send->dtype, c.dtype)) {
      throw InvalidArgument(std::string("send and recv dtypes differ: ") + DTypeName(a->send->dtype) +
                            " vs " + DTypeName(c.dtype));
    }
    c.send = send.data;
    c.send_numel = send.numel;
  }
  switch (op) {
    case CollectiveOp::kAllToAllV:
      c.send_counts = detail::Counts(a->send_counts, world, "send_counts");
      c.recv_counts = detail::Counts(a->recv_counts, world, "recv_counts");
      detail::NeedAtLeast(c.send_numel, detail::Sum(c.send_counts), "send", "the sum of send_counts");
      detail::NeedAtLeast(c.recv_numel, detail::Sum(c.recv_counts), "recv", "the sum of recv_counts");
      if (c.send_counts[rank] != c.recv_counts[rank]) {
        throw InvalidArgument("send_counts[" + std::to_string(rank) + "] (" + std::to_string(c.send_counts[rank]) +
                              ") must equal recv_counts[" + std::to_string(rank) + "] (" +
                              std::to_string(c.recv_counts[rank]) + "): what a rank sends itself it receives");
      }
      break;
    case CollectiveOp::kReduceScatterV:
      c.recv_counts = detail::Counts(a->recv_counts, world, "recv_counts");
      detail::NeedAtLeast(c.send_numel, detail::Sum(c.recv_counts), "send", "the sum of recv_counts");
      detail::NeedAtLeast(c.recv_numel, c.recv_counts[rank], "recv", "recv_counts[rank]");
      break;
    case CollectiveOp::kAllGatherV:
      c.recv_counts = detail::Counts(a->recv_counts, world, "recv_counts");
      detail::NeedAtLeast(c.send_numel, c.recv_counts[rank], "send", "recv_counts[rank]");
      detail::NeedAtLeast(c.recv_numel, detail::Sum(c.recv_counts), "recv", "the sum of recv_counts");
      break;
    case CollectiveOp::kAllReduce:
      if (c.send_numel != c.recv_numel) {
        throw InvalidArgument("all_reduce: send has " + std::to_string(c.send_numel) + " elements, recv " +
                              std::to_string(c.recv_numel) + "; they must match");
      }
      break;
    case CollectiveOp::kBroadcast:
      if (c.root < 0 || c.root >= world) {
        throw InvalidArgument("broadcast: root " + std::to_string(c.root) + " is not a rank of this " +
                              std::to_string(world) + "-rank communicator");
      }
      break;
    case CollectiveOp::kBarrier: break;
  }
  if (!c.recv_counts.empty()) c.recv_displs = detail::Displacements(c.recv_counts);
  if (!c.send_counts.empty()) c.send_displs = detail::Displacements(c.send_counts);
  if (op == CollectiveOp::kReduceScatterV || op == CollectiveOp::kAllReduce) {
    if (!IsReducible(c.dtype)) {
      std::string names;
      for (const char* n : kReducibleDTypeNames) names += (names.empty() ? "" : ", ") + std::string(n);
      throw InvalidArgument(std::string(CollectiveName(op)) + ": cannot reduce dtype " + DTypeName(c.dtype) + " (" +
                            names + ")");
    }
    if (c.reduce_op != SR_REDUCE_SUM && c.reduce_op != SR_REDUCE_MAX && c.reduce_op != SR_REDUCE_MIN) {
      throw InvalidArgument(std::string(CollectiveName(op)) + ": unknown reduce_op " + std::to_string(c.reduce_op));
    }
  }
  // all_reduce may run in place (recv == send); any other overlap would
  // read what the collective already overwrote.
  const bool in_place = op == CollectiveOp::kAllReduce && c.send == c.recv;
  if (op != CollectiveOp::kBroadcast && !in_place &&
      detail::Overlap(c.send, c.Bytes(c.send_numel), c.recv, c.Bytes(c.recv_numel))) {
    throw InvalidArgument(std::string(CollectiveName(op)) + ": send and recv overlap" +
                          (op == CollectiveOp::kAllReduce ? " without being the same buffer" : ""));
  }
  return c;
}

// Checks that every rank posted the same collective with arguments that fit
// together: same op and dtype, same reduce op, root and sizes where those
// must agree, and all_to_all_v counts where what p sends q is what q
// expects from p. `ops[q]` is rank q's collective (buffers not needed);
// `g` maps ranks to the job's for messages (the collective's name and
// number come from the Job that runs it).
// Every rank that runs it over the same `ops` throws the same error.
inline void CheckAgreement(const std::vector<const Collective*>& ops, const std::vector<int>& g) {
  const int n = static_cast<int>(ops.size());
  const Collective& c0 = *ops[0];
  // With every rank's digests, equal digests stand for equal counts; the
  // full comparison below runs only where they differ, to say how.
  const bool sealed = std::all_of(ops.begin(), ops.end(), [](const Collective* c) { return c->digests.sealed; });
  auto fail = [&](const std::string& m) { throw InvalidArgument("ranks disagree: " + m); };
  auto rank = [&](int q) { return "rank " + std::to_string(g[q]); };
  for (int q = 1; q < n; ++q) {
    const Collective& c = *ops[q];
    if (c.op != c0.op) fail(rank(q) + " posted " + CollectiveName(c.op) + " instead");
    if (c.op == CollectiveOp::kBarrier) continue;
    if (!SameDType(c.dtype, c0.dtype)) {
      fail(rank(q) + " uses " + DTypeName(c.dtype) + ", " + rank(0) + " " + DTypeName(c0.dtype));
    }
    if ((c.op == CollectiveOp::kAllReduce || c.op == CollectiveOp::kReduceScatterV) && c.reduce_op != c0.reduce_op) {
      fail(rank(q) + " reduces with " + ReduceOpName(c.reduce_op) + ", " + rank(0) + " with " +
           ReduceOpName(c0.reduce_op));
    }
    if ((c.op == CollectiveOp::kReduceScatterV || c.op == CollectiveOp::kAllGatherV) &&
        !(sealed && c.digests.recv_counts == c0.digests.recv_counts) && c.recv_counts != c0.recv_counts) {
      for (int p = 0; p < n; ++p) {
        if (c.recv_counts[p] != c0.recv_counts[p]) {
          fail(rank(q) + " has recv_counts[" + std::to_string(p) + "] = " + std::to_string(c.recv_counts[p]) + ", " +
               rank(0) + " has " + std::to_string(c0.recv_counts[p]));
        }
      }
    }
    if (c.op == CollectiveOp::kAllReduce && c.recv_numel != c0.recv_numel) {
      fail(rank(q) + " reduces " + std::to_string(c.recv_numel) + " elements, " + rank(0) + " " +
           std::to_string(c0.recv_numel));
    }
    if (c.op == CollectiveOp::kBroadcast) {
      if (c.root != c0.root) fail(rank(q) + " names root " + std::to_string(c.root) + ", " + rank(0) + " " + std::to_string(c0.root));
      if (c.recv_numel != c0.recv_numel) {
        fail(rank(q) + " has " + std::to_string(c.recv_numel) + " elements, " + rank(0) + " " +
             std::to_string(c0.recv_numel));
      }
    }
  }
  if (c0.op == CollectiveOp::kAllToAllV) {
    if (sealed) {
      // Every (p, q, S[p][q]) sent equals a (p, q, R[q][p]) expected exactly
      // when the two sums of mixed entries agree (up to a 2^-64 collision).
      uint64_t sent = 0, expected = 0;
      for (const Collective* c : ops) {
        sent += c->digests.a2a_sent;
        expected += c->digests.a2a_expected;
      }
      if (sent == expected) return;
    }
    for (int p = 0; p < n; ++p) {
      for (int q = 0; q < n; ++q) {
        const int64_t sent = ops[p]->send_counts[q], expected = ops[q]->recv_counts[p];
        if (sent != expected) {
          fail(rank(p) + " sends " + std::to_string(sent) + " elements to " + rank(q) + ", which expects " +
               std::to_string(expected));
        }
      }
    }
  }
}


// The arguments of a collective as int64s, for backends whose ranks cannot
// see each other's memory: exchanged (all-gathered) before the collective,
// they let CheckAgreement run on every rank. 6 + 2 * world values.
inline std::vector<int64_t> EncodeArguments(const Collective& c, int world) {
  std::vector<int64_t> v = {static_cast<int64_t>(c.op), c.dtype.code, c.dtype.bits, c.reduce_op, c.root,
                            c.op == CollectiveOp::kAllReduce || c.op == CollectiveOp::kBroadcast ? c.recv_numel : 0};
  v.resize(6 + 2 * static_cast<size_t>(world), 0);
  for (int q = 0; q < world && !c.send_counts.empty(); ++q) v[6 + q] = c.send_counts[q];
  for (int q = 0; q < world && !c.recv_counts.empty(); ++q) v[6 + world + q] = c.recv_counts[q];
  return v;
}

inline Collective DecodeArguments(const int64_t* v, int world) {
  Collective c;
  c.op = static_cast<CollectiveOp>(v[0]);
  c.dtype = DLDataType{static_cast<uint8_t>(v[1]), static_cast<uint8_t>(v[2]), 1};
  c.reduce_op = static_cast<int32_t>(v[3]);
  c.root = static_cast<int32_t>(v[4]);
  c.recv_numel = v[5];
  c.send_counts.assign(v + 6, v + 6 + world);
  c.recv_counts.assign(v + 6 + world, v + 6 + 2 * world);
  return c;
}

// ---------------------------------------------------------------------------
// Reductions. Narrow floats are widened to float32, combined, and rounded
// once to nearest-even, so a k-way reduction of float16 inputs equals the
// float32 result rounded (not k-1 roundings).
// ---------------------------------------------------------------------------
namespace detail {

template <class T>
inline T Combine(int32_t op, T a, T b) {
  if (op == SR_REDUCE_SUM) return static_cast<T>(a + b);
  if (op == SR_REDUCE_MAX) return a < b ? b : a;
  return b < a ? b : a;
}

template <class T>
void ReduceManyT(int32_t op, T* dst, const void* const* srcs, int k, int64_t n) {
  const T* s0 = static_cast<const T*>(srcs[0]);
  if (k == 1) {
    if (static_cast<const void*>(dst) != s0) std::memmove(dst, s0, sizeof(T) * n);
    return;
  }
  bool aliased = false;
  for (int j = 0; j < k; ++j) aliased |= static_cast<const void*>(dst) == srcs[j];
  if (!aliased && op == SR_REDUCE_SUM) {
    // The common case in one streaming pass per source, vectorised:
    // dst = s0 + s1, then dst += s2, ... (still in rank order).
    const T* __restrict a = s0;
    const T* __restrict b = static_cast<const T*>(srcs[1]);
    T* __restrict d = dst;
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(a[i] + b[i]);
    for (int j = 2; j < k; ++j) {
      const T* __restrict s = static_cast<const T*>(srcs[j]);
      for (int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(d[i] + s[i]);
    }
    return;
  }
  // Blocked so that dst may alias one source (each block is read whole
  // before it is written).
  constexpr int64_t kBlock = 1024;
  T acc[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    for (int64_t i = 0; i < m; ++i) acc[i] = s0[b + i];
    for (int j = 1; j < k; ++j) {
      const T* s = static_cast<const T*>(srcs[j]) + b;
      if (op == SR_REDUCE_SUM) {
        for (int64_t i = 0; i < m; ++i) acc[i] += s[i];
      } else {
        for (int64_t i = 0; i < m; ++i) acc[i] = Combine(op, acc[i], s[i]);
      }
    }
    std::memcpy(dst + b, acc, sizeof(T) * m);
  }
}

template <float (*Widen)(uint16_t), uint16_t (*Narrow)(float)>
void ReduceManyNarrow(int32_t op, uint16_t* dst, const void* const* srcs, int k, int64_t n) {
  constexpr int64_t kBlock = 1024;
  float acc[kBlock];
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t m = std::min(kBlock, n - b);
    const uint16_t* s0 = static_cast<const uint16_t*>(srcs[0]) + b;
    for (int64_t i = 0; i < m; ++i) acc[i] = Widen(s0[i]);
    for (int j = 1; j < k; ++j) {
      const uint16_t* s = static_cast<const uint16_t*>(srcs[j]) + b;
      for (int64_t i = 0; i < m; ++i) acc[i] = Combine(op, acc[i], Widen(s[i]));
    }
    for (int64_t i = 0; i < m; ++i) dst[b + i] = Narrow(acc[i]);
  }
}

}  // namespace detail

// dst[i] = srcs[0][i] (op) srcs[1][i] (op) ... for n elements of `dtype`,
// combined in the order given (deterministic). dst may alias one source.
inline void ReduceMany(DLDataType dtype, int32_t op, void* dst, const void* const* srcs, int k, int64_t n) {
  if (k <= 0 || n <= 0) return;
  if (dtype.code == kDLFloat && dtype.bits == 32) return detail::ReduceManyT(op, static_cast<float*>(dst), srcs, k, n);
  if (dtype.code == kDLFloat && dtype.bits == 64) return detail::ReduceManyT(op, static_cast<double*>(dst), srcs, k, n);
  if (dtype.code == kDLInt && dtype.bits == 32) return detail::ReduceManyT(op, static_cast<int32_t*>(dst), srcs, k, n);
  if (dtype.code == kDLInt && dtype.bits == 64) return detail::ReduceManyT(op, static_cast<int64_t*>(dst), srcs, k, n);
  if (dtype.code == kDLFloat && dtype.bits == 16) {
    return detail::ReduceManyNarrow<HalfToFloat, FloatToHalf>(op, static_cast<uint16_t*>(dst), srcs, k, n);
  }
  if (dtype.code == kDLBfloat && dtype.bits == 16) {
    return detail::ReduceManyNarrow<BFloat16ToFloat, FloatToBFloat16>(op, static_cast<uint16_t*>(dst), srcs, k, n);
  }
  throw InvalidArgument("cannot reduce dtype " + DTypeName(dtype));
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_COLLECTIVE_HPP_
