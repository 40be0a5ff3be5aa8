// Shared helpers of the CPU-kernel tests: load the built plugin through the
// registry, create kernels from table specs, turn reference lookups into
// sr_kernel_lookup_args, output buffers with guard values, and whole-table
// reads and writes in any weight dtype.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/reference_kernel.h"

namespace shardrec::testing {

inline constexpr DLDataType kF32{kDLFloat, 32, 1};
inline constexpr DLDataType kF16{kDLFloat, 16, 1};
inline constexpr DLDataType kBF16{kDLBfloat, 16, 1};
std::string DTypeLabel(DLDataType t);  // "f32", "f16", "bf16"

// The "cpu" kernel component of the built libshardrec_kernel_cpu.so.
const ComponentRef& CpuKernelRef();
// Loads a plugin file once per process (kept loaded) and finds `kind`/`name`.
ComponentRef LoadComponent(const std::string& path, int32_t kind, const std::string& name);

// A DLTensor over caller-owned storage, with its own shape and strides.
class Tensor {
 public:
  Tensor(const void* data, DLDataType dtype, std::vector<int64_t> shape,
         std::vector<int64_t> strides = {}, DLDevice device = {kDLCPU, 0},
         uint64_t byte_offset = 0);
  Tensor(const Tensor& o) : Tensor(o.t_.data, o.t_.dtype, o.shape_, o.strides_, o.t_.device,
                                   o.t_.byte_offset) {}
  Tensor& operator=(const Tensor&) = delete;
  DLTensor* get() { return &t_; }
  DLTensor* operator->() { return &t_; }

 private:
  std::vector<int64_t> shape_;
  std::vector<int64_t> strides_;
  DLTensor t_{};
};

struct TableSpec {
  std::string name = "t";
  int64_t rows = 16;
  int64_t dim = 4;
  DLDataType dtype = kF32;
  double init_min = -1.0;
  double init_max = 1.0;
  uint64_t seed = 7;
  int64_t global_row_offset = 0;
  int64_t global_col_offset = 0;
  int32_t row_quantization = SR_ROW_QUANT_NONE;  // ABI 1.4; dtype then uint8
};

std::vector<sr_kernel_table> Describe(const std::vector<TableSpec>& specs);

StatusOr<Kernel> CreateKernel(const std::vector<TableSpec>& tables, int32_t optimizer,
                              const OptionList& params = {}, const OptionList& options = {});

// The reference optimizer matching CreateKernel(..., optimizer, params):
// parameters given as decimal strings.
reference::RefOptimizer RefOptimizerFor(int32_t optimizer, const OptionList& params);

// sr_kernel_lookup_args over a RefLookup, which must outlive it.
class LookupArgs {
 public:
  explicit LookupArgs(const reference::RefLookup& l, int32_t bounds_check = SR_BOUNDS_CHECK_FATAL);
  LookupArgs(const LookupArgs&) = delete;
  sr_kernel_lookup_args args{};
  int64_t num_invalid = -1;
  Tensor offsets;
  Tensor indices;
  std::optional<Tensor> weights;
};

// A float32 [rows, cols] output inside a larger buffer, every element
// starting at kSentinel: guard elements before and after, and whatever the
// strides skip.
class GuardedOutput {
 public:
  static constexpr float kSentinel = -12345.5f;
  // row_stride < 0: cols * col_stride (row-major). lead: guard floats before.
  GuardedOutput(int64_t rows, int64_t cols, int64_t row_stride = -1, int64_t col_stride = 1,
                int64_t lead = 5);
  DLTensor* tensor() { return tensor_.get(); }
  float At(int64_t r, int64_t c) const {
    return storage_[static_cast<size_t>(lead_ + r * row_stride_ + c * col_stride_)];
  }
  // Every element kSentinel, inside and outside the tensor.
  bool Untouched() const;
  // Compares with `expected` (row-major [rows, cols], kSentinel where
  // nothing may be written): written elements within
  // rel_tol * tolerance_scale + 1e-6, the rest and all guards bit-exact.
  ::testing::AssertionResult Matches(const std::vector<float>& expected,
                                     const std::vector<float>& tolerance_scale,
                                     double rel_tol) const;

 private:
  int64_t rows_, cols_, row_stride_, col_stride_, lead_;
  std::vector<float> storage_;
  Tensor tensor_;
};

// What the reference writes for `lookup` into a sentinel-filled [rows, cols]
// output, and the matching sums of |w_i * W| (the scale of float rounding).
struct ExpectedOutput {
  std::vector<float> values;
  std::vector<float> magnitude;
};
ExpectedOutput ReferenceOutput(const std::vector<reference::RefTable>& tables,
                               const reference::RefLookup& lookup, int64_t rows, int64_t cols);

Status Forward(const Kernel& k, const reference::RefLookup& l, DLTensor* out,
               int32_t bounds_check = SR_BOUNDS_CHECK_FATAL, int64_t* num_invalid = nullptr);
Status Backward(const Kernel& k, const reference::RefLookup& l, std::vector<float>& grad,
                int64_t cols, int64_t iteration = 1, double learning_rate = std::nan(""),
                int32_t bounds_check = SR_BOUNDS_CHECK_FATAL);

// Reads every row (and the state) of local table `table` as floats.
reference::RefTable ReadTable(const Kernel& k, int32_t table);
// Writes every row and the state of `t` into local table `table`.
void WriteTable(const Kernel& k, int32_t table, const reference::RefTable& t);

// Raw rows [0, rows) of table 0 of a quantized kernel (uint8 [rows,
// row_bytes]), and their write.
std::vector<uint8_t> ReadRawRows(const Kernel& k, int64_t rows, int64_t row_bytes);
Status WriteRawRows(const Kernel& k, const std::vector<uint8_t>& raw, int64_t rows, int64_t row_bytes);

// Appends a feature of `bags` random bags (lengths in [0, max_len], ids in
// [0, rows)); weights in [0.5, 1.5] when `weighted`.
void AddRandomFeature(reference::RefLookup& l, std::mt19937_64& rng, int32_t table,
                      int32_t pooling, int64_t bags, int64_t max_len, int64_t rows,
                      int64_t out_row, int64_t out_col, bool weighted = false);
// Output rows a lookup's feature f covers (bags, or ids with NONE).
int64_t FeatureRows(const reference::RefLookup& l, size_t f);

// Ids [0, n) as a vector.
std::vector<int64_t> Iota(int64_t n);

}  // namespace shardrec::testing
