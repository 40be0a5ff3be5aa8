// Conformance checks for compute kernels: creation, option validation and
// table layout, then numeric checks against the scalar reference
// (reference_kernel.h) on small random cases — initial weights, forward
// (sum and mean, weighted and unweighted, an empty bag, two tables of
// different dims, output guards), pooling none, backward with SGD over two
// steps with repeated ids, row read/write, reset_rows, and the FATAL bounds
// check. What a kernel checks is decided by its capability attributes
// (docs/kernels.md): an absent attribute means the minimum — float32
// weights, sum pooling, SGD — and undeclared features are SKIPs. A kernel
// whose device is absent (a CUDA kernel on a CPU-only machine) reports
// UNAVAILABLE from create, which is a skip, not a failure.
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "recorder.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/reference_kernel.h"
#include "shardrec/sdk/dtype.hpp"
#include "shardrec/sdk/quantized_rows.hpp"

namespace shardrec::conformance {
namespace {

using reference::RefLookup;
using reference::RefTable;

constexpr DLDataType kF32{kDLFloat, 32, 1};
constexpr DLDataType kI64{kDLInt, 64, 1};
constexpr float kSentinel = -7777.25f;

// What the kernel declares, or the minimum when it declares nothing.
struct Capabilities {
  std::set<std::string> dtypes{"float32"};
  std::set<std::string> poolings{"sum"};
  std::set<std::string> optimizers{"sgd"};
};

Capabilities ReadCapabilities(const ComponentRef& ref) {
  Capabilities caps;
  auto read = [&](const char* name, std::set<std::string>& into) {
    if (auto items = ref.StringListAttribute(name)) into = std::set<std::string>(items->begin(), items->end());
  };
  read("weight_dtypes", caps.dtypes);
  read("poolings", caps.poolings);
  read("optimizers", caps.optimizers);
  return caps;
}

// A DLTensor over caller storage with its own shape and strides.
struct HostTensor {
  HostTensor(const void* data, DLDataType dtype, std::vector<int64_t> shape_in,
             std::vector<int64_t> strides_in = {}, uint64_t byte_offset = 0)
      : shape(std::move(shape_in)), strides(std::move(strides_in)) {
    t.data = const_cast<void*>(data);
    t.device = {kDLCPU, 0};
    t.ndim = static_cast<int>(shape.size());
    t.dtype = dtype;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = byte_offset;
  }
  HostTensor(const HostTensor&) = delete;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  DLTensor t{};
};

// sr_kernel_lookup_args over a RefLookup that outlives it.
struct LookupCall {
  LookupCall(const RefLookup& l, int32_t bounds_check)
      : offsets(l.offsets.data(), kI64, {static_cast<int64_t>(l.offsets.size())}),
        indices(l.indices.data(), kI64, {static_cast<int64_t>(l.indices.size())}),
        weights(l.per_sample_weights.data(), kF32,
                {static_cast<int64_t>(l.per_sample_weights.size())}) {
    args.struct_size = SR_STRUCT_SIZE(sr_kernel_lookup_args, stream);
    args.num_features = l.num_features();
    args.feature_table = l.feature_table.data();
    args.feature_pooling = l.feature_pooling.data();
    args.feature_bag_offsets = l.feature_bag_offsets.data();
    args.feature_output_row = l.feature_output_row.data();
    args.feature_output_col = l.feature_output_col.data();
    args.offsets = &offsets.t;
    args.indices = &indices.t;
    args.per_sample_weights = l.per_sample_weights.empty() ? nullptr : &weights.t;
    args.bounds_check = bounds_check;
    args.num_invalid_ids = &num_invalid;
  }
  HostTensor offsets, indices, weights;
  int64_t num_invalid = -1;
  sr_kernel_lookup_args args{};
};

// A [rows, cols] float32 output with padded rows (stride cols + 2) and
// guard elements before and after, all starting at kSentinel.
struct GuardedOutput {
  GuardedOutput(int64_t rows_in, int64_t cols_in)
      : rows(rows_in),
        cols(cols_in),
        storage(static_cast<size_t>(4 + rows_in * (cols_in + 2) + 4), kSentinel),
        tensor(storage.data(), kF32, {rows_in, cols_in}, {cols_in + 2, 1}, 4 * sizeof(float)) {}
  // Empty when every covered element is within tolerance of `want`
  // (kSentinel: must be untouched) and every guard is intact; else why not.
  std::string Compare(const std::vector<float>& want, const std::vector<float>& scale) const {
    std::vector<char> inside(storage.size(), 0);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const size_t k = static_cast<size_t>(4 + r * (cols + 2) + c);
        inside[k] = 1;
        const float w = want[static_cast<size_t>(r * cols + c)];
        const float got = storage[k];
        const bool ok = w == kSentinel ? got == kSentinel
                                       : std::fabs(static_cast<double>(got) - w) <=
                                             1e-4 * scale[static_cast<size_t>(r * cols + c)] + 1e-5;
        if (!ok) {
          return "output (" + std::to_string(r) + ", " + std::to_string(c) + ") is " +
                 std::to_string(got) + ", expected " +
                 (w == kSentinel ? std::string("it untouched") : std::to_string(w));
        }
      }
    }
    for (size_t k = 0; k < storage.size(); ++k) {
      if (!inside[k] && storage[k] != kSentinel) {
        return "a guard element outside the output tensor was overwritten";
      }
    }
    return {};
  }
  bool Untouched() const {
    for (float v : storage) {
      if (v != kSentinel) return false;
    }
    return true;
  }
  int64_t rows, cols;
  std::vector<float> storage;
  HostTensor tensor;
};

