// Forward over row-wise quantized tables (INT8, INT4, INT2; ABI 1.4,
// plugin_api/include/shardrec/sdk/quantized_rows.hpp), compiled once per
// SIMD target (Highway foreach_target) and chosen at run time. Inference
// only: there is no backward.
//
// Each value dequantizes as it is read, in float32, exactly as the SDK's
// scalar sdk::Dequantize does: v = scale * q + bias. Pooled, per bag:
//   for col0 in steps of 8 vectors (then 1, then a padded tail):
//     acc[0:8] = 0                                    // registers
//     for i in ids(bag): r = indices[i] (skipped when invalid and checked)
//       v = fma(scale_r, float(q[r, col0 ...]), bias_r)
//       acc = weighted ? fma(w_i, v, acc) : acc + v
//     out[bag, col0 ...] = mean ? acc / max(len, 1) : acc
// The rows are a quarter (INT8) to a sixteenth (INT2) of float32's bytes, so
// a lookup bound by memory moves that much less; INT4 and INT2 values are
// unpacked to bytes per vector first.
#include <algorithm>
#include <bit>
#include <cstdint>

#include "forward.h"
#include "shardrec/sdk/quantized_rows.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/forward_quantized_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"
#include "simd_row-inl.h"

HWY_BEFORE_NAMESPACE();
namespace shardrec::kernel_cpu::HWY_NAMESPACE {
namespace {

using sdk::RowQuantization;

// The in-register unpacking reads wider lanes back as bytes in element order.
static_assert(std::endian::native == std::endian::little, "the INT4/INT2 unpacking assumes little-endian lanes");

// Quantized values [col, col + count) of a row's packed data, widened to
// float32 (lanes past count are zero). count <= Lanes(d). A full vector is
// unpacked in registers: INT8 widens its bytes; INT4 widens each byte to 16
// bits and moves the high nibble into the high byte, INT2 widens to 32 bits
// and spreads the four 2-bit fields over the four bytes, so that reading the
// lanes back as bytes gives the values in element order (little-endian).
template <RowQuantization Q>
HWY_INLINE VF LoadQuantized(DF d, const uint8_t* data, int64_t col, size_t count) {
  const hn::Rebind<uint8_t, DF> du8;
  const hn::Rebind<int32_t, DF> di32;
  const size_t n = hn::Lanes(d);
  if (count == n && n % 4 == 0) {
    if constexpr (Q == RowQuantization::kInt8) {
      return hn::ConvertTo(d, hn::PromoteTo(di32, hn::LoadU(du8, data + col)));
    } else if constexpr (Q == RowQuantization::kInt4) {
      const hn::Repartition<uint16_t, decltype(du8)> du16;
      const hn::Rebind<uint8_t, decltype(du16)> dbytes;
      const auto w = hn::PromoteTo(du16, hn::LoadU(dbytes, data + col / 2));
      const auto spread = hn::Or(hn::And(w, hn::Set(du16, 0x0F)), hn::ShiftLeft<4>(hn::And(w, hn::Set(du16, 0xF0))));
      return hn::ConvertTo(d, hn::PromoteTo(di32, hn::BitCast(du8, spread)));
    } else {
      const hn::Repartition<uint32_t, decltype(du8)> du32;
      const hn::Rebind<uint8_t, decltype(du32)> dbytes;
      const auto w = hn::PromoteTo(du32, hn::LoadU(dbytes, data + col / 4));
      const auto spread = hn::Or(hn::Or(hn::And(w, hn::Set(du32, 0x03u)), hn::ShiftLeft<6>(hn::And(w, hn::Set(du32, 0x0Cu)))),
                                 hn::Or(hn::ShiftLeft<12>(hn::And(w, hn::Set(du32, 0x30u))),
                                        hn::ShiftLeft<18>(hn::And(w, hn::Set(du32, 0xC0u)))));
      return hn::ConvertTo(d, hn::PromoteTo(di32, hn::BitCast(du8, spread)));
    }
  }
  HWY_ALIGN uint8_t buf[kMaxLanes] = {};
  for (size_t k = 0; k < count; ++k) {
    const int64_t i = col + static_cast<int64_t>(k);
    if constexpr (Q == RowQuantization::kInt8) {
      buf[k] = data[i];
    } else if constexpr (Q == RowQuantization::kInt4) {
      buf[k] = static_cast<uint8_t>((data[i >> 1] >> ((i & 1) * 4)) & 0xF);
    } else {
      buf[k] = static_cast<uint8_t>((data[i >> 2] >> ((i & 3) * 2)) & 0x3);
    }
  }
  return hn::ConvertTo(d, hn::PromoteTo(di32, hn::Load(du8, buf)));
}

// A row's scale and bias (fp16) as floats: F16C where the target has it,
// the SDK's exact scalar conversion elsewhere.
HWY_INLINE void ScaleBias(const uint8_t* row, float* scale, float* bias) {
  if constexpr (kHardwareF16) {
    const hn::CappedTag<float, 2> d2;
    const hn::Rebind<hwy::float16_t, decltype(d2)> dh2;
    const auto sb = hn::PromoteTo(d2, hn::LoadU(dh2, reinterpret_cast<const hwy::float16_t*>(row)));
    *scale = hn::GetLane(sb);
    *bias = hn::GetLane(hn::Reverse(d2, sb));
  } else {
    *scale = sdk::QuantScale(row);
    *bias = sdk::QuantBias(row);
  }
}

template <RowQuantization Q, bool kWeighted, bool kChecked>
struct QuantPool {
  // The bag's ids over columns [col, col + kV * Lanes) (full vectors) or,
  // with kV == 1 and count < Lanes, the last `count` columns.
  template <size_t kV>
  static HWY_INLINE void Columns(DF d, const ForwardJob& j, const uint8_t* table, int64_t col,
                                 size_t count, int64_t begin, int64_t end, VF divisor,
                                 float* out_row, int64_t last, size_t prefetch_lines) {
    const size_t n = hn::Lanes(d);
    VF acc[kV];
    HWY_UNROLL(8)
    for (size_t v = 0; v < kV; ++v) acc[v] = hn::Zero(d);
    for (int64_t i = begin; i < end; ++i) {
      if (prefetch_lines) {
        // Ahead across bags (clamped to the range's last id), as the float
        // kernel does: a bag's first ids were prefetched by the bag before.
        const int64_t ahead = j.indices[std::min(i + j.prefetch, last)];
        if (static_cast<uint64_t>(ahead) < j.num_rows) PrefetchLines(table + ahead * j.row_bytes, prefetch_lines);
      }
      const int64_t r = j.indices[i];
      if (kChecked && static_cast<uint64_t>(r) >= j.num_rows) continue;
      const uint8_t* row = table + r * j.row_bytes;
      float s, b;
      ScaleBias(row, &s, &b);
      const VF scale = hn::Set(d, s);
      const VF bias = hn::Set(d, b);
      const uint8_t* data = row + sdk::kQuantScaleBiasBytes;
      HWY_UNROLL(8)
      for (size_t v = 0; v < kV; ++v) {
        const VF value = hn::MulAdd(scale, LoadQuantized<Q>(d, data, col + static_cast<int64_t>(v * n), count), bias);
        if constexpr (kWeighted) {
          acc[v] = hn::MulAdd(hn::Set(d, j.weights[i]), value, acc[v]);
        } else {
          acc[v] = hn::Add(acc[v], value);
        }
      }
    }
    const bool mean = j.pooling == SR_POOLING_MEAN;
    HWY_UNROLL(8)
    for (size_t v = 0; v < kV; ++v) {
      const int64_t c = col + static_cast<int64_t>(v * n);
      StoreOutput(d, mean ? hn::Div(acc[v], divisor) : acc[v], out_row + c * j.out_col_stride, j.out_col_stride,
                  count);
    }
  }

