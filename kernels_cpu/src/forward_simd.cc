// Forward kernels, compiled once per SIMD target (Highway foreach_target)
// and chosen at run time: pooled sum/mean with optional per-id weights, and
// sequence (NONE) row copies, for float32, fp16 and bf16 tables.
//
// Pooled, per bag (FBGEMM-style):
//   for col0 in steps of 8 vectors (then 4, 2, 1, then a padded tail):
//     acc[0:8] = 0                                  // registers
//     for i in ids(bag):
//       prefetch row indices[i + prefetch_distance] (first column block only)
//       if skip_invalid and indices[i] out of range: continue
//       acc[v] = fma(w_i, float(W[indices[i], col0 + v*N ...]), acc[v])   // or + without weights
//     out[bag, col0 ...] = mean ? acc / max(len, 1) : acc
// A bag's rows stay in L1 between column blocks (20 rows of 512 B = 10 KiB),
// so only the first block pays the DRAM latency, which the prefetch hides.
#include <algorithm>
#include <cstdint>

#include "forward.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/forward_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "simd_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shardrec::kernel_cpu::HWY_NAMESPACE {
namespace {

template <WeightType W>
using Elem = typename StorageOf<W>::T;

// Prefetches the `lines` cache lines of the row that id position `ahead`
// will read, if it exists.
template <WeightType W>
HWY_INLINE void PrefetchId(const ForwardJob& j, const Elem<W>* table, int64_t ahead, int64_t end,
                           size_t lines) {
  if (ahead >= end) return;
  const int64_t r = j.indices[ahead];
  if (static_cast<uint64_t>(r) >= j.num_rows) return;
  PrefetchLines(table + r * j.dim, lines);
}

// The id loop of pooled bags, specialised on whether ids carry weights and
// whether invalid ids must be skipped: the fewer instructions per id, the
// further ahead the out-of-order window reaches (see PrefetchLines).
template <WeightType W, bool kWeighted, bool kChecked>
struct Pool {
  using T = Elem<W>;

  // Prefetch target for position i: clamped to the last id of the range
  // (re-prefetching it is harmless) instead of a branch.
  static HWY_INLINE void Prefetch(const ForwardJob& j, const T* table, int64_t i, int64_t last,
                                  size_t lines) {
    const int64_t r = j.indices[std::min(i + j.prefetch, last)];
    if (kChecked && static_cast<uint64_t>(r) >= j.num_rows) return;
    PrefetchLines(table + r * j.dim, lines);
  }

  // One bag, columns [col, col + kV * Lanes): accumulators in registers.
  template <size_t kV>
  static HWY_INLINE void Columns(DF d, const ForwardJob& j, const T* table, int64_t col,
                                 int64_t begin, int64_t end, VF divisor, float* out_row,
                                 int64_t last, size_t prefetch_lines) {
    const size_t n = hn::Lanes(d);
    // Fully unrolled so the accumulators live in registers, not on the stack.
    VF acc[kV];
    HWY_UNROLL(8)
    for (size_t v = 0; v < kV; ++v) acc[v] = hn::Zero(d);
    for (int64_t i = begin; i < end; ++i) {
      if (prefetch_lines) Prefetch(j, table, i, last, prefetch_lines);
      const int64_t r = j.indices[i];
      if (kChecked && static_cast<uint64_t>(r) >= j.num_rows) continue;
      const T* row = table + r * j.dim + col;
      if constexpr (kWeighted) {
        const VF w = hn::Set(d, j.weights[i]);
        HWY_UNROLL(8)
        for (size_t v = 0; v < kV; ++v) acc[v] = hn::MulAdd(w, LoadRow<W>(d, row + v * n), acc[v]);
      } else {
        HWY_UNROLL(8)
        for (size_t v = 0; v < kV; ++v) acc[v] = hn::Add(acc[v], LoadRow<W>(d, row + v * n));
      }
    }
    const bool mean = j.pooling == SR_POOLING_MEAN;
    HWY_UNROLL(8)
    for (size_t v = 0; v < kV; ++v) {
      const int64_t c = col + static_cast<int64_t>(v * n);
      StoreOutput(d, mean ? hn::Div(acc[v], divisor) : acc[v], out_row + c * j.out_col_stride,
                  j.out_col_stride, n);
    }
  }

  // One bag, the last `count` (< Lanes) columns starting at `col`.
  static HWY_INLINE void Tail(DF d, const ForwardJob& j, const T* table, int64_t col,
                              size_t count, int64_t begin, int64_t end, VF divisor,
                              float* out_row, int64_t last, size_t prefetch_lines) {
    VF acc = hn::Zero(d);
    for (int64_t i = begin; i < end; ++i) {
      if (prefetch_lines) Prefetch(j, table, i, last, prefetch_lines);
      const int64_t r = j.indices[i];
      if (kChecked && static_cast<uint64_t>(r) >= j.num_rows) continue;
      const VF w = hn::Set(d, kWeighted ? j.weights[i] : 1.0f);
      acc = hn::MulAdd(w, LoadRowTail<W>(d, table + r * j.dim + col, count), acc);
    }
    StoreOutput(d, j.pooling == SR_POOLING_MEAN ? hn::Div(acc, divisor) : acc,
                out_row + col * j.out_col_stride, j.out_col_stride, count);
  }

