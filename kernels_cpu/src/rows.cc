// Row I/O of the CPU kernel: read_rows copies weights and optimizer state
// out, write_rows copies them in (duplicates: the last one wins), and
// reset_rows redraws weights from the SDK initializer and resets state.
// Every row index and tensor is checked before the first copy, so an error
// changes nothing.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <functional>
#include <cstring>
#include <string>
#include <vector>

#include "cpu_kernel.h"
#include "matrix_view.h"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::kernel_cpu {
namespace {

using sdk::InvalidArgument;

// Rows per reset task; resets of a few rows stay on the calling thread.
constexpr int64_t kResetRowsPerTask = 256;
// Rows per copy task of read_rows / write_rows: a row cache moves a few
// thousand scattered rows a step, each a cache miss or more, and spreads
// them over the threads; calls of fewer rows stay on the calling thread.
constexpr int64_t kCopyRowsPerTask = 512;

void CheckRowsArgs(const sr_kernel_rows_args& a, const char* call) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_rows_args, stream)) {
    throw InvalidArgument(std::string(call) + " args: struct_size " +
                          std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_rows_args v1.0");
  }
}

// The row indices of a call, checked against the table, contiguous.
std::vector<int64_t> CheckedRows(const sr_kernel_rows_args& a, const Table& t, const char* call) {
  const sdk::TensorView<const int64_t, 1> rows(a.rows, "rows");
  std::vector<int64_t> out(static_cast<size_t>(rows.size(0)));
  for (int64_t i = 0; i < rows.size(0); ++i) {
    const int64_t r = rows(i);
    if (r < 0 || r >= t.num_rows) {
      throw sdk::Error(SR_OUT_OF_RANGE, std::string(call) + ": rows[" + std::to_string(i) +
                                            "] = " + std::to_string(r) +
                                            " is out of range for table '" + t.name + "' with " +
                                            std::to_string(t.num_rows) + " rows");
    }
    out[static_cast<size_t>(i)] = r;
  }
  return out;
}

// Columns of the weights tensor of a row call: the dim, or for quantized
// rows their bytes (uint8 [n, bytes_per_row], scale and bias included).
int64_t WeightColumns(const Table& t) {
  return t.type == WeightType::kRowQuantized ? t.bytes_per_row : t.dim;
}

}  // namespace

void CpuKernel::ReadRows(const sr_kernel_rows_args& a) {
  CheckRowsArgs(a, "read_rows");
  std::lock_guard<std::mutex> lock(mutex_);
  const Table& t = TableAt(a.table, "read_rows");
  const std::vector<int64_t> rows = CheckedRows(a, t, "read_rows");
  const int64_t n = static_cast<int64_t>(rows.size());
  const size_t elem = ElementBytes(t.type);
  const int64_t cols = WeightColumns(t);
  if (a.weights != nullptr) {
    const MatrixView w(a.weights, "weights", t.dtype, n, cols);
    CheckWritableLayout("weights", n, cols, w.row_stride(), w.col_stride());
  }
  if (a.state != nullptr) {
    const sdk::TensorView<float, 2> s(a.state, "state", {n, t.state_dim});
    CheckWritableLayout("state", n, t.state_dim, s.stride(0), s.stride(1));
  }
  // Rows [lo, hi) of the call: each output row written once, so tasks
  // never share one.
  auto copy = [&](int64_t lo, int64_t hi) {
    if (a.weights != nullptr) {
      const MatrixView w(a.weights, "weights", t.dtype, n, cols);
      for (int64_t i = lo; i < hi; ++i) {
        const char* src = static_cast<const char*>(t.Row(rows[static_cast<size_t>(i)]));
        if (w.col_stride() == 1) {
          std::memcpy(w.At(i, 0), src, t.row_bytes());
        } else {
          for (int64_t c = 0; c < cols; ++c) std::memcpy(w.At(i, c), src + c * elem, elem);
        }
      }
    }
    if (a.state != nullptr) {
      const sdk::TensorView<float, 2> s(a.state, "state", {n, t.state_dim});
      for (int64_t i = lo; i < hi; ++i) {
        const float* src = t.StateRow(rows[static_cast<size_t>(i)]);
        if (s.stride(1) == 1 && t.state_dim > 0) {
          std::memcpy(&s(i, 0), src, static_cast<size_t>(t.state_dim) * sizeof(float));
        } else {
          for (int64_t c = 0; c < t.state_dim; ++c) s(i, c) = src[c];
        }
      }
    }
  };
  if (n < 2 * kCopyRowsPerTask) {
    copy(0, n);
    return;
  }
  arena_->execute([&] {
    oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<int64_t>(0, n, kCopyRowsPerTask),
                              [&](const oneapi::tbb::blocked_range<int64_t>& r) { copy(r.begin(), r.end()); });
  });
}

