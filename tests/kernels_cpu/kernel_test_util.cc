// Helpers of the CPU-kernel tests (kernel_test_util.h).
#include "kernel_test_util.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>

#include "hwy/targets.h"
#include "shardrec/core/plugin_registry.h"

namespace shardrec::testing {
namespace {

// SHARDREC_TEST_HWY_TARGET=AVX3|AVX2|SSE4|EMU128 makes the plugin's SIMD code
// run on that target: libhwy is one shared library for the test and the
// plugin, so its chosen target is the plugin's too. Without it every target
// but the machine's best would go untested. A target this CPU lacks skips
// the whole run.
class ForcedSimdTarget : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* name = std::getenv("SHARDREC_TEST_HWY_TARGET");
    if (name == nullptr) return;
    const std::string want = name;
    int64_t target = 0;
    for (int64_t t :
         {int64_t{HWY_AVX3}, int64_t{HWY_AVX2}, int64_t{HWY_SSE4}, int64_t{HWY_EMU128}}) {
      if (want == hwy::TargetName(t)) target = t;
    }
    ASSERT_NE(target, 0) << "unknown SHARDREC_TEST_HWY_TARGET " << want;
    if ((hwy::SupportedTargets() & target) == 0) GTEST_SKIP() << "this CPU lacks " << want;
    hwy::SetSupportedTargetsForTest(target);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    ASSERT_EQ(hwy::SupportedTargets(), target);
  }
};
[[maybe_unused]] ::testing::Environment* const kForcedSimdTarget =
    ::testing::AddGlobalTestEnvironment(new ForcedSimdTarget);

// One registry for the whole process, never destroyed: kernels created by
// tests hold their library alive anyway, and tearing the plugin down during
// static destruction would race with oneTBB's own teardown.
struct Plugins {
  HostServices services;
  PluginRegistry registry{&services};
};
Plugins& Registry() {
  static Plugins* plugins = new Plugins;
  return *plugins;
}

}  // namespace

std::string DTypeLabel(DLDataType t) {
  if (t.code == kDLBfloat) return "bf16";
  return t.bits == 16 ? "f16" : "f32";
}

ComponentRef LoadComponent(const std::string& path, int32_t kind, const std::string& name) {
  Plugins& p = Registry();
  auto found = p.registry.Find(kind, name);
  if (found.ok()) return found.value();
  Status s = p.registry.LoadLibrary(path);
  if (!s.ok()) {
    ADD_FAILURE() << s.ToString();
    std::abort();
  }
  found = p.registry.Find(kind, name);
  if (!found.ok()) {
    ADD_FAILURE() << found.status().ToString();
    std::abort();
  }
  return found.value();
}