  static void Bags(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
    const DF d;
    const int64_t n = static_cast<int64_t>(hn::Lanes(d));
    const T* table = static_cast<const T*>(j.table);
    const int64_t last = j.offsets[bag_end] - 1;  // last id of the range
    const size_t lines = j.prefetch > 0 ? RowLines(static_cast<size_t>(j.dim) * sizeof(T)) : 0;
    for (int64_t b = bag_begin; b < bag_end; ++b) {
      const int64_t begin = j.offsets[b];
      const int64_t end = j.offsets[b + 1];
      const float len = static_cast<float>(std::max<int64_t>(end - begin, 1));
      const VF divisor = hn::Set(d, len);
      float* out_row = j.out + (b - j.bag_first) * j.out_row_stride;
      // Only the first column block prefetches (whole rows).
      size_t prefetch = lines;
      int64_t col = 0;
      for (; col + 8 * n <= j.dim; col += 8 * n, prefetch = 0) {
        Columns<8>(d, j, table, col, begin, end, divisor, out_row, last, prefetch);
      }
      if (col + 4 * n <= j.dim) {
        Columns<4>(d, j, table, col, begin, end, divisor, out_row, last, prefetch);
        col += 4 * n;
        prefetch = 0;
      }
      if (col + 2 * n <= j.dim) {
        Columns<2>(d, j, table, col, begin, end, divisor, out_row, last, prefetch);
        col += 2 * n;
        prefetch = 0;
      }
      if (col + n <= j.dim) {
        Columns<1>(d, j, table, col, begin, end, divisor, out_row, last, prefetch);
        col += n;
        prefetch = 0;
      }
      if (col < j.dim) {
        Tail(d, j, table, col, static_cast<size_t>(j.dim - col), begin, end, divisor, out_row,
             last, prefetch);
      }
    }
  }
};

template <WeightType W>
void PoolBags(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
  if (j.weights != nullptr) {
    if (j.skip_invalid) {
      Pool<W, true, true>::Bags(j, bag_begin, bag_end);
    } else {
      Pool<W, true, false>::Bags(j, bag_begin, bag_end);
    }
  } else if (j.skip_invalid) {
    Pool<W, false, true>::Bags(j, bag_begin, bag_end);
  } else {
    Pool<W, false, false>::Bags(j, bag_begin, bag_end);
  }
}

// NONE pooling: every id of the bags gets its own output row.
template <WeightType W>
void CopyRows(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
  const DF d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const Elem<W>* table = static_cast<const Elem<W>*>(j.table);
  const int64_t first = j.offsets[bag_begin];
  const int64_t last = j.offsets[bag_end];
  const size_t lines = RowLines(static_cast<size_t>(j.dim) * sizeof(Elem<W>));
  for (int64_t i = first; i < last; ++i) {
    if (j.prefetch > 0) PrefetchId<W>(j, table, i + j.prefetch, last, lines);
    const int64_t r = j.indices[i];
    const bool valid = !(j.skip_invalid && static_cast<uint64_t>(r) >= j.num_rows);
    const Elem<W>* row = valid ? table + r * j.dim : nullptr;
    float* out_row = j.out + (i - j.id_first) * j.out_row_stride;
    int64_t col = 0;
    for (; col + n <= j.dim; col += n) {
      const VF v = valid ? LoadRow<W>(d, row + col) : hn::Zero(d);
      StoreOutput(d, v, out_row + col * j.out_col_stride, j.out_col_stride,
                  static_cast<size_t>(n));
    }
    if (col < j.dim) {
      const size_t count = static_cast<size_t>(j.dim - col);
      const VF v = valid ? LoadRowTail<W>(d, row + col, count) : hn::Zero(d);
      StoreOutput(d, v, out_row + col * j.out_col_stride, j.out_col_stride, count);
    }
  }
}

template <WeightType W>
void Run(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
  if (j.pooling == SR_POOLING_NONE) {
    CopyRows<W>(j, bag_begin, bag_end);
  } else {
    PoolBags<W>(j, bag_begin, bag_end);
  }
}

}  // namespace

void ForwardBagsImpl(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
  switch (j.type) {
    case WeightType::kFloat32: Run<WeightType::kFloat32>(j, bag_begin, bag_end); break;
    case WeightType::kFloat16: Run<WeightType::kFloat16>(j, bag_begin, bag_end); break;
    case WeightType::kBFloat16: Run<WeightType::kBFloat16>(j, bag_begin, bag_end); break;
    case WeightType::kRowQuantized: break;  // ForwardBags sends these to ForwardQuantizedBags
  }
}

}  // namespace shardrec::kernel_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrec::kernel_cpu {

HWY_EXPORT(ForwardBagsImpl);

void ForwardBags(const ForwardJob& job, int64_t bag_begin, int64_t bag_end) {
  if (job.type == WeightType::kRowQuantized) return ForwardQuantizedBags(job, bag_begin, bag_end);
  HWY_DYNAMIC_DISPATCH(ForwardBagsImpl)(job, bag_begin, bag_end);
}

}  // namespace shardrec::kernel_cpu
#endif  // HWY_ONCE