sr_kernel_table TableDesc(const char* name, int64_t rows, int64_t dim, DLDataType dtype,
                          uint64_t seed, int64_t row_offset, int64_t col_offset) {
  sr_kernel_table t{};
  t.struct_size = SR_STRUCT_SIZE(sr_kernel_table, global_col_offset);
  t.name = name;
  t.num_rows = rows;
  t.dim = dim;
  t.weight_dtype = dtype;
  t.init_min = -1.0;
  t.init_max = 1.0;
  t.init_seed = seed;
  t.global_row_offset = row_offset;
  t.global_col_offset = col_offset;
  return t;
}

// Reads every row of `table` (weights as floats; state when it has any).
StatusOr<RefTable> ReadTable(const Kernel& k, int32_t table) {
  auto info = k.TableInfo(table);
  if (!info.ok()) return info.status();
  RefTable t;
  t.num_rows = info->num_rows;
  t.dim = info->dim;
  t.dtype = info->weight_dtype;
  t.state_dim = info->state_dim;
  std::vector<int64_t> rows(static_cast<size_t>(t.num_rows));
  for (int64_t r = 0; r < t.num_rows; ++r) rows[static_cast<size_t>(r)] = r;
  const bool half = t.dtype.bits == 16;
  const size_t n = static_cast<size_t>(t.num_rows * t.dim);
  std::vector<float> f32(half ? 0 : n);
  std::vector<uint16_t> f16(half ? n : 0);
  t.state.resize(static_cast<size_t>(t.num_rows * t.state_dim));
  HostTensor rows_t(rows.data(), kI64, {t.num_rows});
  HostTensor w(half ? static_cast<void*>(f16.data()) : f32.data(), t.dtype, {t.num_rows, t.dim});
  HostTensor s(t.state.data(), kF32, {t.num_rows, t.state_dim});
  sr_kernel_rows_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
  a.table = table;
  a.rows = &rows_t.t;
  a.weights = &w.t;
  a.state = t.state_dim > 0 ? &s.t : nullptr;
  SR_RETURN_IF_ERROR(k.ReadRows(a));
  if (half) {
    t.weights.resize(n);
    for (size_t i = 0; i < n; ++i) t.weights[i] = reference::DecodeHalf(f16[i], t.dtype);
  } else {
    t.weights = std::move(f32);
  }
  return t;
}

