// Random-row gather probe (see gather_probe.h).
#include "gather_probe.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace shardrec::bench {

namespace {
constexpr size_t kHugePage = size_t{2} << 20;
constexpr int64_t kPrefetchAhead = 8;  // ids; about 16-32 cache lines in flight for 128-512 B rows
}  // namespace

struct GatherProbe::Impl {
  int64_t rows, row_floats, batch;
  size_t table_bytes;
  float* table = nullptr;
  std::vector<float> out;
  tbb::task_arena arena;

  Impl(int64_t r, int64_t row_bytes, int64_t b, int threads)
      : rows(r), row_floats(std::max<int64_t>(row_bytes / 4, 1)), batch(b),
        table_bytes(static_cast<size_t>(r * std::max<int64_t>(row_bytes / 4, 1)) * 4),
        out(static_cast<size_t>(b * std::max<int64_t>(row_bytes / 4, 1))),
        arena(threads > 0 ? threads : tbb::task_arena::automatic) {
    const size_t rounded = (table_bytes + kHugePage - 1) / kHugePage * kHugePage;
    table = static_cast<float*>(std::aligned_alloc(kHugePage, rounded));
    if (table == nullptr) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(table, rounded, MADV_HUGEPAGE);
#endif
    const size_t n = table_bytes / 4;
    for (size_t i = 0; i < n; ++i) table[i] = static_cast<float>(i % 7) * 0.125f;
  }
  ~Impl() { std::free(table); }
};

GatherProbe::GatherProbe(int64_t rows, int64_t row_bytes, int64_t batch, int threads)
    : impl_(std::make_unique<Impl>(rows, row_bytes, batch, threads)) {}
GatherProbe::~GatherProbe() = default;

double GatherProbe::Run(const IdBatch& b) {
  Impl& m = *impl_;
  const int64_t d = m.row_floats;
  const int64_t* ids = b.ids.data();
  const int64_t nnz = static_cast<int64_t>(b.ids.size());
  const auto start = std::chrono::steady_clock::now();
  m.arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, static_cast<int64_t>(b.offsets.size()) - 1, 32),
                      [&](const tbb::blocked_range<int64_t>& range) {
                        for (int64_t bag = range.begin(); bag < range.end(); ++bag) {
                          float* __restrict acc = m.out.data() + bag * d;
                          std::memset(acc, 0, static_cast<size_t>(d) * sizeof(float));
                          for (int64_t i = b.offsets[static_cast<size_t>(bag)];
                               i < b.offsets[static_cast<size_t>(bag) + 1]; ++i) {
                            if (i + kPrefetchAhead < nnz) {
                              const char* next =
                                  reinterpret_cast<const char*>(m.table + ids[i + kPrefetchAhead] * d);
                              for (int64_t line = 0; line < d * 4; line += 64) __builtin_prefetch(next + line);
                            }
                            const float* __restrict row = m.table + ids[i] * d;
                            for (int64_t j = 0; j < d; ++j) acc[j] += row[j];
                          }
                        }
                      });
  });
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace shardrec::bench
