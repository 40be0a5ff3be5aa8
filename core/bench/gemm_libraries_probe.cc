// The oneDNN-or-OpenBLAS measurement behind docs/dense.md: sgemm on every
// forward and backward product of TorchRec's DLRM MLPs, both libraries, best
// of 50. Not part of the build (oneDNN is not a dependency):
//   g++ -O2 core/bench/gemm_libraries_probe.cc -lopenblas -ldnnl -o probe
// Times sgemm on DLRM MLP shapes with OpenBLAS and oneDNN, same threads.
#include <cblas.h>
#include <dnnl.h>
#include <chrono>
#include <cstdio>
#include <vector>
#include <cstdlib>
#include <algorithm>

using Clock = std::chrono::steady_clock;
struct Shape { int m, n, k; bool ta, tb; const char* what; };

template <class F> double Best(F f, int reps) {
  double best = 1e9;
  for (int r = 0; r < reps; ++r) {
    auto t = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t).count());
  }
  return best;
}

int main(int argc, char** argv) {
  const int B = argc > 1 ? atoi(argv[1]) : 512;
  std::vector<std::pair<int,int>> layers = {{13,512},{512,256},{256,64},{415,512},{512,512},{512,256},{256,1}};
  double tot_blas = 0, tot_dnnl = 0;
  for (auto [in, out] : layers) {
    // forward Y[B,out] = X[B,in] W[out,in]^T ; dX[B,in] = dY[B,out] W[out,in]; dW[out,in] = dY^T[out,B] X[B,in]
    Shape shapes[] = {{B, out, in, false, true, "fwd"}, {B, in, out, false, false, "dX"}, {out, in, B, true, false, "dW"}};
    for (auto s : shapes) {
      std::vector<float> A((size_t)s.m * s.k, 0.5f), Bm((size_t)s.k * s.n, 0.25f), C((size_t)s.m * s.n);
      int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
      double tb = Best([&]{ cblas_sgemm(CblasRowMajor, s.ta ? CblasTrans : CblasNoTrans, s.tb ? CblasTrans : CblasNoTrans, s.m, s.n, s.k, 1.f, A.data(), lda, Bm.data(), ldb, 0.f, C.data(), s.n); }, 50);
      double td = Best([&]{ dnnl_sgemm(s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', s.m, s.n, s.k, 1.f, A.data(), lda, Bm.data(), ldb, 0.f, C.data(), s.n); }, 50);
      tot_blas += tb; tot_dnnl += td;
      std::printf("%4dx%-4d %-3s m=%5d n=%5d k=%5d  openblas %8.1f us  onednn %8.1f us  (onednn/openblas %.2f)\n", in, out, s.what, s.m, s.n, s.k, tb*1e6, td*1e6, td/tb);
    }
  }
  std::printf("batch %d, one MLP step (fwd+bwd, all layers): openblas %.3f ms, onednn %.3f ms\n", B, tot_blas*1e3, tot_dnnl*1e3);
}
