// Row I/O of the CUDA kernel: read_rows gathers weights and optimizer state
// into caller tensors on the kernel's GPU, write_rows scatters them in (for
// duplicate rows the last one wins, as on the CPU: the rows are sorted
// stably and only the last of each run is written), reset_rows redraws
// weights and resets state. Rows and tensors are checked before the first
// write, so an error changes nothing.
#include <climits>
#include <cstring>
#include <string>

#include "cuda_check.h"
#include "cuda_kernel.h"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::kernel_cuda {
namespace {

using sdk::InvalidArgument;

void CheckRowsArgs(const sr_kernel_rows_args& a, const char* call) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_rows_args, stream)) {
    throw InvalidArgument(std::string(call) + " args: struct_size " +
                          std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_rows_args v1.0");
  }
}

DeviceRows RowsOf(const sdk::MatrixView& m, int element_bytes) {
  return DeviceRows{m.At(0, 0), m.row_stride(), m.col_stride(), element_bytes};
}

DeviceRows RowsOf(const sdk::TensorView<const float, 2>& s) {
  return DeviceRows{reinterpret_cast<char*>(const_cast<float*>(s.data())), s.stride(0),
                    s.stride(1), 4};
}

// Bytes of one element as read_rows / write_rows move it: quantized rows
// move as bytes (uint8 [n, bytes_per_row], scale and bias included).
int ElementBytes(const sdk::KernelTableSpec& t) {
  return t.type == sdk::WeightDType::kFloat32 ? 4 : t.type == sdk::WeightDType::kRowQuantized ? 1 : 2;
}

// Columns of the weights tensor of a row call.
int64_t WeightColumns(const sdk::KernelTableSpec& t) {
  return t.type == sdk::WeightDType::kRowQuantized ? t.bytes_per_row : t.dim;
}

}  // namespace

const int64_t* CudaKernel::CheckedRows(const sr_kernel_rows_args& a,
                                       const sdk::KernelTableSpec& t, const char* call,
                                       int64_t* n) {
  const sdk::TensorView<const int64_t, 1> rows(a.rows, "rows", DLDevice{kDLCUDA, device_});
  if (rows.size(0) > 1 && rows.stride(0) != 1) {
    throw InvalidArgument(std::string(call) + ": rows must be contiguous for the cuda kernel");
  }
  if (rows.size(0) >= (int64_t{1} << 31)) {
    throw InvalidArgument(std::string(call) + ": fewer than 2^31 rows per call");
  }
  *n = rows.size(0);
  if (*n == 0) return rows.data();
  const auto stream = static_cast<cudaStream_t>(a.stream);
  staging_.Reserve(sizeof(int64_t));
  meta_.Reserve(sizeof(int64_t), stream, "row check");
  const int64_t none = INT64_MAX;
  std::memcpy(staging_.data(), &none, sizeof(none));
  CudaCheck(cudaMemcpyAsync(meta_.data(), staging_.data(), sizeof(int64_t), cudaMemcpyHostToDevice,
                            stream),
            "cudaMemcpyAsync (row check)");
  LaunchRowsCheck(rows.data(), *n, t.num_rows, meta_.as<int64_t>(), stream);
  CudaCheck(cudaGetLastError(), "row check launch");
  CudaCheck(cudaMemcpyAsync(staging_.data(), meta_.data(), sizeof(int64_t), cudaMemcpyDeviceToHost,
                            stream),
            "cudaMemcpyAsync (row check)");
  SyncOrThrow(stream, "row check on the device");
  int64_t bad = 0;
  std::memcpy(&bad, staging_.data(), sizeof(bad));
  if (bad != INT64_MAX) {
    int64_t value = 0;
    CudaCheck(cudaMemcpy(&value, rows.data() + bad, sizeof(value), cudaMemcpyDeviceToHost),
              "cudaMemcpy (bad row)");
    throw sdk::Error(SR_OUT_OF_RANGE, std::string(call) + ": rows[" + std::to_string(bad) +
                                          "] = " + std::to_string(value) +
                                          " is out of range for table '" + t.name + "' with " +
                                          std::to_string(t.num_rows) + " rows");
  }
  return rows.data();
}