std::string FirstDifference(const RefTable& got, const RefTable& want, double rel) {
  for (int64_t r = 0; r < want.num_rows; ++r) {
    for (int64_t c = 0; c < want.dim; ++c) {
      const double g = got.W(r, c), w = want.W(r, c);
      if (!(std::fabs(g - w) <= rel * std::max(1.0, std::fabs(w)))) {
        return "weight (" + std::to_string(r) + ", " + std::to_string(c) + ") is " +
               std::to_string(g) + ", expected " + std::to_string(w);
      }
    }
  }
  return {};
}

struct Reference {
  std::vector<float> values, magnitude;
};
Reference Expected(const std::vector<RefTable>& tables, const RefLookup& l, int64_t rows,
                   int64_t cols) {
  Reference e;
  e.values.assign(static_cast<size_t>(rows * cols), kSentinel);
  reference::Forward(tables, l, e.values, cols);
  std::vector<RefTable> abs_tables = tables;
  for (auto& t : abs_tables) {
    for (float& w : t.weights) w = std::fabs(w);
  }
  RefLookup abs_lookup = l;
  for (float& w : abs_lookup.per_sample_weights) w = std::fabs(w);
  e.magnitude.assign(static_cast<size_t>(rows * cols), 0.0f);
  reference::Forward(abs_tables, abs_lookup, e.magnitude, cols);
  return e;
}

Status RunForward(const Kernel& k, const RefLookup& l, GuardedOutput& out, int32_t bounds,
                  int64_t* num_invalid = nullptr) {
  LookupCall call(l, bounds);
  sr_kernel_forward_args f{};
  f.struct_size = SR_STRUCT_SIZE(sr_kernel_forward_args, output);
  f.lookup = &call.args;
  f.output = &out.tensor.t;
  Status s = k.Forward(f);
  if (num_invalid != nullptr) *num_invalid = call.num_invalid;
  return s;
}

// Bags of `lengths` with random ids below `rows` (weights in [0.5, 1.5]).
void AddFeature(RefLookup& l, std::mt19937_64& rng, int32_t table, int32_t pooling,
                const std::vector<int64_t>& lengths, int64_t rows, int64_t out_row,
                int64_t out_col, bool weighted) {
  std::vector<int64_t> ids;
  std::vector<float> weights;
  for (int64_t len : lengths) {
    for (int64_t i = 0; i < len; ++i) {
      ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(rows)));
      if (weighted) weights.push_back(0.5f + static_cast<float>(rng() % 1000) / 1000.0f);
    }
  }
  l.AddFeature(table, pooling, lengths, ids, out_row, out_col, weights);
}

// Forward of `l` into a guarded [rows, cols] output equals the reference
// over `tables` (bounds check FATAL).
void CheckForward(const Kernel& k, const std::vector<RefTable>& tables, const RefLookup& l, int64_t rows,
                  int64_t cols, const std::string& what, Recorder& rec) {
  GuardedOutput out(rows, cols);
  if (!rec.ExpectOk(RunForward(k, l, out, SR_BOUNDS_CHECK_FATAL), what)) return;
  const Reference e = Expected(tables, l, rows, cols);
  const std::string diff = out.Compare(e.values, e.magnitude);
  rec.Expect(diff.empty(), what, diff);
}

// Forward on tables t0 (dim 5) and t1 (dim 3) with `pooling`: feature 0 on
// t0 (4 bags, the second empty), feature 1 on t1 (3 bags) at column 6,
// into a [rows, 9] output whose column 5 nobody writes.
void CheckPooledForward(const Kernel& k, const std::vector<RefTable>& tables, int32_t pooling,
                        bool weighted, const std::string& what, Recorder& rec) {
  std::mt19937_64 rng(static_cast<uint64_t>(pooling * 2 + weighted));
  RefLookup l;
  AddFeature(l, rng, 0, pooling, {3, 0, 5, 1}, tables[0].num_rows, 0, 0, weighted);
  AddFeature(l, rng, 1, pooling, {2, 4, 2}, tables[1].num_rows, 1, 6, weighted);
  CheckForward(k, tables, l, 5, 9, what, rec);
}