void CpuKernel::WriteRows(const sr_kernel_rows_args& a) {
  CheckRowsArgs(a, "write_rows");
  std::lock_guard<std::mutex> lock(mutex_);
  const Table& t = TableAt(a.table, "write_rows");
  const std::vector<int64_t> rows = CheckedRows(a, t, "write_rows");
  const int64_t n = static_cast<int64_t>(rows.size());
  const size_t elem = ElementBytes(t.type);
  const int64_t cols = WeightColumns(t);
  // Validate both tensors before copying either.
  if (a.weights != nullptr) (void)MatrixView(a.weights, "weights", t.dtype, n, cols);
  if (a.state != nullptr) (void)sdk::TensorView<const float, 2>(a.state, "state", {n, t.state_dim});
  // The entries [lo, hi) of the call whose table row is `part` modulo
  // `parts`: every copy of one row falls to one task, in the call's order,
  // so a duplicate's last copy still wins.
  auto copy = [&](int64_t lo, int64_t hi, int64_t part, int64_t parts) {
    if (a.weights != nullptr) {
      const MatrixView w(a.weights, "weights", t.dtype, n, cols);
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t row = rows[static_cast<size_t>(i)];
        if (row % parts != part) continue;
        char* dst = static_cast<char*>(t.Row(row));
        if (w.col_stride() == 1) {
          std::memcpy(dst, w.At(i, 0), t.row_bytes());
        } else {
          for (int64_t c = 0; c < cols; ++c) std::memcpy(dst + c * elem, w.At(i, c), elem);
        }
      }
    }
    if (a.state != nullptr) {
      const sdk::TensorView<const float, 2> s(a.state, "state", {n, t.state_dim});
      for (int64_t i = lo; i < hi; ++i) {
        const int64_t row = rows[static_cast<size_t>(i)];
        if (row % parts != part) continue;
        float* dst = t.StateRow(row);
        if (s.stride(1) == 1 && t.state_dim > 0) {
          std::memcpy(dst, &s(i, 0), static_cast<size_t>(t.state_dim) * sizeof(float));
        } else {
          for (int64_t c = 0; c < t.state_dim; ++c) dst[c] = s(i, c);
        }
      }
    }
  };
  const int64_t parts = std::min<int64_t>(n / kCopyRowsPerTask, arena_->max_concurrency());
  if (parts < 2) {
    copy(0, n, 0, 1);
    return;
  }
  arena_->execute([&] {
    oneapi::tbb::parallel_for(int64_t{0}, parts, [&](int64_t part) { copy(0, n, part, parts); });
  });
}

void CpuKernel::ResetRows(const sr_kernel_rows_args& a) {
  CheckRowsArgs(a, "reset_rows");
  std::lock_guard<std::mutex> lock(mutex_);
  const Table& t = TableAt(a.table, "reset_rows");
  if (a.weights != nullptr || a.state != nullptr) {
    throw InvalidArgument("reset_rows: weights and state must be NULL (reset redraws weights "
                          "from the table's initializer and resets the optimizer state)");
  }
  std::vector<int64_t> rows = CheckedRows(a, t, "reset_rows");
  if (static_cast<int64_t>(rows.size()) <= kResetRowsPerTask) {
    InitializeRows(t, rows.data(), 0, static_cast<int64_t>(rows.size()));
    return;
  }
  // Each row must belong to one task (two tasks writing a duplicate row,
  // even with equal bytes, would race), so deduplicate first (managed
  // collision's evicted rows come sorted and unique already).
  if (std::adjacent_find(rows.begin(), rows.end(), std::greater_equal<int64_t>()) != rows.end()) {
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  }
  const int64_t n = static_cast<int64_t>(rows.size());
  arena_->execute([&] {
    oneapi::tbb::parallel_for(oneapi::tbb::blocked_range<int64_t>(0, n, kResetRowsPerTask),
                              [&](const oneapi::tbb::blocked_range<int64_t>& r) {
                                InitializeRows(t, rows.data(), r.begin(), r.end());
                              });
  });
}

}  // namespace shardrec::kernel_cpu
