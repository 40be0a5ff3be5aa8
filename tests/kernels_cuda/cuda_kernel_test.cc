// The CUDA kernel against the CPU kernel: same capabilities, the conformance
// kit, and — over swept dtypes, optimizers, dims, poolings, per-id weights
// and bounds-check modes — the same forward outputs and the same rows and
// optimizer state after several training steps (float32 within 1e-5, 16-bit
// tables within one unit in the last place of their storage type), plus
// row I/O and determinism; and INT8/INT4/INT2 row-wise quantized tables. Both kernels get host tensors; core stages them
// to the GPU (plugin_objects.h). Without a GPU the comparisons SKIP with
// the driver's reason and the refusal itself is tested instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "kernel_test_util.h"
#include "shardrec/core/conformance.h"
#include "shardrec/core/device/cuda_runtime.h"

namespace shardrec::testing {
namespace {

using reference::RefLookup;
using reference::RefTable;

const ComponentRef& CudaKernelRef() {
  static const ComponentRef ref = LoadComponent(
      (std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_kernel_cuda.so").string(),
      SR_KIND_KERNEL, "cuda");
  return ref;
}

int Gpus(std::string* why = nullptr) {
  static std::string reason;
  static const int n = device::CudaDeviceCount(&reason);
  if (why) *why = reason;
  return n;
}

#define REQUIRE_GPU()                                                                     \
  do {                                                                                    \
    std::string why;                                                                      \
    if (Gpus(&why) == 0) GTEST_SKIP() << "needs a GPU: " << why;                          \
  } while (0)

constexpr DLDevice kGpu0{kDLCUDA, 0};

StatusOr<Kernel> Create(const ComponentRef& ref, const std::vector<TableSpec>& tables, int32_t optimizer,
                        const OptionList& params, DLDevice device) {
  return Kernel::Create(ref, Describe(tables), optimizer, params, {}, device);
}

// ---- everywhere -------------------------------------------------------------

TEST(CudaKernelPlugin, DeclaresTheCpuKernelsCapabilitiesOnDeviceCuda) {
  for (const char* name : {"weight_dtypes", "output_dtypes", "poolings", "optimizers", "optimizer_state_dim",
                           "bounds_check_modes"}) {
    EXPECT_EQ(CudaKernelRef().StringListAttribute(name), CpuKernelRef().StringListAttribute(name)) << name;
  }
  EXPECT_EQ(CudaKernelRef().StringListAttribute("devices"), std::vector<std::string>{"cuda"});
  EXPECT_EQ(DeviceFor(CudaKernelRef(), 3).device_type, kDLCUDA);
  EXPECT_EQ(DeviceFor(CudaKernelRef(), 3).device_id, 3);
  EXPECT_EQ(DeviceFor(CpuKernelRef(), 3).device_type, kDLCPU);
}

TEST(CudaKernelPlugin, RefusesAHostDevice) {
  auto k = Create(CudaKernelRef(), {TableSpec{}}, SR_OPTIMIZER_SGD, {}, DLDevice{kDLCPU, 0});
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(k.status().message().find("runs on kDLCUDA"), std::string::npos) << k.status().message();
}

TEST(CudaKernelPlugin, WithoutAGpuCreateIsUnavailableWithTheReason) {
  if (Gpus() > 0) GTEST_SKIP() << "a GPU is visible; this checks the CPU-only machine";
  auto k = Create(CudaKernelRef(), {TableSpec{}}, SR_OPTIMIZER_SGD, {}, kGpu0);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), SR_UNAVAILABLE);
  EXPECT_NE(k.status().message().find("no NVIDIA GPU"), std::string::npos) << k.status().message();
}

TEST(CudaKernelPlugin, ConformanceKitPassesOnAGpuAndSkipsWithout) {
  int passed = 0, skipped = 0;
  for (const auto& c : RunConformance(CudaKernelRef().library, PluginOptions())) {
    if (c.component != "kernel cuda") continue;
    EXPECT_NE(c.result, CheckResult::kFail) << c.check << ": " << c.detail;
    passed += c.result == CheckResult::kPass;
    skipped += c.result == CheckResult::kSkip;
  }
  if (Gpus() == 0) {
    EXPECT_EQ(skipped, 1);  // creation, with the reason; nothing after it
  } else {
    EXPECT_EQ(skipped, 0);
    EXPECT_GE(passed, 30);
  }
}

// ---- on a GPU: the CUDA kernel equals the CPU kernel ---------------------------

// Relative tolerance of a comparison of tables of `dtype` (one ulp of the
// storage type for 16-bit tables: float rounding before the store may
// differ by that much).
double Tolerance(DLDataType dtype) {
  if (dtype.bits == 32) return 1e-5;
  return dtype.code == kDLBfloat ? 1.0 / 128 : 1.0 / 1024;
}

void ExpectTablesNear(const RefTable& gpu, const RefTable& cpu, double rel, const std::string& what) {
  ASSERT_EQ(gpu.weights.size(), cpu.weights.size()) << what;
  ASSERT_EQ(gpu.state.size(), cpu.state.size()) << what;
  int failures = 0;
  for (size_t i = 0; i < cpu.weights.size() && failures < 5; ++i) {
    const double g = gpu.weights[i], c = cpu.weights[i];
    if (std::fabs(g - c) > rel * std::max(1.0, std::fabs(c))) {
      ADD_FAILURE() << what << ": weight " << i << " = " << g << " on the GPU, " << c << " on the CPU";
      ++failures;
    }
  }
  for (size_t i = 0; i < cpu.state.size() && failures < 5; ++i) {
    const double g = gpu.state[i], c = cpu.state[i];
    if (std::fabs(g - c) > 1e-5 * std::max(1e-3, std::fabs(c))) {
      ADD_FAILURE() << what << ": state " << i << " = " << g << " on the GPU, " << c << " on the CPU";
      ++failures;
    }
  }
}

// Outputs are compared at 1e-5 while both tables hold the same bits. After a
// training step a 16-bit table may differ by one storage ulp per element
// (ExpectTablesNear), and a pooled output sums up to kMaxBag such rows.
constexpr int kMaxBag = 6;

void ExpectOutputsNear(const GuardedOutput& gpu, const GuardedOutput& cpu, int64_t rows, int64_t cols, double rel,
                       const std::string& what) {
  int failures = 0;
  for (int64_t r = 0; r < rows && failures < 5; ++r) {
    for (int64_t c = 0; c < cols && failures < 5; ++c) {
      const double g = gpu.At(r, c), x = cpu.At(r, c);
      if (std::fabs(g - x) > rel * std::max(1.0, std::fabs(x))) {
        ADD_FAILURE() << what << ": output (" << r << ", " << c << ") = " << g << " on the GPU, " << x
                      << " on the CPU";
        ++failures;
      }
    }
  }
}

struct SweepCase {
  DLDataType dtype;
  int32_t optimizer;
};

std::string CaseName(const ::testing::TestParamInfo<SweepCase>& info) {
  return DTypeLabel(info.param.dtype) + "_" + sdk::OptimizerName(info.param.optimizer);
}

class CudaMatchesCpu : public ::testing::TestWithParam<SweepCase> {};

OptionList ParamsFor(int32_t optimizer) {
  OptionList p{{"learning_rate", "0.05"}};
  if (optimizer != SR_OPTIMIZER_SGD) p.Set("eps", "1e-6");
  if (optimizer == SR_OPTIMIZER_ADAGRAD || optimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD) {
    p.Set("initial_accumulator_value", "0.1");
  }
  p.Set("weight_decay", "0.01");
  return p;
}

// Dims across the vector paths: 1, odd, a multiple of 4, one lane group,
// 128 (a warp of float4s), past 128, and past the 512-column register pass.
TEST_P(CudaMatchesCpu, ForwardAndTrainingStepsOverDimsPoolingsAndWeights) {
  REQUIRE_GPU();
  const auto [dtype, optimizer] = GetParam();
  const OptionList params = ParamsFor(optimizer);
  for (const int64_t dim : {1, 3, 8, 33, 128, 136, 600}) {
    for (const bool weighted : {false, true}) {
      const std::string what = "dim " + std::to_string(dim) + (weighted ? ", weighted" : "");
      const std::vector<TableSpec> tables = {
          TableSpec{"a", 50, dim, dtype, -0.5, 0.5, 11, 100, 4},
          TableSpec{"b", 9, 4, dtype, -1.0, 1.0, 12, 0, 0}};
      auto cpu = Create(CpuKernelRef(), tables, optimizer, params, DLDevice{kDLCPU, 0});
      auto gpu = Create(CudaKernelRef(), tables, optimizer, params, kGpu0);
      ASSERT_TRUE(cpu.ok()) << cpu.status().message();
      ASSERT_TRUE(gpu.ok()) << gpu.status().message();
      for (int32_t t = 0; t < 2; ++t) {
        ExpectTablesNear(ReadTable(*gpu, t), ReadTable(*cpu, t), 0.0, what + ": initial table " + std::to_string(t));
      }
      std::mt19937_64 rng(static_cast<uint64_t>(dim * 7 + weighted));
      for (int64_t step = 1; step <= 3; ++step) {
        RefLookup l;
        AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 16, kMaxBag, 50, 0, 0, weighted);
        AddRandomFeature(l, rng, 0, SR_POOLING_MEAN, 16, kMaxBag, 50, 0, dim, weighted);
        AddRandomFeature(l, rng, 1, SR_POOLING_SUM, 16, 3, 9, 0, 2 * dim, weighted);
        if (!weighted) AddRandomFeature(l, rng, 1, SR_POOLING_NONE, 5, 4, 9, 16, 0, false);
        const int64_t rows = std::max<int64_t>(16, 16 + (l.num_features() > 3 ? FeatureRows(l, 3) : 0));
        const int64_t cols = 2 * dim + 4;
        GuardedOutput out_cpu(rows, cols), out_gpu(rows, cols);
        ASSERT_TRUE(Forward(*cpu, l, out_cpu.tensor()).ok());
        const Status s = Forward(*gpu, l, out_gpu.tensor());
        ASSERT_TRUE(s.ok()) << s.message();
        const double rel = step == 1 || dtype.bits == 32 ? 1e-5 : kMaxBag * Tolerance(dtype);
        ExpectOutputsNear(out_gpu, out_cpu, rows, cols, rel, what + ", step " + std::to_string(step));
        std::vector<float> grad(static_cast<size_t>(rows * cols));
        std::uniform_real_distribution<float> g(-1.0f, 1.0f);
        for (float& v : grad) v = g(rng);
        std::vector<float> grad_copy = grad;
        ASSERT_TRUE(Backward(*cpu, l, grad, cols, step).ok());
        const Status b = Backward(*gpu, l, grad_copy, cols, step);
        ASSERT_TRUE(b.ok()) << b.message();
      }
      for (int32_t t = 0; t < 2; ++t) {
        ExpectTablesNear(ReadTable(*gpu, t), ReadTable(*cpu, t), Tolerance(dtype),
                         what + ": table " + std::to_string(t) + " after 3 steps");
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Sweep, CudaMatchesCpu,
    ::testing::Values(SweepCase{kF32, SR_OPTIMIZER_SGD}, SweepCase{kF32, SR_OPTIMIZER_ADAGRAD},
                      SweepCase{kF32, SR_OPTIMIZER_ROWWISE_ADAGRAD}, SweepCase{kF32, SR_OPTIMIZER_ADAM},
                      SweepCase{kF16, SR_OPTIMIZER_ROWWISE_ADAGRAD}, SweepCase{kF16, SR_OPTIMIZER_ADAM},
                      SweepCase{kBF16, SR_OPTIMIZER_SGD}, SweepCase{kBF16, SR_OPTIMIZER_ROWWISE_ADAGRAD}),
    CaseName);

TEST(CudaKernelOnGpu, OutOfRangeIdsFatalWritesNothingIgnoreSkipsThem) {
  REQUIRE_GPU();
  const std::vector<TableSpec> tables = {TableSpec{"t", 10, 8}};
  auto cpu = Create(CpuKernelRef(), tables, SR_OPTIMIZER_SGD, {}, DLDevice{kDLCPU, 0});
  auto gpu = Create(CudaKernelRef(), tables, SR_OPTIMIZER_SGD, {}, kGpu0);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  RefLookup l;
  l.AddFeature(0, SR_POOLING_SUM, {2, 3}, {1, 12, 4, -1, 9}, 0, 0);
  GuardedOutput out(2, 8);
  int64_t invalid = -1;
  const Status fatal = Forward(*gpu, l, out.tensor(), SR_BOUNDS_CHECK_FATAL, &invalid);
  EXPECT_EQ(fatal.code(), SR_OUT_OF_RANGE);
  EXPECT_NE(fatal.message().find("bag 0, position 1 (indices[1]): id 12"), std::string::npos) << fatal.message();
  EXPECT_EQ(invalid, 2);
  EXPECT_TRUE(out.Untouched());
  GuardedOutput out_cpu(2, 8), out_gpu(2, 8);
  ASSERT_TRUE(Forward(*cpu, l, out_cpu.tensor(), SR_BOUNDS_CHECK_IGNORE).ok());
  ASSERT_TRUE(Forward(*gpu, l, out_gpu.tensor(), SR_BOUNDS_CHECK_IGNORE, &invalid).ok());
  EXPECT_EQ(invalid, 2);
  ExpectOutputsNear(out_gpu, out_cpu, 2, 8, 1e-5, "ignore");
  std::vector<float> grad(16, 0.5f), grad_copy = grad;
  ASSERT_TRUE(Backward(*cpu, l, grad, 8, 1, std::nan(""), SR_BOUNDS_CHECK_IGNORE).ok());
  ASSERT_TRUE(Backward(*gpu, l, grad_copy, 8, 1, std::nan(""), SR_BOUNDS_CHECK_IGNORE).ok());
  ExpectTablesNear(ReadTable(*gpu, 0), ReadTable(*cpu, 0), 1e-6, "after a step with ignored ids");
}

TEST(CudaKernelOnGpu, WriteRowsLastDuplicateWinsAndResetRestoresInitialRows) {
  REQUIRE_GPU();
  const std::vector<TableSpec> tables = {TableSpec{"t", 12, 6, kF32, -1, 1, 5, 30, 0}};
  auto cpu = Create(CpuKernelRef(), tables, SR_OPTIMIZER_ADAM, {}, DLDevice{kDLCPU, 0});
  auto gpu = Create(CudaKernelRef(), tables, SR_OPTIMIZER_ADAM, {}, kGpu0);
  ASSERT_TRUE(cpu.ok() && gpu.ok());
  RefTable t = ReadTable(*cpu, 0);
  for (size_t i = 0; i < t.weights.size(); ++i) t.weights[i] = static_cast<float>(i) * 0.25f;
  for (size_t i = 0; i < t.state.size(); ++i) t.state[i] = static_cast<float>(i);
  WriteTable(*cpu, 0, t);
  WriteTable(*gpu, 0, t);
  ExpectTablesNear(ReadTable(*gpu, 0), ReadTable(*cpu, 0), 0.0, "after write_rows");
  // Duplicates: rows {3, 3} with two different values; the last wins.
  std::vector<int64_t> rows = {3, 7, 3};
  std::vector<float> w(3 * 6);
  for (size_t i = 0; i < w.size(); ++i) w[i] = -static_cast<float>(i);
  Tensor rows_t(rows.data(), {kDLInt, 64, 1}, {3});
  Tensor w_t(w.data(), kF32, {3, 6});
  for (const Kernel* k : {&*cpu, &*gpu}) {
    sr_kernel_rows_args a{};
    a.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
    a.rows = rows_t.get();
    a.weights = w_t.get();
    ASSERT_TRUE(k->WriteRows(a).ok());
    sr_kernel_rows_args r{};
    r.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
    std::vector<int64_t> reset = {3, 0, 11};
    Tensor reset_t(reset.data(), {kDLInt, 64, 1}, {3});
    r.rows = reset_t.get();
    ASSERT_TRUE(k->ResetRows(r).ok());
  }
  ExpectTablesNear(ReadTable(*gpu, 0), ReadTable(*cpu, 0), 0.0, "after duplicate writes and a reset");
}

// Row-wise quantized tables (ABI 1.4): the GPU quantizes the initial rows to
// the CPU kernel's bytes, dequantizes every pooling the same (1e-5), and
// moves raw rows and resets them alike.
TEST(CudaKernelOnGpu, QuantizedTablesMatchTheCpuKernel) {
  REQUIRE_GPU();
  for (const int32_t q : {SR_ROW_QUANT_INT8, SR_ROW_QUANT_INT4, SR_ROW_QUANT_INT2}) {
    for (const int64_t dim : {1, 3, 8, 33, 128, 136, 600}) {
      const std::string what = "int" + std::to_string(q == SR_ROW_QUANT_INT8 ? 8 : q == SR_ROW_QUANT_INT4 ? 4 : 2) +
                               ", dim " + std::to_string(dim);
      const std::vector<TableSpec> tables = {
          TableSpec{"q", 50, dim, DLDataType{kDLUInt, 8, 1}, -0.5, 0.5, 11, 100, 4, q}};
      auto cpu = Create(CpuKernelRef(), tables, SR_OPTIMIZER_NONE, {}, DLDevice{kDLCPU, 0});
      auto gpu = Create(CudaKernelRef(), tables, SR_OPTIMIZER_NONE, {}, kGpu0);
      ASSERT_TRUE(cpu.ok()) << cpu.status().message();
      ASSERT_TRUE(gpu.ok()) << gpu.status().message();
      auto info = gpu->TableInfo(0);
      ASSERT_TRUE(info.ok());
      ASSERT_EQ(info->row_bytes, cpu->TableInfo(0)->row_bytes) << what;
      const int64_t rb = info->row_bytes;
      EXPECT_EQ(ReadRawRows(*gpu, 50, rb), ReadRawRows(*cpu, 50, rb)) << what << ": initial rows";
      std::mt19937_64 rng(static_cast<uint64_t>(dim * 3 + q));
      for (const bool weighted : {false, true}) {
        RefLookup l;
        AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 16, kMaxBag, 50, 0, 0, weighted);
        AddRandomFeature(l, rng, 0, SR_POOLING_MEAN, 16, kMaxBag, 50, 0, dim, weighted);
        if (!weighted) AddRandomFeature(l, rng, 0, SR_POOLING_NONE, 5, 4, 50, 16, 0, false);
        const int64_t rows = 16 + (l.num_features() > 2 ? FeatureRows(l, 2) : 0);
        const int64_t cols = 2 * dim + 4;
        GuardedOutput out_cpu(rows, cols), out_gpu(rows, cols);
        ASSERT_TRUE(Forward(*cpu, l, out_cpu.tensor()).ok());
        const Status s = Forward(*gpu, l, out_gpu.tensor());
        ASSERT_TRUE(s.ok()) << s.message();
        ExpectOutputsNear(out_gpu, out_cpu, rows, cols, 1e-5, what + (weighted ? ", weighted" : ""));
      }
      // Raw rows written to both read back the same; reset restores them.
      std::vector<uint8_t> raw = ReadRawRows(*cpu, 50, rb);
      for (size_t i = 4; i < raw.size(); i += 3) raw[i] = static_cast<uint8_t>(raw[i] ^ 0x5A);
      ASSERT_TRUE(WriteRawRows(*cpu, raw, 50, rb).ok());
      ASSERT_TRUE(WriteRawRows(*gpu, raw, 50, rb).ok());
      EXPECT_EQ(ReadRawRows(*gpu, 50, rb), raw) << what;
      // Row 17 twice: both resets write its packed bytes.
      std::vector<int64_t> reset = {0, 17, 49, 17};
      Tensor reset_t(reset.data(), {kDLInt, 64, 1}, {4});
      for (const Kernel* k : {&*cpu, &*gpu}) {
        sr_kernel_rows_args r{};
        r.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
        r.rows = reset_t.get();
        ASSERT_TRUE(k->ResetRows(r).ok());
      }
      EXPECT_EQ(ReadRawRows(*gpu, 50, rb), ReadRawRows(*cpu, 50, rb)) << what << ": after a reset";
    }
  }
}

// Rows that occur about a thousand times in one call: their runs are longer
// than one warp sums alone (kLongRunOccurrences), so they are summed in
// pieces. Still equal to the CPU kernel and bit-identical from run to run.
TEST(CudaKernelOnGpu, HotRowsBackwardMatchesCpuAndIsBitIdenticalAcrossRuns) {
  REQUIRE_GPU();
  const std::vector<TableSpec> tables = {TableSpec{"hot", 8, 128}, TableSpec{"wide", 5, 600}};
  auto cpu = Create(CpuKernelRef(), tables, SR_OPTIMIZER_ROWWISE_ADAGRAD, {}, DLDevice{kDLCPU, 0});
  ASSERT_TRUE(cpu.ok());
  RefTable first;
  for (int run = 0; run < 2; ++run) {
    auto gpu = Create(CudaKernelRef(), tables, SR_OPTIMIZER_ROWWISE_ADAGRAD, {}, kGpu0);
    ASSERT_TRUE(gpu.ok());
    std::mt19937_64 rng(9);
    RefLookup l;
    AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 512, 30, 8, 0, 0, true);
    AddRandomFeature(l, rng, 1, SR_POOLING_MEAN, 512, 12, 5, 0, 128, false);
    std::vector<float> grad(512 * 728);
    std::uniform_real_distribution<float> g(-1.0f, 1.0f);
    for (float& v : grad) v = g(rng);
    std::vector<float> grad_copy = grad;
    ASSERT_TRUE(Backward(*gpu, l, grad, 728).ok());
    if (run == 0) {
      ASSERT_TRUE(Backward(*cpu, l, grad_copy, 728).ok());
      for (int32_t t = 0; t < 2; ++t) {
        ExpectTablesNear(ReadTable(*gpu, t), ReadTable(*cpu, t), 1e-5, "hot rows, table " + std::to_string(t));
      }
    }
    const RefTable now = ReadTable(*gpu, 0);
    if (run == 0) {
      first = now;
    } else {
      EXPECT_EQ(now.weights, first.weights);
      EXPECT_EQ(now.state, first.state);
    }
  }
}

}  // namespace
}  // namespace shardrec::testing