const ComponentRef& CpuKernelRef() {
  static const ComponentRef ref = LoadComponent(
      (std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_kernel_cpu.so").string(),
      SR_KIND_KERNEL, "cpu");
  return ref;
}

Tensor::Tensor(const void* data, DLDataType dtype, std::vector<int64_t> shape,
               std::vector<int64_t> strides, DLDevice device, uint64_t byte_offset)
    : shape_(std::move(shape)), strides_(std::move(strides)) {
  t_.data = const_cast<void*>(data);
  t_.device = device;
  t_.ndim = static_cast<int>(shape_.size());
  t_.dtype = dtype;
  t_.shape = shape_.data();
  t_.strides = strides_.empty() ? nullptr : strides_.data();
  t_.byte_offset = byte_offset;
}

std::vector<sr_kernel_table> Describe(const std::vector<TableSpec>& specs) {
  std::vector<sr_kernel_table> out;
  for (const TableSpec& s : specs) {
    sr_kernel_table t{};
    // v1.0's size unless the table is quantized (1.4): older hosts' tables
    // keep being exercised.
    t.struct_size = s.row_quantization != SR_ROW_QUANT_NONE ? SR_STRUCT_SIZE(sr_kernel_table, row_quantization)
                                                            : SR_STRUCT_SIZE(sr_kernel_table, global_col_offset);
    t.row_quantization = s.row_quantization;
    t.name = s.name.c_str();
    t.num_rows = s.rows;
    t.dim = s.dim;
    t.weight_dtype = s.dtype;
    t.init_min = s.init_min;
    t.init_max = s.init_max;
    t.init_seed = s.seed;
    t.global_row_offset = s.global_row_offset;
    t.global_col_offset = s.global_col_offset;
    out.push_back(t);
  }
  return out;
}

StatusOr<Kernel> CreateKernel(const std::vector<TableSpec>& tables, int32_t optimizer,
                              const OptionList& params, const OptionList& options) {
  return Kernel::Create(CpuKernelRef(), Describe(tables), optimizer, params, options);
}

reference::RefOptimizer RefOptimizerFor(int32_t optimizer, const OptionList& params) {
  reference::RefOptimizer o = reference::DefaultOptimizer(optimizer);
  for (const auto& [key, value] : params.items()) {
    const double v = std::stod(value);
    if (key == "learning_rate") o.learning_rate = v;
    if (key == "eps") o.eps = v;
    if (key == "beta1") o.beta1 = v;
    if (key == "beta2") o.beta2 = v;
    if (key == "weight_decay") o.weight_decay = v;
    if (key == "initial_accumulator_value") o.initial_accumulator_value = v;
  }
  return o;
}

LookupArgs::LookupArgs(const reference::RefLookup& l, int32_t bounds_check)
    : offsets(l.offsets.data(), DLDataType{kDLInt, 64, 1}, {static_cast<int64_t>(l.offsets.size())}),
      indices(l.indices.data(), DLDataType{kDLInt, 64, 1}, {static_cast<int64_t>(l.indices.size())}) {
  if (!l.per_sample_weights.empty()) {
    weights.emplace(l.per_sample_weights.data(), kF32,
                    std::vector<int64_t>{static_cast<int64_t>(l.per_sample_weights.size())});
  }
  args.struct_size = SR_STRUCT_SIZE(sr_kernel_lookup_args, stream);
  args.num_features = l.num_features();
  args.feature_table = l.feature_table.data();
  args.feature_pooling = l.feature_pooling.data();
  args.feature_bag_offsets = l.feature_bag_offsets.data();
  args.feature_output_row = l.feature_output_row.data();
  args.feature_output_col = l.feature_output_col.data();
  args.offsets = offsets.get();
  args.indices = indices.get();
  args.per_sample_weights = weights ? weights->get() : nullptr;
  args.bounds_check = bounds_check;
  args.num_invalid_ids = &num_invalid;
}

GuardedOutput::GuardedOutput(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride,
                             int64_t lead)
    : rows_(rows),
      cols_(cols),
      row_stride_(row_stride < 0 ? cols * col_stride : row_stride),
      col_stride_(col_stride),
      lead_(lead),
      storage_(static_cast<size_t>(
                   lead + 7 +
                   (rows > 0 && cols > 0 ? (rows - 1) * row_stride_ + (cols - 1) * col_stride + 1
                                         : 0)),
               kSentinel),
      tensor_(storage_.data(), kF32, {rows, cols}, {row_stride_, col_stride_}, {kDLCPU, 0},
              static_cast<uint64_t>(lead) * sizeof(float)) {}

bool GuardedOutput::Untouched() const {
  for (float v : storage_) {
    if (std::memcmp(&v, &kSentinel, sizeof v) != 0) return false;
  }
  return true;
}

::testing::AssertionResult GuardedOutput::Matches(const std::vector<float>& expected,
                                                  const std::vector<float>& scale,
                                                  double rel_tol) const {
  std::vector<char> inside(storage_.size(), 0);
  int failures = 0;
  std::string report;
  for (int64_t r = 0; r < rows_; ++r) {
    for (int64_t c = 0; c < cols_; ++c) {
      const size_t k = static_cast<size_t>(lead_ + r * row_stride_ + c * col_stride_);
      inside[k] = 1;
      const float want = expected[static_cast<size_t>(r * cols_ + c)];
      const float got = storage_[k];
      bool ok;
      if (want == kSentinel) {
        ok = std::memcmp(&got, &kSentinel, sizeof got) == 0;
      } else {
        const double tol = rel_tol * scale[static_cast<size_t>(r * cols_ + c)] + 1e-6;
        ok = std::fabs(static_cast<double>(got) - want) <= tol;
      }
      if (!ok && ++failures <= 5) {
        report += " (" + std::to_string(r) + ", " + std::to_string(c) + "): got " +
                  std::to_string(got) + " want " +
                  (want == kSentinel ? std::string("untouched") : std::to_string(want)) + ";";
      }
    }
  }
  for (size_t k = 0; k < storage_.size(); ++k) {
    if (!inside[k] && std::memcmp(&storage_[k], &kSentinel, sizeof(float)) != 0 &&
        ++failures <= 5) {
      report += " guard element " + std::to_string(k) + " was overwritten;";
    }
  }
  if (failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << failures << " mismatches:" << report;
}

ExpectedOutput ReferenceOutput(const std::vector<reference::RefTable>& tables,
                               const reference::RefLookup& lookup, int64_t rows, int64_t cols) {
  ExpectedOutput e;
  e.values.assign(static_cast<size_t>(rows * cols), GuardedOutput::kSentinel);
  reference::Forward(tables, lookup, e.values, cols);
  std::vector<reference::RefTable> abs_tables = tables;
  for (auto& t : abs_tables) {
    for (float& w : t.weights) w = std::fabs(w);
  }
  reference::RefLookup abs_lookup = lookup;
  for (float& w : abs_lookup.per_sample_weights) w = std::fabs(w);
  e.magnitude.assign(static_cast<size_t>(rows * cols), 0.0f);
  reference::Forward(abs_tables, abs_lookup, e.magnitude, cols);
  return e;
}

Status Forward(const Kernel& k, const reference::RefLookup& l, DLTensor* out,
               int32_t bounds_check, int64_t* num_invalid) {
  LookupArgs la(l, bounds_check);
  sr_kernel_forward_args f{};
  f.struct_size = SR_STRUCT_SIZE(sr_kernel_forward_args, output);
  f.lookup = &la.args;
  f.output = out;
  Status s = k.Forward(f);
  if (num_invalid != nullptr) *num_invalid = la.num_invalid;
  return s;
}

Status Backward(const Kernel& k, const reference::RefLookup& l, std::vector<float>& grad,
                int64_t cols, int64_t iteration, double learning_rate, int32_t bounds_check) {
  LookupArgs la(l, bounds_check);
  Tensor g(grad.data(), kF32, {static_cast<int64_t>(grad.size()) / cols, cols});
  sr_kernel_backward_args b{};
  b.struct_size = SR_STRUCT_SIZE(sr_kernel_backward_args, learning_rate);
  b.lookup = &la.args;
  b.grad_output = g.get();
  b.iteration = iteration;
  b.learning_rate = learning_rate;
  return k.Backward(b);
}

namespace {
// read_rows (write = false) or write_rows of raw rows [0, rows) of table 0.
Status RawRows(const Kernel& k, const void* raw, int64_t rows, int64_t row_bytes, bool write) {
  const std::vector<int64_t> ids = Iota(rows);
  Tensor rows_t(ids.data(), DLDataType{kDLInt, 64, 1}, {rows});
  Tensor w(raw, DLDataType{kDLUInt, 8, 1}, {rows, row_bytes});
  sr_kernel_rows_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
  a.rows = rows_t.get();
  a.weights = w.get();
  return write ? k.WriteRows(a) : k.ReadRows(a);
}
}  // namespace

std::vector<uint8_t> ReadRawRows(const Kernel& k, int64_t rows, int64_t row_bytes) {
  std::vector<uint8_t> raw(static_cast<size_t>(rows * row_bytes), 0xAB);
  const Status s = RawRows(k, raw.data(), rows, row_bytes, /*write=*/false);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return raw;
}

Status WriteRawRows(const Kernel& k, const std::vector<uint8_t>& raw, int64_t rows, int64_t row_bytes) {
  return RawRows(k, raw.data(), rows, row_bytes, /*write=*/true);
}

reference::RefTable ReadTable(const Kernel& k, int32_t table) {
  reference::RefTable t;
  auto info = k.TableInfo(table);
  EXPECT_TRUE(info.ok()) << info.status().ToString();
  if (!info.ok()) return t;
  t.num_rows = info->num_rows;
  t.dim = info->dim;
  t.dtype = info->weight_dtype;
  t.state_dim = info->state_dim;
  const std::vector<int64_t> rows = Iota(t.num_rows);
  Tensor rows_t(rows.data(), DLDataType{kDLInt, 64, 1}, {t.num_rows});
  const size_t n = static_cast<size_t>(t.num_rows * t.dim);
  std::vector<float> f32(t.dtype.bits == 32 ? n : 0);
  std::vector<uint16_t> f16(t.dtype.bits == 16 ? n : 0);
  t.state.resize(static_cast<size_t>(t.num_rows * t.state_dim));
  Tensor w(t.dtype.bits == 32 ? static_cast<void*>(f32.data()) : f16.data(), t.dtype,
           {t.num_rows, t.dim});
  Tensor s(t.state.data(), kF32, {t.num_rows, t.state_dim});
  sr_kernel_rows_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
  a.table = table;
  a.rows = rows_t.get();
  a.weights = w.get();
  a.state = s.get();
  Status st = k.ReadRows(a);
  EXPECT_TRUE(st.ok()) << st.ToString();
  if (t.dtype.bits == 32) {
    t.weights = f32;
  } else {
    t.weights.resize(n);
    for (size_t i = 0; i < n; ++i) t.weights[i] = reference::DecodeHalf(f16[i], t.dtype);
  }
  return t;
}

void WriteTable(const Kernel& k, int32_t table, const reference::RefTable& t) {
  const std::vector<int64_t> rows = Iota(t.num_rows);
  Tensor rows_t(rows.data(), DLDataType{kDLInt, 64, 1}, {t.num_rows});
  const size_t n = static_cast<size_t>(t.num_rows * t.dim);
  std::vector<uint16_t> f16;
  if (t.dtype.bits == 16) {
    f16.resize(n);
    for (size_t i = 0; i < n; ++i) f16[i] = reference::EncodeHalf(t.weights[i], t.dtype);
  }
  Tensor w(t.dtype.bits == 32 ? static_cast<const void*>(t.weights.data()) : f16.data(), t.dtype,
           {t.num_rows, t.dim});
  Tensor s(t.state.data(), kF32, {t.num_rows, t.state_dim});
  sr_kernel_rows_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
  a.table = table;
  a.rows = rows_t.get();
  a.weights = w.get();
  a.state = s.get();
  Status st = k.WriteRows(a);
  EXPECT_TRUE(st.ok()) << st.ToString();
}

void AddRandomFeature(reference::RefLookup& l, std::mt19937_64& rng, int32_t table,
                      int32_t pooling, int64_t bags, int64_t max_len, int64_t rows,
                      int64_t out_row, int64_t out_col, bool weighted) {
  std::uniform_int_distribution<int64_t> len(0, max_len);
  std::uniform_int_distribution<int64_t> id(0, rows - 1);
  std::uniform_real_distribution<float> w(0.5f, 1.5f);
  std::vector<int64_t> lengths, ids;
  std::vector<float> weights;
  for (int64_t b = 0; b < bags; ++b) {
    lengths.push_back(len(rng));
    for (int64_t i = 0; i < lengths.back(); ++i) {
      ids.push_back(id(rng));
      if (weighted) weights.push_back(w(rng));
    }
  }
  l.AddFeature(table, pooling, lengths, ids, out_row, out_col, weights);
}

int64_t FeatureRows(const reference::RefLookup& l, size_t f) {
  const int64_t b0 = l.feature_bag_offsets[f];
  const int64_t b1 = l.feature_bag_offsets[f + 1];
  if (l.feature_pooling[f] == SR_POOLING_NONE) {
    return l.offsets[static_cast<size_t>(b1)] - l.offsets[static_cast<size_t>(b0)];
  }
  return b1 - b0;
}

std::vector<int64_t> Iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = i;
  return v;
}

}  // namespace shardrec::testing
