// The SDK's initial row weights (plugin_api/include/shardrec/sdk/init.hpp),
// vectorised where the CPU has 64-bit multiplies: bit for bit the values of
// sdk::InitialRowWeights, which a reset of evicted rows redraws by the
// million (managed collision).
#pragma once

#include <cstdint>

namespace shardrec::kernel_cpu {

void InitialRowWeights(uint64_t seed, int64_t global_row, int64_t first_col, int64_t n, double lo, double hi,
                       float* out);

}  // namespace shardrec::kernel_cpu
