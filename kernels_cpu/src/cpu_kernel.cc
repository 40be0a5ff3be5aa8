// CpuKernel: creation (validation, allocation, initialisation), table
// info, and the forward and backward entries. Row I/O is in rows.cc.
#include "cpu_kernel.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>

#include <cmath>
#include <limits>
#include <string>

#include "matrix_view.h"
#include "shardrec/sdk/init.hpp"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::kernel_cpu {
namespace {

using sdk::InvalidArgument;

// Rows initialised per task at creation.
constexpr int64_t kInitRowsPerTask = 1024;

WeightType TypeOf(DLDataType t, const std::string& table) {
  if (t.lanes == 1 && t.code == kDLFloat && t.bits == 32) return WeightType::kFloat32;
  if (t.lanes == 1 && t.code == kDLFloat && t.bits == 16) return WeightType::kFloat16;
  if (t.lanes == 1 && t.code == kDLBfloat && t.bits == 16) return WeightType::kBFloat16;
  throw InvalidArgument(table + ": weight dtype " + sdk::DTypeName(t) +
                        " is not supported (float32, float16, bfloat16)");
}

Table MakeTable(const sr_kernel_table& d, size_t index, int32_t optimizer,
                const OptimizerConfig& config) {
  if (d.struct_size < SR_STRUCT_SIZE(sr_kernel_table, global_col_offset)) {
    throw InvalidArgument("table " + std::to_string(index) + ": struct_size " +
                          std::to_string(d.struct_size) +
                          " is smaller than sr_kernel_table v1.0");
  }
  Table t;
  t.name = d.name != nullptr ? d.name : "table " + std::to_string(index);
  const std::string who = "table '" + t.name + "'";
  if (d.num_rows < 0)
    throw InvalidArgument(who + ": num_rows " + std::to_string(d.num_rows) + " < 0");
  if (d.dim < 1) throw InvalidArgument(who + ": dim " + std::to_string(d.dim) + " < 1");
  t.type = TypeOf(d.weight_dtype, who);
  t.dtype = d.weight_dtype;
  t.num_rows = d.num_rows;
  t.dim = d.dim;
  t.state_dim = StateDim(optimizer, d.dim);
  // Keep every byte count (and element offset) well inside int64.
  const int64_t per_row = d.dim * 4 + t.state_dim * 4;
  if (d.dim > (int64_t{1} << 24) ||
      d.num_rows > (std::numeric_limits<int64_t>::max() / 4) / per_row) {
    throw InvalidArgument(who + ": " + std::to_string(d.num_rows) + " x " +
                          std::to_string(d.dim) + " is too large");
  }
  if (!std::isfinite(d.init_min) || !std::isfinite(d.init_max) || d.init_min > d.init_max) {
    throw InvalidArgument(who + ": init range [" + std::to_string(d.init_min) + ", " +
                          std::to_string(d.init_max) + "] is not a finite interval");
  }
  if (d.global_row_offset < 0 || d.global_col_offset < 0) {
    throw InvalidArgument(who + ": negative global_row_offset or global_col_offset");
  }
  t.init_min = d.init_min;
  t.init_max = d.init_max;
  t.init_seed = d.init_seed;
  t.global_row_offset = d.global_row_offset;
  t.global_col_offset = d.global_col_offset;
  if (optimizer == SR_OPTIMIZER_ADAGRAD || optimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD) {
    t.state_init = static_cast<float>(config.initial_accumulator_value);
  }
  return t;
}

// sr_kernel_lookup_args::num_invalid_ids is set on every path that gets as
// far as reading the arguments, errors included.
void ClearInvalidCount(const sr_kernel_lookup_args* a) {
  if (a != nullptr && a->struct_size >= SR_STRUCT_SIZE(sr_kernel_lookup_args, stream) &&
      a->num_invalid_ids != nullptr) {
    *a->num_invalid_ids = 0;
  }
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
  optimizer_ = ParseOptimizer(a.optimizer, a.optimizer_params);
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

void CpuKernel::InitializeRows(const Table& t, const int64_t* rows, int64_t begin, int64_t end) {
  for (int64_t k = begin; k < end; ++k) {
    const int64_t r = rows != nullptr ? rows[k] : k;
    void* row = t.Row(r);
    const int64_t global_row = t.global_row_offset + r;
    for (int64_t c = 0; c < t.dim; ++c) {
      StoreElement(row, t.type, c,
                   sdk::InitialWeight(t.init_seed, global_row, t.global_col_offset + c, t.init_min,
                                      t.init_max));
    }
    float* state = t.StateRow(r);
    for (int64_t c = 0; c < t.state_dim; ++c) state[c] = t.state_init;
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
}

void CpuKernel::Forward(const sr_kernel_forward_args& a) {
  if (a.struct_size < SR_STRUCT_SIZE(sr_kernel_forward_args, output)) {
    throw InvalidArgument("forward args: struct_size " + std::to_string(a.struct_size) +
                          " is smaller than sr_kernel_forward_args v1.0");
  }
  ClearInvalidCount(a.lookup);
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
  ClearInvalidCount(a.lookup);
  if (optimizer_.optimizer == SR_OPTIMIZER_NONE) {
    throw sdk::Error(SR_FAILED_PRECONDITION,
                     "backward: the kernel was created without an optimizer (optimizer none); "
                     "create it with sgd, adagrad, rowwise_adagrad or adam to train");
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ValidateLookup(a.lookup, tables_, &lookup_);
  const sdk::TensorView<const float, 2> grad(a.grad_output, "grad_output");
  ValidatePlacement(lookup_, tables_, grad.size(0), grad.size(1), "grad_output",
                    /*disjoint=*/false);
  double lr = a.learning_rate;
  if (std::isnan(lr)) {
    lr = optimizer_.learning_rate;
  } else if (!std::isfinite(lr) || lr < 0) {
    throw InvalidArgument("backward: learning_rate must be a finite number >= 0 (or NaN for the "
                          "configured " + std::to_string(optimizer_.learning_rate) + "), got " +
                          std::to_string(lr));
  }
  OptimizerStep step;
  step.optimizer = optimizer_.optimizer;
  step.learning_rate = static_cast<float>(lr);
  step.eps = static_cast<float>(optimizer_.eps);
  step.weight_decay = static_cast<float>(optimizer_.weight_decay);
  if (optimizer_.optimizer == SR_OPTIMIZER_ADAM) {
    if (a.iteration < 1) {
      throw InvalidArgument("backward: iteration must be >= 1 for adam's bias correction, got " +
                            std::to_string(a.iteration));
    }
    const double t = static_cast<double>(a.iteration);
    step.beta1 = static_cast<float>(optimizer_.beta1);
    step.beta2 = static_cast<float>(optimizer_.beta2);
    step.one_minus_beta1 = static_cast<float>(1.0 - optimizer_.beta1);
    step.one_minus_beta2 = static_cast<float>(1.0 - optimizer_.beta2);
    step.bias_correction1 = static_cast<float>(1.0 - std::pow(optimizer_.beta1, t));
    step.bias_correction2 = static_cast<float>(1.0 - std::pow(optimizer_.beta2, t));
  }
  CheckBounds(*a.lookup, tables_, "backward", &lookup_);
  RunBackward(tables_, lookup_, grad.data(), grad.stride(0), grad.stride(1), step,
              options_.prefetch_distance, *arena_, backward_);
}

}  // namespace shardrec::kernel_cpu