// A quantized table's descriptor (ABI 1.4): uint8 rows of kind `q`.
sr_kernel_table QuantizedDesc(const char* name, int64_t rows, int64_t dim, uint64_t seed, int64_t row_offset,
                              int64_t col_offset, sdk::RowQuantization q) {
  sr_kernel_table d = TableDesc(name, rows, dim, DLDataType{kDLUInt, 8, 1}, seed, row_offset, col_offset);
  d.struct_size = SR_STRUCT_SIZE(sr_kernel_table, row_quantization);
  d.row_quantization = static_cast<int32_t>(q);
  return d;
}

// The rows a quantized table starts with: the SDK's float32 initial weights
// of its descriptor, quantized by sdk::QuantizeRow.
std::vector<uint8_t> InitialQuantizedRows(const sr_kernel_table& d, sdk::RowQuantization q) {
  sr_kernel_table f32 = d;
  f32.struct_size = SR_STRUCT_SIZE(sr_kernel_table, global_col_offset);
  f32.weight_dtype = kF32;
  const RefTable initial = reference::InitialTable(f32, reference::DefaultOptimizer(SR_OPTIMIZER_NONE));
  const int64_t row_bytes = sdk::QuantRowBytes(q, d.dim);
  std::vector<uint8_t> raw(static_cast<size_t>(d.num_rows * row_bytes));
  for (int64_t r = 0; r < d.num_rows; ++r) {
    sdk::QuantizeRow(q, &initial.weights[static_cast<size_t>(r * d.dim)], d.dim, raw.data() + r * row_bytes);
  }
  return raw;
}

// Raw quantized rows as the reference's float32 table.
RefTable Dequantized(sdk::RowQuantization q, const std::vector<uint8_t>& raw, int64_t rows, int64_t dim) {
  RefTable t;
  t.num_rows = rows;
  t.dim = dim;
  t.weights.resize(static_cast<size_t>(rows * dim));
  const int64_t row_bytes = sdk::QuantRowBytes(q, dim);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < dim; ++c) t.W(r, c) = sdk::Dequantize(q, raw.data() + r * row_bytes, c);
  }
  return t;
}

