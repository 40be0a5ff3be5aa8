// Backward orchestration (backward.h): per table, emit its valid
// occurrences as (row, position) in occurrence order, radix-sort them by
// row (stable), and update the rows in a parallel loop over ranges of the
// sorted occurrences cut at row boundaries. Emission, sort and update each
// run as parallel tasks when the call is big enough; the order of every sum
// is fixed by positions, never by scheduling.
//
//   for t in tables used by the call:
//     chunks = the bags of t's features, cut every ~8k ids
//     per chunk (parallel): count valid ids -> prefix sums -> bases
//     per chunk (parallel): for i in its ids, if valid:
//         items[base++] = (indices[i] << position_bits) | i
//         grad_offset[i] = element offset of i's grad_output row (its bag's,
//                          or its own with NONE) + column of the feature
//         coef[i] = (weights ? weights[i] : 1) / (mean ? max(len, 1) : 1)  (NONE: 1)
//     stable_radix_sort(items by row)          (chunked, parallel)
//     parallel_for over row-aligned ranges of items: UpdateRows
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>

#include "backward.h"

namespace shardrec::kernel_cpu {
namespace {

// Below this many occurrences a table runs on the calling thread.
constexpr int64_t kSerialOccurrences = 4096;
// Ids per emission task, and occurrences per update task at least.
constexpr int64_t kEmitIds = 8192;
constexpr int64_t kItemsPerTask = 256;

bool Valid(const Lookup& lookup, uint64_t rows, int64_t i) {
  return !lookup.skip_invalid || static_cast<uint64_t>(lookup.indices[i]) < rows;
}

// Fills grad_offset / coef for the valid positions of bags [b0, b1) of
// feature w and hands each (row, position) to emit, in position order.
template <class Emit>
void EmitBags(const FeatureWork& w, const Table& t, const Lookup& lookup, int64_t b0, int64_t b1,
              int64_t grad_row_stride, int64_t grad_col_stride, BackwardScratch& s, Emit&& emit) {
  const uint64_t rows = static_cast<uint64_t>(t.num_rows);
  const int64_t col_offset = w.out_col * grad_col_stride;
  for (int64_t b = b0; b < b1; ++b) {
    const int64_t begin = lookup.offsets[b];
    const int64_t end = lookup.offsets[b + 1];
    const float divisor =
        w.pooling == SR_POOLING_MEAN ? static_cast<float>(std::max<int64_t>(end - begin, 1)) : 1.0f;
    const int64_t bag_offset = (w.out_row + (b - w.bag_begin)) * grad_row_stride + col_offset;
    for (int64_t i = begin; i < end; ++i) {
      if (!Valid(lookup, rows, i)) continue;
      const size_t p = static_cast<size_t>(i);
      if (w.pooling == SR_POOLING_NONE) {
        s.grad_offset[p] = (w.out_row + (i - w.id_begin)) * grad_row_stride + col_offset;
        s.coef[p] = 1.0f;
      } else {
        s.grad_offset[p] = bag_offset;
        s.coef[p] = (lookup.weights != nullptr ? lookup.weights[i] : 1.0f) / divisor;
      }
      emit(static_cast<uint64_t>(lookup.indices[i]), static_cast<uint64_t>(i));
    }
  }
}

// Cuts the bags of table ti's features into chunks of about kEmitIds ids.
size_t MakeChunks(const Lookup& lookup, size_t ti, std::vector<EmitChunk>& chunks) {
  chunks.clear();
  size_t ids = 0;
  for (size_t f = 0; f < lookup.features.size(); ++f) {
    const FeatureWork& w = lookup.features[f];
    if (static_cast<size_t>(w.table) != ti || w.id_end == w.id_begin) continue;
    ids += static_cast<size_t>(w.id_end - w.id_begin);
    int64_t b0 = w.bag_begin;
    while (b0 < w.bag_end) {
      int64_t b1 = b0 + 1;
      while (b1 < w.bag_end && lookup.offsets[b1] - lookup.offsets[b0] < kEmitIds) ++b1;
      chunks.push_back(EmitChunk{f, b0, b1, 0, 0});
      b0 = b1;
    }
  }
  return ids;
}

// The first occurrence at or after k that starts a row.
int64_t AlignToRow(const SegmentJob& job, int64_t k) {
  if (k <= 0 || k >= job.count) return std::clamp<int64_t>(k, 0, job.count);
  while (k < job.count && job.Row(k) == job.Row(k - 1)) ++k;
  return k;
}

}  // namespace

void RunBackward(const std::vector<Table>& tables, const Lookup& lookup, const float* grad,
                 int64_t grad_row_stride, int64_t grad_col_stride, const OptimizerStep& step,
                 int64_t prefetch, oneapi::tbb::task_arena& arena, BackwardScratch& s) {
  const size_t nnz = static_cast<size_t>(lookup.nnz);
  if (nnz == 0) return;
  s.grad_offset.resize(nnz);
  s.coef.resize(nnz);
  const int position_bits = BitsFor(nnz);
  const size_t threads = static_cast<size_t>(std::max(1, arena.max_concurrency()));

  for (size_t ti = 0; ti < tables.size(); ++ti) {
    const Table& t = tables[ti];
    const size_t bound = MakeChunks(lookup, ti, s.chunks);
    if (bound == 0) continue;
    const bool parallel = threads > 1 && bound >= static_cast<size_t>(kSerialOccurrences);
    const ChunkRunner run = [&](size_t n, const std::function<void(size_t)>& fn) {
      if (!parallel || n < 2) return RunSerially(n, fn);
      arena.execute([&] {
        oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<size_t>(0, n, 1),
                                  [&](const oneapi::tbb::blocked_range<size_t>& r) {
                                    for (size_t c = r.begin(); c < r.end(); ++c) fn(c);
                                  });
      });
    };

    // Where each chunk's valid occurrences go.
    const uint64_t rows = static_cast<uint64_t>(t.num_rows);
    run(s.chunks.size(), [&](size_t c) {
      EmitChunk& ch = s.chunks[c];
      const int64_t i0 = lookup.offsets[ch.bag_begin];
      const int64_t i1 = lookup.offsets[ch.bag_end];
      if (!lookup.skip_invalid) {
        ch.count = static_cast<size_t>(i1 - i0);
        return;
      }
      size_t valid = 0;
      for (int64_t i = i0; i < i1; ++i) valid += Valid(lookup, rows, i);
      ch.count = valid;
    });
    size_t n = 0;
    for (EmitChunk& ch : s.chunks) {
      ch.base = n;
      n += ch.count;
    }
    if (n == 0) continue;  // every id of this table was invalid

    SegmentJob job;
    job.table = t.weights.data();
    job.type = t.type;
    job.dim = t.dim;
    job.state = static_cast<float*>(t.state.data());
    job.state_dim = t.state_dim;
    job.count = static_cast<int64_t>(n);
    job.grad_offset = s.grad_offset.data();
    job.coef = s.coef.data();
    job.grad = grad;
    job.grad_col_stride = grad_col_stride;
    job.step = step;
    job.prefetch = prefetch;
    const size_t sort_chunks = parallel ? threads : 1;
    const int row_bits = BitsFor(rows);
    // Emits every valid occurrence, chunk by chunk in parallel; `store(k,
    // row, position)` puts the k-th (call order) into the sort's input.
    auto emit_all = [&](auto store) {
      run(s.chunks.size(), [&](size_t c) {
        const EmitChunk& ch = s.chunks[c];
        size_t k = ch.base;
        EmitBags(lookup.features[ch.feature], t, lookup, ch.bag_begin, ch.bag_end, grad_row_stride,
                 grad_col_stride, s, [&](uint64_t row, uint64_t pos) { store(k++, row, pos); });
      });
    };
    if (row_bits + position_bits <= 64) {
      // Common case: one 64-bit word per occurrence, sorted on its high bits;
      // the low bits (positions) are already ascending, and the sort is stable.
      s.items.resize(n);
      s.items_tmp.resize(n);
      emit_all([&](size_t k, uint64_t row, uint64_t pos) { s.items[k] = (row << position_bits) | pos; });
      job.keys = RadixSortBits(s.items.data(), s.items_tmp.data(), n, position_bits, row_bits,
                               s.counts, sort_chunks, run);
      job.shift = position_bits;
      job.mask = (uint64_t{1} << position_bits) - 1;
    } else {
      s.pairs.resize(n);
      s.pairs_tmp.resize(n);
      emit_all([&](size_t k, uint64_t row, uint64_t pos) { s.pairs[k] = RowPosition{row, pos}; });
      const RowPosition* sorted = RadixSortByRow(s.pairs.data(), s.pairs_tmp.data(), n, row_bits,
                                                 s.counts, sort_chunks, run);
      s.sorted_rows.resize(n);
      s.sorted_positions.resize(n);
      for (size_t k = 0; k < n; ++k) {
        s.sorted_rows[k] = sorted[k].row;
        s.sorted_positions[k] = sorted[k].position;
      }
      job.keys = s.sorted_rows.data();
      job.positions = s.sorted_positions.data();
    }

    const size_t buffer = GradBufferSize(t.dim);
    auto update = [&](int64_t k0, int64_t k1) {
      std::vector<float>& g = s.grad_rows.local();
      if (g.size() < buffer) g.resize(buffer);
      UpdateRows(job, k0, k1, g.data());
    };
    if (!parallel) {
      update(0, job.count);
      continue;
    }
    arena.execute([&] {
      oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<int64_t>(0, job.count, kItemsPerTask),
                                [&](const oneapi::tbb::blocked_range<int64_t>& r) {
                                  const int64_t k0 = AlignToRow(job, r.begin());
                                  const int64_t k1 = AlignToRow(job, r.end());
                                  if (k0 < k1) update(k0, k1);
                                });
    });
  }
}

}  // namespace shardrec::kernel_cpu
