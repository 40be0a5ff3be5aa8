/* The load-to-use latency of this machine's caches and memory: a pointer
 * chase over arrays of 1 MiB to 256 MiB, one 64-byte line per element, the
 * lines visited in one random cycle (Sattolo's shuffle), so every load
 * waits for the one before and no prefetcher can guess the next. Arrays
 * sit in 2 MiB pages where the kernel grants them (madvise), as managed
 * collision's index and slots do, so the figures are not TLB misses.
 *
 * Where the latency jumps, a working set left a cache level. bench mc's
 * probe measures the other limit, throughput with many loads in flight.
 * docs/benchmarks.md reads the two together.
 *
 *   cc -O2 -o /tmp/memory_latency scripts/memory_latency.c && /tmp/memory_latency
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

enum { kLine = 64, kHugePage = 2 << 20 };

static uint64_t SplitMix64(uint64_t* state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double Seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(void) {
  printf("array      ns a load\n");
  for (size_t mib = 1; mib <= 256; mib *= 2) {
    const size_t bytes = mib << 20, lines = bytes / kLine, words = kLine / sizeof(uint64_t);
    uint64_t* a = NULL;
    size_t* next = malloc(lines * sizeof(size_t));
    if (posix_memalign((void**)&a, kHugePage, bytes) != 0 || next == NULL) {
      fprintf(stderr, "memory_latency: cannot allocate %zu MiB\n", mib);
      return 1;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(a, bytes, MADV_HUGEPAGE);
#endif
    /* Sattolo: a random permutation that is a single cycle through every line. */
    uint64_t seed = 42;
    for (size_t i = 0; i < lines; ++i) next[i] = i;
    for (size_t i = lines - 1; i > 0; --i) {
      const size_t j = (size_t)(SplitMix64(&seed) % i);
      const size_t t = next[i];
      next[i] = next[j];
      next[j] = t;
    }
    for (size_t i = 0; i < lines; ++i) a[i * words] = next[i] * words;
    free(next);
    size_t p = 0;
    for (size_t i = 0; i < lines; ++i) p = a[p]; /* one lap to warm the caches and the TLB */
    const size_t loads = 4000000;
    const double start = Seconds();
    for (size_t i = 0; i < loads; ++i) p = a[p];
    const double ns = (Seconds() - start) * 1e9 / (double)loads;
    printf("%4zu MiB  %8.1f%s\n", mib, ns, p == (size_t)-1 ? " " : ""); /* p used: the chase is kept */
    free(a);
  }
  return 0;
}
