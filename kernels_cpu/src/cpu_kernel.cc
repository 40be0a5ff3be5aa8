// CpuKernel: creation (validation, allocation, initialisation), table
// info, and the forward and backward entries. Row I/O is in rows.cc.
#include "cpu_kernel.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "initial_weights.h"
#include "matrix_view.h"
#include "shardrec/sdk/init.hpp"
#include "shardrec/sdk/kernel_table.hpp"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::kernel_cpu {
namespace {

using sdk::InvalidArgument;

// Rows initialised per task at creation.
constexpr int64_t kInitRowsPerTask = 1024;

Table MakeTable(const sr_kernel_table& d, size_t index, int32_t optimizer,
                const OptimizerConfig& config) {
  Table t;
  static_cast<sdk::KernelTableSpec&>(t) = sdk::CheckKernelTable(d, index, optimizer, /*quantized_rows=*/true);
  t.state_init = sdk::InitialStateValue(config);
  return t;
}

}  // namespace

CpuKernel::CpuKernel(const sr_kernel_create_args& a) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_create_args, options)) {
    throw InvalidArgument("create args: struct_size " + std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_create_args v1.0");
  }
  if (a.device.device_type != kDLCPU) {
    throw InvalidArgument(
        "device: the cpu kernel runs on kDLCPU (device type 1), got device type " +
        std::to_string(a.device.device_type) + " id " + std::to_string(a.device.device_id));
  }
  options_ = ParseKernelOptions(a.options);
  optimizer_ = sdk::ParseOptimizerConfig(a.optimizer, a.optimizer_params, "kernel cpu");
  if (a.num_tables > 0 && a.tables == nullptr) {
    throw InvalidArgument("create args: " + std::to_string(a.num_tables) +
                          " tables but tables is NULL");
  }
  if (a.num_tables > static_cast<size_t>(std::numeric_limits<int32_t>::max())) {
    throw InvalidArgument("create args: too many tables");
  }
  tables_.reserve(a.num_tables);
  for (size_t i = 0; i < a.num_tables; ++i) {
    tables_.push_back(MakeTable(a.tables[i], i, a.optimizer, optimizer_));
  }
  // (A copy of `automatic`, not a reference: oneTBB declares it without a
  // definition, so binding it to a reference would not link.)
  const int automatic = static_cast<int>(oneapi::tbb::task_arena::automatic);
  arena_ = std::make_unique<oneapi::tbb::task_arena>(options_.threads == 0 ? automatic
                                                                           : options_.threads);
  for (Table& t : tables_) {
    const std::string who = "table '" + t.name + "'";
    t.weights = TableMemory(static_cast<size_t>(t.num_rows) * t.row_bytes(), options_.huge_pages,
                            (who + " weights").c_str());
    t.state = TableMemory(static_cast<size_t>(t.num_rows * t.state_dim) * sizeof(float),
                          options_.huge_pages, (who + " optimizer state").c_str());
    // First touch happens here, in parallel, so pages (huge or not) are
    // spread over the arena's threads.
    const Table& table = t;
    arena_->execute([&] {
      oneapi::tbb::parallel_for(
          oneapi::tbb::blocked_range<int64_t>(0, table.num_rows, kInitRowsPerTask),
          [&](const oneapi::tbb::blocked_range<int64_t>& r) {
            InitializeRows(table, nullptr, r.begin(), r.end());
          });
    });
  }
}

namespace {
// Scattered rows (a reset of evicted rows) miss the cache on every line
// they write; asking for the lines of the row kAhead positions on, for
// writing, overlaps those misses.
constexpr int64_t kInitAhead = 8;
inline void PrefetchForWrite(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, 1);
}
}  // namespace