  static void Bags(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
    const DF d;
    const int64_t n = static_cast<int64_t>(hn::Lanes(d));
    const auto* table = static_cast<const uint8_t*>(j.table);
    const size_t lines = j.prefetch > 0 ? RowLines(static_cast<size_t>(j.row_bytes)) : 0;
    const size_t full = static_cast<size_t>(n);
    const int64_t last = j.offsets[bag_end] - 1;  // last id of the range
    for (int64_t b = bag_begin; b < bag_end; ++b) {
      const int64_t begin = j.offsets[b];
      const int64_t end = j.offsets[b + 1];
      const VF divisor = hn::Set(d, static_cast<float>(std::max<int64_t>(end - begin, 1)));
      float* out_row = j.out + (b - j.bag_first) * j.out_row_stride;
      size_t prefetch = lines;  // only the first column block prefetches (whole rows)
      int64_t col = 0;
      for (; col + 8 * n <= j.dim; col += 8 * n, prefetch = 0) {
        Columns<8>(d, j, table, col, full, begin, end, divisor, out_row, last, prefetch);
      }
      for (; col + n <= j.dim; col += n, prefetch = 0) {
        Columns<1>(d, j, table, col, full, begin, end, divisor, out_row, last, prefetch);
      }
      if (col < j.dim) {
        Columns<1>(d, j, table, col, static_cast<size_t>(j.dim - col), begin, end, divisor, out_row, last, prefetch);
      }
    }
  }
};

template <RowQuantization Q>
void PoolBags(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
  if (j.weights != nullptr) {
    if (j.skip_invalid) {
      QuantPool<Q, true, true>::Bags(j, bag_begin, bag_end);
    } else {
      QuantPool<Q, true, false>::Bags(j, bag_begin, bag_end);
    }
  } else if (j.skip_invalid) {
    QuantPool<Q, false, true>::Bags(j, bag_begin, bag_end);
  } else {
    QuantPool<Q, false, false>::Bags(j, bag_begin, bag_end);
  }
}

// NONE pooling: every id of the bags gets its own dequantized output row.
template <RowQuantization Q>
void CopyRows(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
  const DF d;
  const int64_t n = static_cast<int64_t>(hn::Lanes(d));
  const auto* table = static_cast<const uint8_t*>(j.table);
  for (int64_t i = j.offsets[bag_begin]; i < j.offsets[bag_end]; ++i) {
    const int64_t r = j.indices[i];
    const bool valid = !(j.skip_invalid && static_cast<uint64_t>(r) >= j.num_rows);
    float* out_row = j.out + (i - j.id_first) * j.out_row_stride;
    const uint8_t* row = valid ? table + r * j.row_bytes : nullptr;
    const VF scale = hn::Set(d, valid ? sdk::QuantScale(row) : 0.0f);
    const VF bias = hn::Set(d, valid ? sdk::QuantBias(row) : 0.0f);
    for (int64_t col = 0; col < j.dim; col += n) {
      const size_t count = static_cast<size_t>(std::min(n, j.dim - col));
      const VF v = valid ? hn::MulAdd(scale, LoadQuantized<Q>(d, row + sdk::kQuantScaleBiasBytes, col, count), bias)
                         : hn::Zero(d);
      StoreOutput(d, v, out_row + col * j.out_col_stride, j.out_col_stride, count);
    }
  }
}

template <RowQuantization Q>
void Run(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
  if (j.pooling == SR_POOLING_NONE) {
    CopyRows<Q>(j, bag_begin, bag_end);
  } else {
    PoolBags<Q>(j, bag_begin, bag_end);
  }
}

}  // namespace

void ForwardQuantizedBagsImpl(const ForwardJob& j, int64_t bag_begin, int64_t bag_end) {
  switch (j.quantization) {
    case RowQuantization::kInt8: Run<RowQuantization::kInt8>(j, bag_begin, bag_end); break;
    case RowQuantization::kInt4: Run<RowQuantization::kInt4>(j, bag_begin, bag_end); break;
    case RowQuantization::kInt2: Run<RowQuantization::kInt2>(j, bag_begin, bag_end); break;
    case RowQuantization::kNone: break;  // not a quantized table: ForwardBags does not come here
  }
}

}  // namespace shardrec::kernel_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrec::kernel_cpu {

HWY_EXPORT(ForwardQuantizedBagsImpl);

void ForwardQuantizedBags(const ForwardJob& job, int64_t bag_begin, int64_t bag_end) {
  HWY_DYNAMIC_DISPATCH(ForwardQuantizedBagsImpl)(job, bag_begin, bag_end);
}

}  // namespace shardrec::kernel_cpu
#endif  // HWY_ONCE
