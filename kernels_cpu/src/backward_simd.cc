// Per-row backward work, compiled once per SIMD target (Highway
// foreach_target) and chosen at run time: sum a row's gradient over its
// occurrences, then apply the optimizer to the row in float32 and store it
// back rounded to nearest even. See backward.h for the formulas.
//
//   for each run [k, next) of equal rows r in the sorted occurrences:
//     prefetch W, state and gradient rows of occurrence k + prefetch
//     if r occurs once: g = coef[p] * grad[offset[p] ...]   (read in place)
//     else: g = 0; for k' in run: g = fma(coef[p'], grad[offset[p'] ...], g)
//     optimizer(W[r], state[r], g)    // vector by vector, last partial
//                                     // vector zero-padded
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backward.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/backward_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "simd_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shardrec::kernel_cpu::HWY_NAMESPACE {
namespace {

template <WeightType W>
using Elem = typename StorageOf<W>::T;

// g[0:dim) = sum over occurrences k in [k_begin, k_end), in order, of
// coef[p] * grad row of p (p = position of k); g is zero past dim.
HWY_INLINE void AccumulateGrad(DF d, const SegmentJob& j, int64_t k_begin, int64_t k_end,
                               float* g) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const int64_t padded = (j.dim + n - 1) / n * n;
  for (int64_t c = 0; c < padded; c += n) hn::StoreU(hn::Zero(d), d, g + c);
  for (int64_t k = k_begin; k < k_end; ++k) {
    const uint64_t p = j.Position(k);
    const float* src = j.grad + j.grad_offset[p];
    const float coef_k = j.coef[p];
    if (j.grad_col_stride != 1) {
      for (int64_t c = 0; c < j.dim; ++c) g[c] += coef_k * src[c * j.grad_col_stride];
      continue;
    }
    const VF coef = hn::Set(d, coef_k);
    int64_t c = 0;
    for (; c + n <= j.dim; c += n) {
      hn::StoreU(hn::MulAdd(coef, hn::LoadU(d, src + c), hn::LoadU(d, g + c)), d, g + c);
    }
    if (c < j.dim) {
      const VF tail = LoadRowTail<WeightType::kFloat32>(d, src + c, static_cast<size_t>(j.dim - c));
      hn::StoreU(hn::MulAdd(coef, tail, hn::LoadU(d, g + c)), d, g + c);
    }
  }
}

// Calls op(w, s0, s1, g) for each vector of a row: w points at Lanes(d)
// weights, s0 / s1 at Lanes(d) state values (or NULL), g at the gradient.
// The last partial vector runs on zero-padded copies (weights and state
// written back after when kWrites). Padded lanes see w = 0, g = 0, state = 0.
template <WeightType W, bool kWrites, class Op>
HWY_INLINE void ForEachVector(DF d, int64_t dim, Elem<W>* w, float* s0, float* s1,
                              const float* g, Op&& op) {
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  int64_t c = 0;
  for (; c + n <= dim; c += n) {
    op(w + c, s0 ? s0 + c : nullptr, s1 ? s1 + c : nullptr, g + c);
  }
  if (c == dim) return;
  const size_t count = static_cast<size_t>(dim - c);
  HWY_ALIGN Elem<W> wb[kMaxLanes] = {};
  HWY_ALIGN float b0[kMaxLanes] = {};
  HWY_ALIGN float b1[kMaxLanes] = {};
  HWY_ALIGN float gb[kMaxLanes] = {};
  std::memcpy(gb, g + c, count * sizeof(float));
  std::memcpy(wb, w + c, count * sizeof(Elem<W>));
  if (s0) std::memcpy(b0, s0 + c, count * sizeof(float));
  if (s1) std::memcpy(b1, s1 + c, count * sizeof(float));
  op(wb, s0 ? b0 : nullptr, s1 ? b1 : nullptr, gb);
  if constexpr (kWrites) {
    std::memcpy(w + c, wb, count * sizeof(Elem<W>));
    if (s0) std::memcpy(s0 + c, b0, count * sizeof(float));
    if (s1) std::memcpy(s1 + c, b1, count * sizeof(float));
  }
}

// A row's gradient: scale * g[0:dim) (scale is the coefficient of a row's
// only occurrence, read straight from grad_output; 1 for a summed buffer).
struct RowGrad {
  const float* g;
  float scale;
};