void CpuKernel::InitializeRows(const Table& t, const int64_t* rows, int64_t begin, int64_t end) {
  std::vector<float> values(t.type == WeightType::kFloat32 ? 0 : static_cast<size_t>(t.dim));
  const size_t state_bytes = static_cast<size_t>(t.state_dim) * sizeof(float);
  const float state_init = t.state_init;
  constexpr int64_t kFill = 16;
  float fill[kFill];
  std::fill_n(fill, kFill, state_init);
  for (int64_t k = begin; k < end; ++k) {
    const int64_t r = rows != nullptr ? rows[k] : k;
    if (rows != nullptr && k + kInitAhead < end) {
      const int64_t next = rows[k + kInitAhead];
      PrefetchForWrite(t.Row(next), t.row_bytes());
      if (state_bytes > 0) PrefetchForWrite(t.StateRow(next), state_bytes);
    }
    void* row = t.Row(r);
    // float32 rows are drawn in place; others drawn, then rounded (or
    // quantized whole).
    float* drawn = t.type == WeightType::kFloat32 ? static_cast<float*>(row) : values.data();
    InitialRowWeights(t.init_seed, t.global_row_offset + r, t.global_col_offset, t.dim, t.init_min, t.init_max, drawn);
    if (t.type == WeightType::kRowQuantized) {
      sdk::QuantizeRow(t.quantization, values.data(), t.dim, static_cast<uint8_t*>(row));
    } else if (t.type != WeightType::kFloat32) {
      for (int64_t c = 0; c < t.dim; ++c) StoreElement(row, t.type, c, values[static_cast<size_t>(c)]);
    }
    // 16 floats a copy: a loop storing t.state_init reloaded it after every
    // store (a float store may alias the table's member) and wrote one float
    // at a time, most of a managed-collision reset's time.
    float* state = t.StateRow(r);
    int64_t c = 0;
    for (; c + kFill <= t.state_dim; c += kFill) std::memcpy(state + c, fill, sizeof fill);
    for (; c < t.state_dim; ++c) state[c] = state_init;
  }
}

const Table& CpuKernel::TableAt(int32_t table, const char* call) const {
  if (table < 0 || static_cast<size_t>(table) >= tables_.size()) {
    throw InvalidArgument(std::string(call) + ": table " + std::to_string(table) +
                          " is out of range (the kernel holds " + std::to_string(tables_.size()) +
                          " tables)");
  }
  return tables_[static_cast<size_t>(table)];
}

void CpuKernel::TableInfo(int32_t table, sr_kernel_table_info* out) {
  const Table& t = TableAt(table, "get_table_info");
  if (out->struct_size < SR_STRUCT_SIZE(sr_kernel_table_info, bytes)) {
    throw InvalidArgument("get_table_info: struct_size " + std::to_string(out->struct_size) +
                          " is smaller than sr_kernel_table_info v1.0");
  }
  out->num_rows = t.num_rows;
  out->dim = t.dim;
  out->weight_dtype = t.dtype;
  out->state_dim = t.state_dim;
  out->state_dtype = DLDataType{kDLFloat, 32, 1};
  out->bytes = static_cast<int64_t>(t.weights.bytes() + t.state.bytes());
  if (SR_HAS_FIELD(out, sr_kernel_table_info, row_quantization)) {
    out->row_bytes = t.bytes_per_row;
    out->row_quantization = static_cast<int32_t>(t.quantization);
  }
}

void CpuKernel::Forward(const sr_kernel_forward_args& a) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_forward_args, output)) {
    throw InvalidArgument("forward args: struct_size " + std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_forward_args v1.0");
  }
  sdk::ClearInvalidCount(a.lookup);
  std::lock_guard<std::mutex> lock(mutex_);
  ValidateLookup(a.lookup, tables_, &lookup_);
  const sdk::TensorView<float, 2> out(a.output, "output");
  CheckWritableLayout("output", out.size(0), out.size(1), out.stride(0), out.stride(1));
  ValidatePlacement(lookup_, tables_, out.size(0), out.size(1), "output", /*disjoint=*/true);
  CheckBounds(*a.lookup, tables_, "forward", &lookup_);
  RunForward(tables_, lookup_, out.data(), out.stride(0), out.stride(1),
             options_.prefetch_distance, *arena_, forward_jobs_);
}

void CpuKernel::Backward(const sr_kernel_backward_args& a) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_backward_args, learning_rate)) {
    throw InvalidArgument("backward args: struct_size " + std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_backward_args v1.0");
  }
  sdk::ClearInvalidCount(a.lookup);
  const OptimizerStep step = sdk::MakeOptimizerStep(optimizer_, a.learning_rate, a.iteration);
  std::lock_guard<std::mutex> lock(mutex_);
  ValidateLookup(a.lookup, tables_, &lookup_);
  const sdk::TensorView<const float, 2> grad(a.grad_output, "grad_output");
  ValidatePlacement(lookup_, tables_, grad.size(0), grad.size(1), "grad_output",
                    /*disjoint=*/false);
  CheckBounds(*a.lookup, tables_, "backward", &lookup_);
  RunBackward(tables_, lookup_, grad.data(), grad.stride(0), grad.stride(1), step,
              options_.prefetch_distance, *arena_, backward_);
}

}  // namespace shardrec::kernel_cpu