void CudaKernel::ReadRows(const sr_kernel_rows_args& a) {
  CheckRowsArgs(a, "read_rows");
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  const cudaStream_t stream = Enter(a.stream);
  const sdk::KernelTableSpec& t = TableAt(a.table, "read_rows");
  const size_t ti = static_cast<size_t>(a.table);
  int64_t n = 0;
  const int64_t* rows = CheckedRows(a, t, "read_rows", &n);
  const DLDevice dev{kDLCUDA, device_};
  if (a.weights != nullptr) {
    const sdk::MatrixView w(a.weights, "weights", t.dtype, n, WeightColumns(t), &dev);
    sdk::CheckWritableLayout("weights", n, WeightColumns(t), w.row_stride(), w.col_stride());
  }
  if (a.state != nullptr) {
    const sdk::TensorView<const float, 2> s(a.state, "state", dev, {n, t.state_dim});
    sdk::CheckWritableLayout("state", n, t.state_dim, s.stride(0), s.stride(1));
  }
  if (a.weights != nullptr) {
    const sdk::MatrixView w(a.weights, "weights", t.dtype, n, WeightColumns(t), &dev);
    LaunchGatherRows(weights_[ti].data(), WeightColumns(t), rows, n, RowsOf(w, ElementBytes(t)), stream);
  }
  if (a.state != nullptr) {
    const sdk::TensorView<const float, 2> s(a.state, "state", dev, {n, t.state_dim});
    LaunchGatherRows(state_[ti].data(), t.state_dim, rows, n, RowsOf(s), stream);
  }
  CudaCheck(cudaGetLastError(), "read_rows launch");
}

void CudaKernel::WriteRows(const sr_kernel_rows_args& a) {
  CheckRowsArgs(a, "write_rows");
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  const cudaStream_t stream = Enter(a.stream);
  const sdk::KernelTableSpec& t = TableAt(a.table, "write_rows");
  const size_t ti = static_cast<size_t>(a.table);
  int64_t n = 0;
  const int64_t* rows = CheckedRows(a, t, "write_rows", &n);
  const DLDevice dev{kDLCUDA, device_};
  // Validate both tensors before copying either.
  if (a.weights != nullptr) (void)sdk::MatrixView(a.weights, "weights", t.dtype, n, WeightColumns(t), &dev);
  if (a.state != nullptr) {
    (void)sdk::TensorView<const float, 2>(a.state, "state", dev, {n, t.state_dim});
  }
  if (n == 0 || (a.weights == nullptr && a.state == nullptr)) return;
  const BackwardScratch s = ReserveSortScratch(n, /*gradient_width=*/0, stream);
  int row_bits = 1;
  while (row_bits < 63 && (int64_t{1} << row_bits) < t.num_rows) ++row_bits;
  LaunchSortRows(rows, n, row_bits, s, stream);
  if (a.weights != nullptr) {
    const sdk::MatrixView w(a.weights, "weights", t.dtype, n, WeightColumns(t), &dev);
    LaunchScatterRows(weights_[ti].data(), WeightColumns(t), s.sorted_keys, s.sorted_positions, n,
                      RowsOf(w, ElementBytes(t)), stream);
  }
  if (a.state != nullptr) {
    const sdk::TensorView<const float, 2> st(a.state, "state", dev, {n, t.state_dim});
    LaunchScatterRows(state_[ti].data(), t.state_dim, s.sorted_keys, s.sorted_positions, n,
                      RowsOf(st), stream);
  }
  CudaCheck(cudaGetLastError(), "write_rows launch");
}

void CudaKernel::ResetRows(const sr_kernel_rows_args& a) {
  CheckRowsArgs(a, "reset_rows");
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  const cudaStream_t stream = Enter(a.stream);
  const sdk::KernelTableSpec& t = TableAt(a.table, "reset_rows");
  if (a.weights != nullptr || a.state != nullptr) {
    throw InvalidArgument("reset_rows: weights and state must be NULL (reset redraws weights "
                          "from the table's initializer and resets the optimizer state)");
  }
  int64_t n = 0;
  const int64_t* rows = CheckedRows(a, t, "reset_rows", &n);
  LaunchInitRows(tables_[static_cast<size_t>(a.table)], rows, n, stream);
  CudaCheck(cudaGetLastError(), "reset_rows launch");
}

}  // namespace shardrec::kernel_cuda