// g' = scale * g + weight_decay * w (the decay skipped when it is 0, so an
// inf weight does not turn into NaN through 0 * inf).
HWY_INLINE VF Decayed(DF d, const OptimizerStep& p, VF w, VF scale, const float* gp) {
  const VF g = hn::Mul(scale, hn::LoadU(d, gp));
  return p.weight_decay != 0.0f ? hn::MulAdd(hn::Set(d, p.weight_decay), w, g) : g;
}

template <WeightType W, int32_t kOptimizer>
HWY_INLINE void ApplyOptimizer(DF d, const SegmentJob& j, Elem<W>* w, float* state,
                               RowGrad grad) {
  const OptimizerStep& p = j.step;
  const VF lr = hn::Set(d, p.learning_rate);
  const VF scale = hn::Set(d, grad.scale);
  const float* g = grad.g;
  if constexpr (kOptimizer == SR_OPTIMIZER_SGD) {
    ForEachVector<W, true>(d, j.dim, w, nullptr, nullptr, g,
                           [&](Elem<W>* wp, float*, float*, const float* gp) {
                             const VF wv = LoadRow<W>(d, wp);
                             StoreRow<W>(d, hn::NegMulAdd(lr, Decayed(d, p, wv, scale, gp), wv),
                                         wp);
                           });
  } else if constexpr (kOptimizer == SR_OPTIMIZER_ADAGRAD) {
    const VF eps = hn::Set(d, p.eps);
    ForEachVector<W, true>(d, j.dim, w, state, nullptr, g,
                           [&](Elem<W>* wp, float* sp, float*, const float* gp) {
                             const VF wv = LoadRow<W>(d, wp);
                             const VF gv = Decayed(d, p, wv, scale, gp);
                             const VF sv = hn::MulAdd(gv, gv, hn::LoadU(d, sp));
                             hn::StoreU(sv, d, sp);
                             const VF step = hn::Div(gv, hn::Add(hn::Sqrt(sv), eps));
                             StoreRow<W>(d, hn::NegMulAdd(lr, step, wv), wp);
                           });
  } else if constexpr (kOptimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD) {
    VF squares = hn::Zero(d);
    ForEachVector<W, false>(d, j.dim, w, nullptr, nullptr, g,
                            [&](Elem<W>* wp, float*, float*, const float* gp) {
                              const VF gv = Decayed(d, p, LoadRow<W>(d, wp), scale, gp);
                              squares = hn::MulAdd(gv, gv, squares);
                            });
    const float mean = hn::GetLane(hn::SumOfLanes(d, squares)) / static_cast<float>(j.dim);
    const float sum = state[0] + mean;
    state[0] = sum;
    const VF multiplier = hn::Set(d, p.learning_rate / (std::sqrt(sum) + p.eps));
    ForEachVector<W, true>(d, j.dim, w, nullptr, nullptr, g,
                           [&](Elem<W>* wp, float*, float*, const float* gp) {
                             const VF wv = LoadRow<W>(d, wp);
                             StoreRow<W>(
                                 d, hn::NegMulAdd(multiplier, Decayed(d, p, wv, scale, gp), wv),
                                 wp);
                           });
  } else {
    static_assert(kOptimizer == SR_OPTIMIZER_ADAM);
    const VF eps = hn::Set(d, p.eps);
    const VF b1 = hn::Set(d, p.beta1);
    const VF b2 = hn::Set(d, p.beta2);
    const VF one_minus_b1 = hn::Set(d, p.one_minus_beta1);
    const VF one_minus_b2 = hn::Set(d, p.one_minus_beta2);
    const VF bc1 = hn::Set(d, p.bias_correction1);
    const VF bc2 = hn::Set(d, p.bias_correction2);
    ForEachVector<W, true>(
        d, j.dim, w, state, state + j.dim, g,
        [&](Elem<W>* wp, float* mp, float* vp, const float* gp) {
          const VF wv = LoadRow<W>(d, wp);
          const VF gv = Decayed(d, p, wv, scale, gp);
          const VF m = hn::MulAdd(one_minus_b1, gv, hn::Mul(b1, hn::LoadU(d, mp)));
          const VF v = hn::MulAdd(one_minus_b2, hn::Mul(gv, gv), hn::Mul(b2, hn::LoadU(d, vp)));
          hn::StoreU(m, d, mp);
          hn::StoreU(v, d, vp);
          const VF denom = hn::Add(hn::Sqrt(hn::Div(v, bc2)), eps);
          StoreRow<W>(d, hn::NegMulAdd(lr, hn::Div(hn::Div(m, bc1), denom), wv), wp);
        });
  }
}