// Quantized rows (ABI 1.4), for a kernel that declares `name` among its
// weight_dtypes: its initial rows are sdk::QuantizeRow of the float32
// initial weights (byte for byte), table_info reports the row size, raw rows
// round-trip, and every pooling over the dequantized rows equals the
// reference. Quantized tables are for inference: optimizer none.
void CheckQuantized(const ComponentRef& ref, const OptionList& options, DLDevice device,
                    sdk::RowQuantization q, Recorder& rec) {
  const std::string name = sdk::QuantName(q);
  const std::string tag = " (" + name + " tables)";
  const std::vector<sr_kernel_table> descs = {QuantizedDesc("q0", 23, 5, 11, 40, 3, q),
                                              QuantizedDesc("q1", 17, 3, 12, 0, 0, q)};
  auto k = Kernel::Create(ref, descs, SR_OPTIMIZER_NONE, {}, options, device);
  if (!rec.ExpectOk(k.status(), "create two " + name + " tables of dims 5 and 3 (optimizer none)")) return;
  std::vector<RefTable> tables;
  for (int32_t t = 0; t < 2; ++t) {
    const sr_kernel_table& d = descs[static_cast<size_t>(t)];
    const int64_t row_bytes = sdk::QuantRowBytes(q, d.dim);
    const std::string ttag = " (" + name + " table " + d.name + ")";
    auto info = k->TableInfo(t);
    if (!rec.ExpectOk(info.status(), "get_table_info" + ttag)) return;
    if (!rec.Expect(info->row_bytes == row_bytes && info->row_quantization == static_cast<int32_t>(q),
                    "get_table_info reports the quantized row size and kind" + ttag,
                    "row_bytes " + std::to_string(info->row_bytes) + ", expected " + std::to_string(row_bytes))) {
      return;
    }
    std::vector<int64_t> rows(static_cast<size_t>(d.num_rows));
    for (int64_t r = 0; r < d.num_rows; ++r) rows[static_cast<size_t>(r)] = r;
    std::vector<uint8_t> raw(static_cast<size_t>(d.num_rows * row_bytes), 0xAB);
    HostTensor rows_t(rows.data(), kI64, {d.num_rows});
    HostTensor w(raw.data(), DLDataType{kDLUInt, 8, 1}, {d.num_rows, row_bytes});
    sr_kernel_rows_args a{};
    a.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
    a.table = t;
    a.rows = &rows_t.t;
    a.weights = &w.t;
    if (!rec.ExpectOk(k->ReadRows(a), "read_rows of raw quantized rows" + ttag)) return;
    if (!rec.Expect(raw == InitialQuantizedRows(d, q), "initial rows are the float32 initial weights quantized by sdk::QuantizeRow" + ttag,
                    "table " + std::to_string(t) + " differs")) {
      return;
    }
    if (!rec.ExpectOk(k->WriteRows(a), "write_rows of raw quantized rows" + ttag)) return;
    tables.push_back(Dequantized(q, raw, d.num_rows, d.dim));
  }
  CheckPooledForward(*k, tables, SR_POOLING_SUM, false, "forward sum over dequantized rows" + tag, rec);
  CheckPooledForward(*k, tables, SR_POOLING_SUM, true, "forward sum with per-id weights over dequantized rows" + tag,
                     rec);
  CheckPooledForward(*k, tables, SR_POOLING_MEAN, true, "forward mean with per-id weights over dequantized rows" + tag,
                     rec);
  std::mt19937_64 rng(7);
  RefLookup l;
  AddFeature(l, rng, 1, SR_POOLING_NONE, {2, 0, 3}, 17, 0, 0, false);
  CheckForward(*k, tables, l, 5, 4, "forward pooling none over dequantized rows" + tag, rec);
  // A wide row (dim 70): whole SIMD vectors and warps of values, then a tail.
  {
    const sr_kernel_table wide = QuantizedDesc("q_wide", 9, 70, 13, 0, 0, q);
    auto kw = Kernel::Create(ref, {wide}, SR_OPTIMIZER_NONE, {}, options, device);
    const std::string what = "forward sum with per-id weights over dequantized rows of dim 70" + tag;
    if (rec.ExpectOk(kw.status(), "create an " + name + " table of dim 70")) {
      const RefTable deq = Dequantized(q, InitialQuantizedRows(wide, q), 9, 70);
      std::mt19937_64 wide_rng(3);
      RefLookup wl;
      AddFeature(wl, wide_rng, 0, SR_POOLING_SUM, {3, 1, 0, 4}, 9, 0, 0, true);
      CheckForward(*kw, {deq}, wl, 4, 70, what, rec);
    }
  }
  // Training a quantized table is refused.
  auto trained = Kernel::Create(ref, descs, SR_OPTIMIZER_SGD, {{"learning_rate", "0.1"}}, options, device);
  rec.Expect(!trained.ok() && trained.status().code() == SR_INVALID_ARGUMENT,
             "create refuses " + name + " tables with an optimizer (INVALID_ARGUMENT)",
             trained.ok() ? "it was created" : trained.status().ToString());
}

}  // namespace

