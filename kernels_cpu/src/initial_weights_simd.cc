// InitialRowWeights (initial_weights.h), compiled once per SIMD target.
// Each lane runs the SDK's hash and arithmetic on one column: SplitMix64 on
// (row key + column), the top 53 bits as a double in [0, 1), lo + (hi -
// lo) * unit in double, rounded to float. The multiply and the add must
// stay two roundings, as in the SDK's scalar code, so this file is built
// with -ffp-contract=off (GCC would otherwise fuse even intrinsics).
// Highway 1.0 multiplies 64-bit lanes only on AVX-512 (AVX3); the other
// targets run the SDK's scalar loop.
#include <cstdint>

#include "initial_weights.h"
#include "shardrec/sdk/init.hpp"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "src/initial_weights_simd.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
// Must come after foreach_target.h.
#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace shardrec::kernel_cpu::HWY_NAMESPACE {

namespace hn = hwy::HWY_NAMESPACE;

void InitialRowWeightsImpl(uint64_t seed, int64_t global_row, int64_t first_col, int64_t n, double lo, double hi,
                           float* out) {
  const uint64_t row_key = sdk::InitialRowKey(seed, global_row);
  int64_t c = 0;
#if HWY_TARGET <= HWY_AVX3
  const hn::ScalableTag<uint64_t> du;
  const hn::RebindToSigned<decltype(du)> di;
  const hn::Rebind<double, decltype(du)> dd;
  const hn::Rebind<float, decltype(du)> df;
  const auto lanes = static_cast<int64_t>(hn::Lanes(du));
  const auto column = hn::Iota(du, 0);
  const auto key = hn::Set(du, row_key);
  const auto golden = hn::Set(du, 0x9E3779B97F4A7C15ull);
  const auto m1 = hn::Set(du, 0xBF58476D1CE4E5B9ull), m2 = hn::Set(du, 0x94D049BB133111EBull);
  const auto vlo = hn::Set(dd, lo), span = hn::Set(dd, hi - lo), scale = hn::Set(dd, 0x1.0p-53);
  for (; c + lanes <= n; c += lanes) {
    auto x = hn::Add(key, hn::Add(column, hn::Set(du, static_cast<uint64_t>(first_col + c))));
    x = hn::Add(x, golden);  // sdk::Mix64, lane by lane
    x = hn::Mul(hn::Xor(x, hn::ShiftRight<30>(x)), m1);
    x = hn::Mul(hn::Xor(x, hn::ShiftRight<27>(x)), m2);
    x = hn::Xor(x, hn::ShiftRight<31>(x));
    // h >> 11 < 2^53: exact as a signed integer and as a double.
    const auto unit = hn::Mul(hn::ConvertTo(dd, hn::BitCast(di, hn::ShiftRight<11>(x))), scale);
    hn::StoreU(hn::DemoteTo(df, hn::Add(vlo, hn::Mul(span, unit))), df, out + c);
  }
#endif
  for (; c < n; ++c) out[c] = sdk::InitialWeightFromRowKey(row_key, first_col + c, lo, hi);
}

}  // namespace shardrec::kernel_cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace shardrec::kernel_cpu {

HWY_EXPORT(InitialRowWeightsImpl);

void InitialRowWeights(uint64_t seed, int64_t global_row, int64_t first_col, int64_t n, double lo, double hi,
                       float* out) {
  HWY_DYNAMIC_DISPATCH(InitialRowWeightsImpl)(seed, global_row, first_col, n, lo, hi, out);
}

}  // namespace shardrec::kernel_cpu
#endif  // HWY_ONCE