template <WeightType W, int32_t kOptimizer>
void Update(const SegmentJob& j, int64_t k_begin, int64_t k_end, float* g) {
  const DF d;
  Elem<W>* table = static_cast<Elem<W>*>(j.table);
  const size_t row_lines = RowLines(static_cast<size_t>(j.dim) * sizeof(Elem<W>));
  const size_t state_lines =
      j.state_dim > 0 ? RowLines(static_cast<size_t>(j.state_dim) * sizeof(float)) : 0;
  const size_t grad_lines =
      j.grad_col_stride == 1 ? RowLines(static_cast<size_t>(j.dim) * sizeof(float)) : 0;
  int64_t k = k_begin;
  while (k < k_end) {
    const uint64_t r = j.Row(k);
    int64_t next = k + 1;
    while (next < k_end && j.Row(next) == r) ++next;
    if (j.prefetch > 0) {
      // The weights, state and gradient row an occurrence further on needs.
      const int64_t ahead = std::min(k + j.prefetch, k_end - 1);
      const uint64_t row = j.Row(ahead);
      PrefetchLines(table + row * j.dim, row_lines);
      if (state_lines > 0) PrefetchLines(j.state + row * j.state_dim, state_lines);
      if (grad_lines > 0) PrefetchLines(j.grad + j.grad_offset[j.Position(ahead)], grad_lines);
    }
    RowGrad grad{g, 1.0f};
    if (next - k == 1 && j.grad_col_stride == 1) {
      // Most rows occur once: read their gradient in place, scaled.
      const uint64_t p = j.Position(k);
      grad = RowGrad{j.grad + j.grad_offset[p], j.coef[p]};
    } else {
      AccumulateGrad(d, j, k, next, g);
    }
    float* state = j.state_dim > 0 ? j.state + r * j.state_dim : nullptr;
    ApplyOptimizer<W, kOptimizer>(d, j, table + r * j.dim, state, grad);
    k = next;
  }
}

template <WeightType W>
void UpdateTyped(const SegmentJob& j, int64_t k_begin, int64_t k_end, float* g) {
  switch (j.step.optimizer) {
    case SR_OPTIMIZER_SGD: Update<W, SR_OPTIMIZER_SGD>(j, k_begin, k_end, g); break;
    case SR_OPTIMIZER_ADAGRAD: Update<W, SR_OPTIMIZER_ADAGRAD>(j, k_begin, k_end, g); break;
    case SR_OPTIMIZER_ROWWISE_ADAGRAD:
      Update<W, SR_OPTIMIZER_ROWWISE_ADAGRAD>(j, k_begin, k_end, g);
      break;
    case SR_OPTIMIZER_ADAM: Update<W, SR_OPTIMIZER_ADAM>(j, k_begin, k_end, g); break;
    default: break;
  }
}

}  // namespace

void UpdateRowsImpl(const SegmentJob& j, int64_t k_begin, int64_t k_end, float* g) {
  switch (j.type) {
    case WeightType::kFloat32: UpdateTyped<WeightType::kFloat32>(j, k_begin, k_end, g); break;
    case WeightType::kFloat16: UpdateTyped<WeightType::kFloat16>(j, k_begin, k_end, g); break;
    case WeightType::kBFloat16: UpdateTyped<WeightType::kBFloat16>(j, k_begin, k_end, g); break;
    case WeightType::kRowQuantized: break;  // inference only: the optimizer is none, backward refused
  }
}

}  // namespace shardrec::kernel_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrec::kernel_cpu {

HWY_EXPORT(UpdateRowsImpl);

void UpdateRows(const SegmentJob& job, int64_t k_begin, int64_t k_end, float* g) {
  HWY_DYNAMIC_DISPATCH(UpdateRowsImpl)(job, k_begin, k_end, g);
}

}  // namespace shardrec::kernel_cpu
#endif  // HWY_ONCE