void CheckKernel(const ComponentRef& ref, const OptionList& options, Recorder& rec) {
  // A GPU kernel is created on GPU 0; core stages the kit's host tensors.
  const DLDevice device = DeviceFor(ref, 0);
  const std::vector<sr_kernel_table> one = {TableDesc("conformance_table", 8, 4, kF32, 1, 0, 0)};
  auto created = Kernel::Create(ref, one, SR_OPTIMIZER_SGD, {}, options, device);
  if (!created.ok() && (created.status().code() == SR_UNAVAILABLE ||
                        created.status().code() == SR_UNIMPLEMENTED)) {
    rec.Skip("create an 8x4 fp32 table with SGD", created.status().message());
    return;
  }
  if (!rec.ExpectOk(created.status(), "create an 8x4 fp32 table with SGD")) return;

  rec.ExpectError(Kernel::Create(ref, one, SR_OPTIMIZER_SGD, {}, UnknownOption(), device).status(),
                  SR_INVALID_ARGUMENT,
                  "create refuses an unknown option");

  auto info = created.value().TableInfo(0);
  if (rec.ExpectOk(info.status(), "get_table_info(0)")) {
    rec.Expect(info->num_rows == 8 && info->dim == 4, "table info matches the created table",
               "got " + std::to_string(info->num_rows) + "x" + std::to_string(info->dim));
  }
  rec.ExpectError(created.value().TableInfo(1).status(), SR_INVALID_ARGUMENT,
                  "get_table_info refuses a table index out of range");

  // ---- numeric checks -------------------------------------------------
  const Capabilities caps = ReadCapabilities(ref);
  const bool sgd = caps.optimizers.count("sgd") > 0;
  const int32_t optimizer = sgd ? SR_OPTIMIZER_SGD : SR_OPTIMIZER_NONE;
  if (!sgd && caps.optimizers.count("none") == 0) {
    rec.Skip("numeric checks", "the kernel declares neither optimizer sgd nor none");
    return;
  }
  const OptionList params = sgd ? OptionList{{"learning_rate", "0.25"}} : OptionList{};
  for (const DLDataType dtype : {kF32, DLDataType{kDLFloat, 16, 1}, DLDataType{kDLBfloat, 16, 1}}) {
    const std::string dtype_name = sdk::DTypeName(dtype);  // as in the weight_dtypes attribute
    const std::string tag = " (" + dtype_name + " tables)";
    if (caps.dtypes.count(dtype_name) == 0) {
      rec.Skip("forward" + tag, "weight dtype " + dtype_name + " is not declared");
      continue;
    }
    // Shards of a larger table: initial values depend on global positions.
    const std::vector<sr_kernel_table> descs = {TableDesc("t0", 23, 5, dtype, 11, 40, 3),
                                                TableDesc("t1", 17, 3, dtype, 12, 0, 0)};
    auto k = Kernel::Create(ref, descs, optimizer, params, options, device);
    if (!rec.ExpectOk(k.status(), "create two " + dtype_name + " tables of dims 5 and 3")) continue;
    std::vector<RefTable> tables;
    for (int32_t t = 0; t < 2; ++t) {
      auto read = ReadTable(*k, t);
      if (!rec.ExpectOk(read.status(), "read_rows of a whole table" + tag)) break;
      tables.push_back(std::move(read).value());
    }
    if (tables.size() != 2) continue;
    const reference::RefOptimizer ref_opt = reference::DefaultOptimizer(optimizer);
    bool initial_ok = true;
    std::string why;
    for (int32_t t = 0; t < 2 && initial_ok; ++t) {
      why = FirstDifference(tables[static_cast<size_t>(t)],
                            reference::InitialTable(descs[static_cast<size_t>(t)], ref_opt), 0.0);
      initial_ok = why.empty();
    }
    rec.Expect(initial_ok,
               "initial weights equal sdk::InitialWeight at (global row, global column)" + tag,
               why);

    CheckPooledForward(
        *k, tables, SR_POOLING_SUM, false,
        "forward sum, two tables of different dims, an empty bag, output guards" + tag, rec);
    CheckPooledForward(*k, tables, SR_POOLING_SUM, true, "forward sum with per-id weights" + tag,
                       rec);
    if (caps.poolings.count("mean")) {
      CheckPooledForward(*k, tables, SR_POOLING_MEAN, false, "forward mean" + tag, rec);
      CheckPooledForward(*k, tables, SR_POOLING_MEAN, true,
                         "forward mean with per-id weights" + tag, rec);
    } else {
      rec.Skip("forward mean" + tag, "pooling mean is not declared");
    }
    if (caps.poolings.count("none")) {
      std::mt19937_64 rng(99);
      RefLookup l;
      AddFeature(l, rng, 1, SR_POOLING_NONE, {2, 0, 3}, 17, 1, 2, false);
      AddFeature(l, rng, 0, SR_POOLING_SUM, {2, 2}, 23, 0, 6, false);
      CheckForward(*k, tables, l, 6, 11, "forward pooling none: one row per id" + tag, rec);
    } else {
      rec.Skip("forward pooling none" + tag, "pooling none is not declared");
    }
  }

  for (const auto q : {sdk::RowQuantization::kInt8, sdk::RowQuantization::kInt4, sdk::RowQuantization::kInt2}) {
    if (caps.dtypes.count(sdk::QuantName(q)) == 0) {
      rec.Skip(std::string("quantized rows (") + sdk::QuantName(q) + ")",
               std::string("weight dtype ") + sdk::QuantName(q) + " is not declared");
      continue;
    }
    if (caps.optimizers.count("none") == 0) {
      rec.Skip(std::string("quantized rows (") + sdk::QuantName(q) + ")", "optimizer none is not declared");
      continue;
    }
    CheckQuantized(ref, options, device, q, rec);
  }

  // The rest on one float32 kernel: t0 20 x 6, t1 10 x 4.
  const std::vector<sr_kernel_table> descs = {TableDesc("t0", 20, 6, kF32, 21, 0, 0),
                                              TableDesc("t1", 10, 4, kF32, 22, 0, 0)};
  auto k = Kernel::Create(ref, descs, optimizer, params, options, device);
  if (!rec.ExpectOk(k.status(), "create two float32 tables for row and bounds checks")) return;
  auto t0 = ReadTable(*k, 0);
  auto t1 = ReadTable(*k, 1);
  if (!t0.ok() || !t1.ok()) return;
  std::vector<RefTable> tables = {t0.value(), t1.value()};

  // FATAL bounds check: OUT_OF_RANGE and nothing written.
  {
    RefLookup l;
    l.AddFeature(0, SR_POOLING_SUM, {2, 2}, {1, 2, 3, 4}, 0, 0);
    l.AddFeature(1, SR_POOLING_SUM, {1, 2}, {5, 10, 6}, 0, 6);  // 10 is outside t1
    GuardedOutput out(2, 10);
    int64_t invalid = -1;
    const Status s = RunForward(*k, l, out, SR_BOUNDS_CHECK_FATAL, &invalid);
    rec.ExpectError(s, SR_OUT_OF_RANGE, "forward with an id out of range (bounds check FATAL) "
                                        "returns OUT_OF_RANGE");
    rec.Expect(out.Untouched(), "forward with an id out of range (FATAL) writes nothing",
               "the output changed");
    GuardedOutput small(1, 10);
    l.indices[4] = 7;
    rec.ExpectError(RunForward(*k, l, small, SR_BOUNDS_CHECK_FATAL), SR_INVALID_ARGUMENT,
                    "forward refuses an output too small for its bags");
    rec.Expect(small.Untouched(), "forward refusing an output writes nothing",
               "the output changed");
  }

  // Backward with SGD, two steps, an id repeated within a bag and across
  // bags and features.
  if (!k->HasBackward()) {
    rec.Skip("backward with sgd", "the kernel has no backward entry (inference only)");
  } else if (!sgd) {
    rec.Skip("backward with sgd", "optimizer sgd is not declared");
  } else {
    std::vector<RefTable> want = tables;
    reference::RefOptimizer opt = reference::DefaultOptimizer(SR_OPTIMIZER_SGD);
    opt.learning_rate = 0.25;
    Status status;
    for (int64_t step = 1; step <= 2 && status.ok(); ++step) {
      RefLookup l;
      l.AddFeature(0, SR_POOLING_SUM, {3, 2}, {7, 7, 2, 7, 3}, 0, 0,
                   {1.0f, 0.5f, 2.0f, 1.5f, 1.0f});
      l.AddFeature(0, SR_POOLING_SUM, {1}, {2}, 2, 0, {1.0f});
      l.AddFeature(1, SR_POOLING_SUM, {2}, {4, 4}, 0, 6, {1.0f, 1.0f});
      std::vector<float> grad(3 * 10);
      for (size_t i = 0; i < grad.size(); ++i)
        grad[i] = 0.1f * static_cast<float>(i % 7) - 0.3f * step;
      LookupCall call(l, SR_BOUNDS_CHECK_FATAL);
      HostTensor g(grad.data(), kF32, {3, 10});
      sr_kernel_backward_args b{};
      b.struct_size = SR_STRUCT_SIZE(sr_kernel_backward_args, learning_rate);
      b.lookup = &call.args;
      b.grad_output = &g.t;
      b.iteration = step;
      b.learning_rate = std::nan("");
      status = k->Backward(b);
      reference::Backward(want, l, grad, 10, opt, step);
    }
    if (rec.ExpectOk(status, "backward with sgd, two steps, repeated ids")) {
      std::string why;
      for (int32_t t = 0; t < 2 && why.empty(); ++t) {
        auto got = ReadTable(*k, t);
        why = got.ok() ? FirstDifference(got.value(), want[static_cast<size_t>(t)], 1e-5)
                       : got.status().ToString();
      }
      rec.Expect(why.empty(), "backward with sgd, two steps, repeated ids, matches the reference",
                 why);
    }
    auto now = ReadTable(*k, 0);
    auto now1 = ReadTable(*k, 1);
    if (now.ok() && now1.ok()) tables = {now.value(), now1.value()};
  }

  // Row I/O: write two rows, read them back; reset restores initial values.
  {
    std::vector<int64_t> rows = {3, 9};
    std::vector<float> values(2 * 6), back(2 * 6, 0.0f);
    for (size_t i = 0; i < values.size(); ++i) values[i] = 0.125f * static_cast<float>(i) - 0.5f;
    HostTensor rows_t(rows.data(), kI64, {2});
    HostTensor w(values.data(), kF32, {2, 6});
    HostTensor r(back.data(), kF32, {2, 6});
    sr_kernel_rows_args a{};
    a.struct_size = SR_STRUCT_SIZE(sr_kernel_rows_args, stream);
    a.table = 0;
    a.rows = &rows_t.t;
    a.weights = &w.t;
    const bool wrote = rec.ExpectOk(k->WriteRows(a), "write_rows");
    a.weights = &r.t;
    if (wrote && rec.ExpectOk(k->ReadRows(a), "read_rows")) {
      rec.Expect(back == values, "read_rows returns what write_rows wrote",
                 "read back differs from what was written");
    }
    a.weights = nullptr;
    if (rec.ExpectOk(k->ResetRows(a), "reset_rows")) {
      auto got = ReadTable(*k, 0);
      const RefTable initial =
          reference::InitialTable(descs[0], reference::DefaultOptimizer(optimizer));
      std::string why = got.ok() ? std::string() : got.status().ToString();
      for (int64_t row : rows) {
        for (int64_t c = 0; c < 6 && why.empty() && got.ok(); ++c) {
          if (got->W(row, c) != initial.W(row, c)) {
            why = "row " + std::to_string(row) + " column " + std::to_string(c) + " is " +
                  std::to_string(got->W(row, c)) + ", its initial value is " +
                  std::to_string(initial.W(row, c));
          }
        }
      }
      for (int64_t row = 0; row < 20 && why.empty() && got.ok(); ++row) {
        if (row == 3 || row == 9) continue;
        for (int64_t c = 0; c < 6 && why.empty(); ++c) {
          if (got->W(row, c) != tables[0].W(row, c))
            why = "reset_rows changed row " + std::to_string(row);
        }
      }
      rec.Expect(why.empty(), "reset_rows restores the initial values (sdk::InitialWeight) of "
                              "exactly the given rows", why);
    }
    std::vector<int64_t> outside = {20};
    HostTensor outside_t(outside.data(), kI64, {1});
    a.rows = &outside_t.t;
    a.weights = &r.t;
    r.shape[0] = 1;
    rec.ExpectError(k->ReadRows(a), SR_OUT_OF_RANGE, "read_rows refuses a row out of range");
  }
}

}  // namespace shardrec::conformance
