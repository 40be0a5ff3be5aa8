// Matrix products for the dense layers, on OpenBLAS (Debian's
// libopenblas-dev): measured against oneDNN's sgemm on the DLRM MLP shapes,
// it was 4-9% faster per forward + backward step on this 2-core machine
// (docs/dense.md, scripts/bench_gemm_libraries.sh).
#pragma once

#include <cstdint>

namespace shardrec::dense {

// Row-major C[m, n] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T;
// lda, ldb, ldc: row strides of A, B, C as stored.
void Sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// Threads OpenBLAS may use for one product (process-wide). Ranks run as
// threads share the cores, so the host sets cores / ranks.
void SetDenseMathThreads(int threads);

}  // namespace shardrec::dense
