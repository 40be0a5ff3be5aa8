// Per-target Highway helpers shared by the forward and backward kernels:
// load a vector of a stored row (float32, fp16 or bf16) as float32, store a
// float32 vector back with round-to-nearest-even, handle row tails shorter
// than a vector through small zero-padded buffers, and prefetch a row.
//
// Included once per target by foreach_target.h (hence no normal include
// guard, but Highway's per-target toggle).
#if defined(SHARDREC_KERNEL_CPU_SIMD_ROW_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SHARDREC_KERNEL_CPU_SIMD_ROW_INL_H_
#undef SHARDREC_KERNEL_CPU_SIMD_ROW_INL_H_
#else
#define SHARDREC_KERNEL_CPU_SIMD_ROW_INL_H_
#endif

#include <cstdint>
#include <cstring>

#include "hwy/cache_control.h"
#include "hwy/highway.h"
#include "row_convert.h"

HWY_BEFORE_NAMESPACE();
namespace shardrec::kernel_cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

// Lanes of the widest float vector of this target: sizes tail buffers.
inline constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);

// Exact fp16 <-> fp32 conversion in hardware (F16C on x86, RNE). Highway's
// software fallback on older targets truncates, so those use row_convert.h.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2 && !defined(HWY_DISABLE_F16C)
inline constexpr bool kHardwareF16 = true;
#else
inline constexpr bool kHardwareF16 = false;
#endif

// Storage element of each WeightType.
template <WeightType W> struct StorageOf;
template <> struct StorageOf<WeightType::kFloat32> { using T = float; };
template <> struct StorageOf<WeightType::kFloat16> { using T = uint16_t; };
template <> struct StorageOf<WeightType::kBFloat16> { using T = uint16_t; };

// Loads Lanes(d) elements of a row stored as W, widened to float32.
template <WeightType W>
HWY_INLINE VF LoadRow(DF d, const typename StorageOf<W>::T* p) {
  if constexpr (W == WeightType::kFloat32) {
    return hn::LoadU(d, p);
  } else if constexpr (W == WeightType::kBFloat16) {
    const hn::Rebind<hwy::bfloat16_t, DF> db;
    return hn::PromoteTo(d, hn::LoadU(db, reinterpret_cast<const hwy::bfloat16_t*>(p)));
  } else if constexpr (kHardwareF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {
    HWY_ALIGN float buf[kMaxLanes];
    for (size_t i = 0; i < hn::Lanes(d); ++i) buf[i] = HalfToFloat(p[i]);
    return hn::Load(d, buf);
  }
}

// Stores a float32 vector as Lanes(d) elements of W, rounding to nearest
// even (NaN stays NaN).
template <WeightType W>
HWY_INLINE void StoreRow(DF d, VF v, typename StorageOf<W>::T* p) {
  if constexpr (W == WeightType::kFloat32) {
    hn::StoreU(v, d, p);
  } else if constexpr (W == WeightType::kBFloat16) {
    // bits + 0x7FFF + lsb, then the upper half: RNE on the bit pattern.
    const hn::RebindToUnsigned<DF> du;
    const hn::RebindToSigned<DF> di;
    const hn::Rebind<uint16_t, DF> du16;
    const auto bits = hn::BitCast(du, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
    const auto rounded = hn::ShiftRight<16>(hn::Add(bits, hn::Add(hn::Set(du, 0x7FFFu), lsb)));
    const auto quiet = hn::ShiftRight<16>(hn::Or(bits, hn::Set(du, 0x00400000u)));
    const auto upper = hn::IfThenElse(hn::RebindMask(du, hn::IsNaN(v)), quiet, rounded);
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di, upper)), du16, p);
  } else if constexpr (kHardwareF16) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    hn::StoreU(hn::DemoteTo(dh, v), dh, reinterpret_cast<hwy::float16_t*>(p));
  } else {
    HWY_ALIGN float buf[kMaxLanes];
    hn::Store(v, d, buf);
    for (size_t i = 0; i < hn::Lanes(d); ++i) p[i] = FloatToHalf(buf[i]);
  }
}

// Loads the first `count` (< Lanes) elements of a row, zero-padded.
template <WeightType W>
HWY_INLINE VF LoadRowTail(DF d, const typename StorageOf<W>::T* p, size_t count) {
  using T = typename StorageOf<W>::T;
  HWY_ALIGN T buf[kMaxLanes] = {};
  std::memcpy(buf, p, count * sizeof(T));
  return LoadRow<W>(d, buf);
}

// Stores the first `count` (< Lanes) lanes of v into a row.
template <WeightType W>
HWY_INLINE void StoreRowTail(DF d, VF v, typename StorageOf<W>::T* p, size_t count) {
  using T = typename StorageOf<W>::T;
  HWY_ALIGN T buf[kMaxLanes];
  StoreRow<W>(d, v, buf);
  std::memcpy(p, buf, count * sizeof(T));
}

// Writes `count` (<= Lanes) lanes of v to a float32 output with element
// stride `stride`.
HWY_INLINE void StoreOutput(DF d, VF v, float* p, int64_t stride, size_t count) {
  if (stride == 1 && count == hn::Lanes(d)) {
    hn::StoreU(v, d, p);
    return;
  }
  // Zero-initialised only to quiet GCC's -Wmaybe-uninitialized, which cannot
  // see that Store fills the first Lanes(d) >= count floats.
  HWY_ALIGN float buf[kMaxLanes] = {};
  hn::Store(v, d, buf);
  for (size_t i = 0; i < count; ++i) p[static_cast<int64_t>(i) * stride] = buf[i];
}

// Cache lines a prefetch of one row must touch: rows whose size is a
// multiple of 64 bytes start on a line (tables are 64-byte aligned), others
// may straddle one more.
inline size_t RowLines(size_t row_bytes) {
  return (row_bytes + 63) / 64 + (row_bytes % 64 == 0 ? 0 : 1);
}

// Prefetches `lines` cache lines from the line holding p. Straight-line code
// (a fall-through switch) rather than a loop: in the gather loops every
// instruction spent here shrinks how many ids ahead the out-of-order window
// reaches, and with it the memory parallelism.
HWY_INLINE void PrefetchLines(const void* p, size_t lines) {
  const char* a = reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t{63});
  while (lines > 8) {
    hwy::Prefetch(a);
    a += 64;
    --lines;
  }
  switch (lines) {
    case 8: hwy::Prefetch(a + 7 * 64); [[fallthrough]];
    case 7: hwy::Prefetch(a + 6 * 64); [[fallthrough]];
    case 6: hwy::Prefetch(a + 5 * 64); [[fallthrough]];
    case 5: hwy::Prefetch(a + 4 * 64); [[fallthrough]];
    case 4: hwy::Prefetch(a + 3 * 64); [[fallthrough]];
    case 3: hwy::Prefetch(a + 2 * 64); [[fallthrough]];
    case 2: hwy::Prefetch(a + 1 * 64); [[fallthrough]];
    case 1: hwy::Prefetch(a); [[fallthrough]];
    default: break;
  }
}

}  // namespace shardrec::kernel_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
