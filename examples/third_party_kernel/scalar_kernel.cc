// A third-party compute kernel: "scalar_example", the plainest kernel that
// honours the whole kernel contract (shardrec/abi/kernel.h). One loop per
// operation, no threads, no SIMD: it is the SDK's teaching example, and a
// reference a faster kernel can be compared with.
//
//   tables        float32 only; initial weights from sdk::InitialWeight
//   pooling       sum and mean, optional per-id weights (none: refused)
//   optimizers    none (inference only) and sgd (learning_rate, default 0.01)
//   bounds check  fatal, warning, ignore, none
//   options       none (any --plugin-opt kernel.scalar_example.* is refused)
//
// Every entry validates all of its arguments before it writes anything, so a
// refused call leaves the output and the tables as they were. Messages need
// not name the kernel: the host prefixes "kernel scalar_example: ".
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <shardrec/sdk/init.hpp>
#include <shardrec/sdk/optimizer.hpp>
#include <shardrec/sdk/plugin.hpp>

namespace {

namespace sdk = shardrec::sdk;

std::string Str(int64_t v) { return std::to_string(v); }

// ---------------------------------------------------------------------------
// Storage. ABI rule 6: large memory comes from the host's allocator (so the
// host can account for it) and goes back with the same device and size.
// Without host services (a program that never called initialize): new.
// ---------------------------------------------------------------------------
struct HostFree {
  const sr_host_api* host = nullptr;
  size_t bytes = 0;
  void operator()(float* p) const {
    if (host != nullptr) {
      host->free(host->ctx, DLDevice{kDLCPU, 0}, p, bytes, nullptr);
    } else {
      ::operator delete(p);
    }
  }
};
using Floats = std::unique_ptr<float, HostFree>;

Floats AllocateFloats(size_t count, const std::string& what) {
  const size_t bytes = count * sizeof(float);
  const sr_host_api* host = sdk::HostApi();
  if (host == nullptr || host->alloc == nullptr || host->free == nullptr) {
    return Floats(static_cast<float*>(::operator new(bytes)), HostFree{nullptr, bytes});
  }
  void* p = host->alloc(host->ctx, DLDevice{kDLCPU, 0}, bytes, alignof(float), nullptr);
  if (p == nullptr) {
    throw sdk::Error(SR_RESOURCE_EXHAUSTED,
                     "cannot allocate " + std::to_string(bytes) + " bytes for " + what);
  }
  return Floats(static_cast<float*>(p), HostFree{host, bytes});
}

// One local shard: [num_rows, dim] float32, row-major. SGD keeps no state.
struct Table {
  std::string name;  // copied: the create args are borrowed for the call
  int64_t num_rows = 0;
  int64_t dim = 0;
  double init_min = 0, init_max = 0;
  uint64_t init_seed = 0;
  int64_t row0 = 0, col0 = 0;  // global row and column of local (0, 0)
  Floats weights;

  float* Row(int64_t r) const { return weights.get() + r * dim; }

  // A shard starts with exactly what the unsharded table holds at the same
  // global (row, column): every kernel draws from the SDK's one function.
  void ResetRow(int64_t r) const {
    for (int64_t c = 0; c < dim; ++c) {
      Row(r)[c] = sdk::InitialWeight(init_seed, row0 + r, col0 + c, init_min, init_max);
    }
  }
};

void CheckSize(size_t got, size_t need, const char* what) {
  if (got < need) {
    throw sdk::InvalidArgument(std::string(what) + ": struct_size " + std::to_string(got) +
                               " is smaller than ABI 1.0's " + std::to_string(need));
  }
}

void CheckLearningRate(double lr, const std::string& what) {
  if (!std::isfinite(lr) || lr < 0) {
    throw sdk::InvalidArgument(what + " must be a finite number >= 0, got " + std::to_string(lr));
  }
}

// Mean divides by the bag's length (every id counts, in range or not), at
// least 1, so an empty bag gives zeros; sum divides by nothing.
float Divisor(int32_t pooling, int64_t len) {
  return pooling == SR_POOLING_MEAN ? static_cast<float>(std::max<int64_t>(len, 1)) : 1.0f;
}

// A forward or backward call's lookup after validation: its arguments, and
// checked views of its tensors (any strides).
struct Lookup {
  const sr_kernel_lookup_args& a;
  sdk::TensorView<const int64_t, 1> offsets;               // [num_bags + 1]
  sdk::TensorView<const int64_t, 1> indices;               // [nnz]
  std::optional<sdk::TensorView<const float, 1>> weights;  // [nnz]

  float Weight(int64_t i) const { return weights ? (*weights)(i) : 1.0f; }
};

class ScalarKernel {
 public:
  // create: refuse what this kernel does not do, naming it, before
  // allocating anything. SR_UNIMPLEMENTED means "valid, but not here".
  explicit ScalarKernel(const sr_kernel_create_args& args) {
    CheckSize(args.struct_size, SR_STRUCT_SIZE(sr_kernel_create_args, options), "create args");
    // The component's options: it has none, so Finish() refuses every key.
    // (The SDK's kernel adapter leaves this to the kernel.)
    sdk::Options options(args.options, "options");
    options.Finish();

    if (args.device.device_type != kDLCPU) {
      throw sdk::Unimplemented("this kernel runs on cpu only, got device type " +
                               std::to_string(args.device.device_type));
    }
    const char* optimizer = sdk::OptimizerName(args.optimizer);
    if (std::string_view(optimizer) == "unknown") {
      throw sdk::InvalidArgument("optimizer " + std::to_string(args.optimizer) +
                                 " is not an SR_OPTIMIZER_*");
    }
    if (args.optimizer != SR_OPTIMIZER_NONE && args.optimizer != SR_OPTIMIZER_SGD) {
      throw sdk::Unimplemented(std::string("optimizer ") + optimizer +
                               " is not supported by this kernel (supported: none, sgd)");
    }
    optimizer_ = args.optimizer;
    // Hyper-parameters: sgd reads learning_rate; Finish() refuses the rest
    // (under optimizer none: every one).
    sdk::Options params(args.optimizer_params, std::string("optimizer ") + optimizer);
    if (optimizer_ == SR_OPTIMIZER_SGD) {
      learning_rate_ = params.GetDouble("learning_rate", 0.01);
      CheckLearningRate(learning_rate_, "optimizer sgd: learning_rate");
    }
    params.Finish();

    if (args.num_tables > 0 && args.tables == nullptr) {
      throw sdk::InvalidArgument("num_tables is " + std::to_string(args.num_tables) +
                                 " but tables is NULL");
    }
    for (size_t i = 0; i < args.num_tables; ++i) CheckTable(args.tables[i], i);

    // Everything is valid: allocate and initialise.
    tables_.reserve(args.num_tables);
    for (size_t i = 0; i < args.num_tables; ++i) {
      const sr_kernel_table& d = args.tables[i];
      Table t;
      t.name = d.name != nullptr ? d.name : "table " + std::to_string(i);
      t.num_rows = d.num_rows;
      t.dim = d.dim;
      t.init_min = d.init_min;
      t.init_max = d.init_max;
      t.init_seed = d.init_seed;
      t.row0 = d.global_row_offset;
      t.col0 = d.global_col_offset;
      t.weights = AllocateFloats(static_cast<size_t>(d.num_rows * d.dim), "table '" + t.name + "'");
      for (int64_t r = 0; r < t.num_rows; ++r) t.ResetRow(r);
      tables_.push_back(std::move(t));
    }
  }

  // The host sets out->struct_size; in ABI 1.0 every field is required.
  void TableInfo(int32_t table, sr_kernel_table_info* out) const {
    const Table& t = GetTable(table);
    CheckSize(out->struct_size, SR_STRUCT_SIZE(sr_kernel_table_info, bytes), "out");
    out->num_rows = t.num_rows;
    out->dim = t.dim;
    out->weight_dtype = sdk::DTypeOf<float>();
    out->state_dim = 0;  // none and sgd keep no per-row state
    out->state_dtype = sdk::DTypeOf<float>();
    out->bytes = t.num_rows * t.dim * static_cast<int64_t>(sizeof(float));
  }

  // for f, for b in bags(f):
  //   acc = 0
  //   for i in ids(b): if indices[i] is in range: acc += w[i] * W[table(f)][indices[i]]
  //   out[row(f) + b - first_bag(f), col(f) .. col(f) + D] = acc / (mean ? max(len(b), 1) : 1)
  void Forward(const sr_kernel_forward_args& args) const {
    CheckSize(args.struct_size, SR_STRUCT_SIZE(sr_kernel_forward_args, output), "forward args");
    const sdk::TensorView<float, 2> out(args.output, "output");
    const Lookup l = Validate(args.lookup, out.size(0), out.size(1), "output", "forward");
    // Nothing has been written before this line.
    const sr_kernel_lookup_args& a = l.a;
    std::vector<float> acc;
    for (size_t f = 0; f < a.num_features; ++f) {
      const Table& t = tables_[static_cast<size_t>(a.feature_table[f])];
      acc.resize(static_cast<size_t>(t.dim));
      const int64_t first_bag = a.feature_bag_offsets[f];
      for (int64_t b = first_bag; b < a.feature_bag_offsets[f + 1]; ++b) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t i = l.offsets(b); i < l.offsets(b + 1); ++i) {
          const int64_t id = l.indices(i);
          if (id < 0 || id >= t.num_rows) continue;  // absent (see CheckBounds)
          const float w = l.Weight(i);
          for (int64_t c = 0; c < t.dim; ++c) acc[static_cast<size_t>(c)] += w * t.Row(id)[c];
        }
        const float div = Divisor(a.feature_pooling[f], l.offsets(b + 1) - l.offsets(b));
        const int64_t row = a.feature_output_row[f] + (b - first_bag);
        for (int64_t c = 0; c < t.dim; ++c) {
          out(row, a.feature_output_col[f] + c) = acc[static_cast<size_t>(c)] / div;
        }
      }
    }
  }

  // Backward fused with SGD, deterministic: first the gradient of every
  // touched row is summed over all its occurrences in the call (in
  // occurrence order), then each row is updated once:
  //   g[t][r] = sum over ids i == r: w[i] / (mean ? max(len, 1) : 1) * grad[row(f, b), col(f) ..]
  //   W[t][r] -= lr * g[t][r]
  void Backward(const sr_kernel_backward_args& args) {
    if (optimizer_ == SR_OPTIMIZER_NONE) {
      throw sdk::Error(SR_FAILED_PRECONDITION,
                       "the kernel was created with optimizer none (inference only)");
    }
    CheckSize(args.struct_size, SR_STRUCT_SIZE(sr_kernel_backward_args, learning_rate),
              "backward args");
    // NaN: the learning rate given at create.
    const double lr = std::isnan(args.learning_rate) ? learning_rate_ : args.learning_rate;
    CheckLearningRate(lr, "learning_rate");
    const sdk::TensorView<const float, 2> grad(args.grad_output, "grad_output");
    const Lookup l = Validate(args.lookup, grad.size(0), grad.size(1), "grad_output", "backward");

    const sr_kernel_lookup_args& a = l.a;
    std::map<std::pair<int32_t, int64_t>, std::vector<float>> sums;  // (table, row) -> gradient
    for (size_t f = 0; f < a.num_features; ++f) {
      const int32_t ti = a.feature_table[f];
      const Table& t = tables_[static_cast<size_t>(ti)];
      const int64_t first_bag = a.feature_bag_offsets[f];
      for (int64_t b = first_bag; b < a.feature_bag_offsets[f + 1]; ++b) {
        const float div = Divisor(a.feature_pooling[f], l.offsets(b + 1) - l.offsets(b));
        const int64_t row = a.feature_output_row[f] + (b - first_bag);
        for (int64_t i = l.offsets(b); i < l.offsets(b + 1); ++i) {
          const int64_t id = l.indices(i);
          if (id < 0 || id >= t.num_rows) continue;  // absent ids get no gradient
          std::vector<float>& g = sums[{ti, id}];
          g.resize(static_cast<size_t>(t.dim), 0.0f);
          const float coef = l.Weight(i) / div;
          for (int64_t c = 0; c < t.dim; ++c) {
            g[static_cast<size_t>(c)] += coef * grad(row, a.feature_output_col[f] + c);
          }
        }
      }
    }
    const float step = static_cast<float>(lr);
    for (const auto& [key, g] : sums) {
      float* w = tables_[static_cast<size_t>(key.first)].Row(key.second);
      for (size_t c = 0; c < g.size(); ++c) w[c] -= step * g[c];
    }
  }

  // Rows calls: rows int64 [n] local rows, weights float32 [n, dim] and
  // state float32 [n, 0] (sgd has none); weights and state may be NULL.
  void ReadRows(const sr_kernel_rows_args& a) const {
    const auto [t, rows] = CheckRows(a);
    if (a.weights == nullptr) return;
    const sdk::TensorView<float, 2> w(a.weights, "weights", {rows.size(0), t.dim});
    for (int64_t k = 0; k < rows.size(0); ++k) {
      for (int64_t c = 0; c < t.dim; ++c) w(k, c) = t.Row(rows(k))[c];
    }
  }

  // A row listed twice gets the last of its values.
  void WriteRows(const sr_kernel_rows_args& a) {
    const auto [t, rows] = CheckRows(a);
    if (a.weights == nullptr) return;
    const sdk::TensorView<const float, 2> w(a.weights, "weights", {rows.size(0), t.dim});
    for (int64_t k = 0; k < rows.size(0); ++k) {
      for (int64_t c = 0; c < t.dim; ++c) t.Row(rows(k))[c] = w(k, c);
    }
  }

  // Weights as at creation; optimizer state: none to zero. `weights` is
  // not read.
  void ResetRows(const sr_kernel_rows_args& a) {
    const auto [t, rows] = CheckRows(a);
    for (int64_t k = 0; k < rows.size(0); ++k) t.ResetRow(rows(k));
  }

 private:
  static void CheckTable(const sr_kernel_table& d, size_t i) {
    std::string where = "table " + std::to_string(i);
    CheckSize(d.struct_size, SR_STRUCT_SIZE(sr_kernel_table, global_col_offset), where.c_str());
    if (d.name != nullptr) where += " ('" + std::string(d.name) + "')";
    if (!sdk::SameDType(d.weight_dtype, sdk::DTypeOf<float>())) {
      throw sdk::Unimplemented(where + ": weight dtype " + sdk::DTypeName(d.weight_dtype) +
                               " is not supported by this kernel (supported: float32)");
    }
    if (d.num_rows < 0 || d.dim <= 0) {
      throw sdk::InvalidArgument(where + ": shape " + Str(d.num_rows) + " x " + Str(d.dim) +
                                 " (rows must be >= 0 and dim > 0)");
    }
    if (d.num_rows > std::numeric_limits<int64_t>::max() / 4 / d.dim) {
      throw sdk::Error(SR_RESOURCE_EXHAUSTED, where + ": " + Str(d.num_rows) + " x " + Str(d.dim) +
                                                  " floats cannot be addressed");
    }
    if (!std::isfinite(d.init_min) || !std::isfinite(d.init_max) || d.init_min > d.init_max) {
      throw sdk::InvalidArgument(where + ": init range [" + std::to_string(d.init_min) + ", " +
                                 std::to_string(d.init_max) + "] is not a finite interval");
    }
    if (d.global_row_offset < 0 || d.global_col_offset < 0) {
      throw sdk::InvalidArgument(where + ": global_row_offset and global_col_offset must be >= 0");
    }
  }

  const Table& GetTable(int32_t table) const {
    if (table < 0 || static_cast<size_t>(table) >= tables_.size()) {
      throw sdk::InvalidArgument("table " + Str(table) + " is out of range (the kernel holds " +
                                 std::to_string(tables_.size()) + " tables)");
    }
    return tables_[static_cast<size_t>(table)];
  }

  // Checks a rows call up to its weights tensor: struct size, table, every
  // row in range (SR_OUT_OF_RANGE otherwise), the state tensor's shape.
  std::pair<const Table&, sdk::TensorView<const int64_t, 1>> CheckRows(
      const sr_kernel_rows_args& a) const {
    CheckSize(a.struct_size, SR_STRUCT_SIZE(sr_kernel_rows_args, stream), "rows args");
    const Table& t = GetTable(a.table);
    const sdk::TensorView<const int64_t, 1> rows(a.rows, "rows");
    for (int64_t k = 0; k < rows.size(0); ++k) {
      if (rows(k) < 0 || rows(k) >= t.num_rows) {
        throw sdk::Error(SR_OUT_OF_RANGE, "rows[" + Str(k) + "] = " + Str(rows(k)) +
                                              " is outside table '" + t.name + "' with " +
                                              Str(t.num_rows) + " rows");
      }
    }
    if (a.state != nullptr) {
      (void)sdk::TensorView<const float, 2>(a.state, "state", {rows.size(0), 0});
    }
    return {t, rows};
  }

  // Everything forward and backward check before touching the output or a
  // table. `rows` x `cols` is the shape of `what` (output or grad_output).
  Lookup Validate(const sr_kernel_lookup_args* ap, int64_t rows, int64_t cols, const char* what,
                  const char* call) const {
    if (ap == nullptr) throw sdk::InvalidArgument("lookup is NULL");
    const sr_kernel_lookup_args& a = *ap;
    CheckSize(a.struct_size, SR_STRUCT_SIZE(sr_kernel_lookup_args, stream), "lookup args");
    const size_t nf = a.num_features;
    if (nf > 0 && (a.feature_table == nullptr || a.feature_pooling == nullptr ||
                   a.feature_bag_offsets == nullptr || a.feature_output_row == nullptr ||
                   a.feature_output_col == nullptr)) {
      throw sdk::InvalidArgument(std::to_string(nf) + " features but a feature_* array is NULL");
    }
    // Features: bag ranges, tables, poolings. (No features: no bags, and the
    // feature_* arrays may be NULL.)
    const int64_t num_bags = nf > 0 ? a.feature_bag_offsets[nf] : 0;
    if (nf > 0 && a.feature_bag_offsets[0] != 0) {
      throw sdk::InvalidArgument("feature_bag_offsets[0] must be 0, got " +
                                 Str(a.feature_bag_offsets[0]));
    }
    for (size_t f = 0; f < nf; ++f) {
      const std::string feature = "feature " + std::to_string(f);
      if (a.feature_bag_offsets[f + 1] < a.feature_bag_offsets[f]) {
        throw sdk::InvalidArgument("feature_bag_offsets decrease at " + feature);
      }
      if (a.feature_table[f] < 0 || static_cast<size_t>(a.feature_table[f]) >= tables_.size()) {
        throw sdk::InvalidArgument(feature + ": table index " + Str(a.feature_table[f]) +
                                   " is out of range (the kernel holds " +
                                   std::to_string(tables_.size()) + " tables)");
      }
      const std::string name =
          feature + " (table '" + tables_[static_cast<size_t>(a.feature_table[f])].name + "')";
      if (a.feature_pooling[f] == SR_POOLING_NONE) {
        throw sdk::Unimplemented(name +
                                 ": pooling none (sequence) is not supported by this kernel "
                                 "(supported: sum, mean)");
      }
      if (a.feature_pooling[f] != SR_POOLING_SUM && a.feature_pooling[f] != SR_POOLING_MEAN) {
        throw sdk::InvalidArgument(name + ": pooling " + Str(a.feature_pooling[f]) +
                                   " is not an SR_POOLING_*");
      }
    }

    // Tensors (TensorView checks device, dtype, rank, extents, data).
    Lookup l{a, sdk::TensorView<const int64_t, 1>(a.offsets, "offsets", {num_bags + 1}),
             sdk::TensorView<const int64_t, 1>(a.indices, "indices"), std::nullopt};
    const int64_t nnz = l.indices.size(0);
    l.weights = sdk::OptionalTensorView<const float, 1>(a.per_sample_weights, "per_sample_weights", {nnz});
    // Offsets start at 0, never decrease, end at nnz.
    if (l.offsets(0) != 0) {
      throw sdk::InvalidArgument("offsets[0] must be 0, got " + Str(l.offsets(0)));
    }
    for (int64_t b = 0; b < num_bags; ++b) {
      if (l.offsets(b + 1) < l.offsets(b)) {
        throw sdk::InvalidArgument("offsets decrease at bag " + Str(b) + " (" + Str(l.offsets(b)) +
                                   " then " + Str(l.offsets(b + 1)) + ")");
      }
    }
    if (l.offsets(num_bags) != nnz) {
      throw sdk::InvalidArgument("offsets end at " + Str(l.offsets(num_bags)) +
                                 " but indices has " + Str(nnz) + " values");
    }
    // Placement: each feature's block of rows and columns lies inside `what`.
    for (size_t f = 0; f < nf; ++f) {
      const Table& t = tables_[static_cast<size_t>(a.feature_table[f])];
      const int64_t n = a.feature_bag_offsets[f + 1] - a.feature_bag_offsets[f];
      const int64_t r = a.feature_output_row[f], c = a.feature_output_col[f];
      if (n > 0 && (r < 0 || c < 0 || r > rows - n || c > cols - t.dim)) {
        throw sdk::InvalidArgument("feature " + std::to_string(f) + " (table '" + t.name +
                                   "') covers " + what + " rows [" + Str(r) + ", " + Str(r + n) +
                                   ") and columns [" + Str(c) + ", " + Str(c + t.dim) +
                                   "), outside " + what + " of shape [" + Str(rows) + ", " +
                                   Str(cols) + "]");
      }
    }
    CheckBounds(l, call);
    return l;
  }

  // Ids outside [0, num_rows) of their table: FATAL refuses the call with
  // SR_OUT_OF_RANGE naming feature, bag and id; WARNING logs the first and
  // treats them all as absent; IGNORE treats them as absent silently; NONE:
  // the caller promised there are none, so nothing is counted (the loops
  // still never read outside a table). *num_invalid_ids gets the count.
  void CheckBounds(const Lookup& l, const char* call) const {
    const sr_kernel_lookup_args& a = l.a;
    if (a.bounds_check < SR_BOUNDS_CHECK_FATAL || a.bounds_check > SR_BOUNDS_CHECK_NONE) {
      throw sdk::InvalidArgument("bounds_check " + Str(a.bounds_check) +
                                 " is not an SR_BOUNDS_CHECK_*");
    }
    if (a.num_invalid_ids != nullptr) *a.num_invalid_ids = 0;
    if (a.bounds_check == SR_BOUNDS_CHECK_NONE) return;
    int64_t count = 0;
    std::string first;
    for (size_t f = 0; f < a.num_features; ++f) {
      const Table& t = tables_[static_cast<size_t>(a.feature_table[f])];
      const int64_t first_bag = a.feature_bag_offsets[f];
      for (int64_t b = first_bag; b < a.feature_bag_offsets[f + 1]; ++b) {
        for (int64_t i = l.offsets(b); i < l.offsets(b + 1); ++i) {
          const int64_t id = l.indices(i);
          if (id >= 0 && id < t.num_rows) continue;
          if (count++ == 0) {
            first = "feature " + std::to_string(f) + " (table '" + t.name + "'), bag " +
                    Str(b - first_bag) + ", position " + Str(i - l.offsets(b)) + ": id " + Str(id) +
                    " is out of range for table '" + t.name + "' with " + Str(t.num_rows) + " rows";
          }
        }
      }
    }
    if (a.num_invalid_ids != nullptr) *a.num_invalid_ids = count;
    if (count == 0) return;
    if (a.bounds_check == SR_BOUNDS_CHECK_FATAL) {
      throw sdk::Error(SR_OUT_OF_RANGE, first + " (" + Str(count) +
                                            " ids out of range in this call; nothing was written)");
    }
    if (a.bounds_check == SR_BOUNDS_CHECK_WARNING) {
      sdk::Log(SR_LOG_WARN, "kernel scalar_example",
               std::string(call) + ": " + Str(count) +
                   " ids out of range, treated as absent; the first: " + first);
    }
  }

  std::vector<Table> tables_;
  int32_t optimizer_ = SR_OPTIMIZER_NONE;
  double learning_rate_ = 0.01;
};

// Capabilities: static (the loader reads them before initialize), shown by
// `shardrec plugins list`; the conformance kit checks what is declared here
// and skips the rest. Names and meanings: docs/abi.md.
const char* const kDevices[] = {"cpu"};
const char* const kWeightDtypes[] = {"float32"};
const char* const kPoolings[] = {"sum", "mean"};
const char* const kOptimizers[] = {"none", "sgd"};
const char* const kStateDims[] = {"none=0", "sgd=0"};  // state values per row
const char* const kBoundsChecks[] = {"fatal", "warning", "ignore", "none"};

const sr_named_value kAttributes[] = {
    sdk::StringListAttr("devices", kDevices, 1),
    sdk::StringListAttr("weight_dtypes", kWeightDtypes, 1),
    sdk::StringListAttr("poolings", kPoolings, 2),
    sdk::StringListAttr("optimizers", kOptimizers, 2),
    sdk::StringListAttr("optimizer_state_dim", kStateDims, 2),
    sdk::BoolAttr("deterministic_backward", true),
    sdk::StringListAttr("bounds_check_modes", kBoundsChecks, 4),
    sdk::StringListAttr("options", nullptr, 0),  // accepts no --plugin-opt keys
};

const sr_component kComponents[] = {
    sdk::Component(SR_KIND_KERNEL, "scalar_example", "1.0",
                   "plain scalar CPU kernel (float32; sum, mean; sgd): the SDK's teaching example",
                   &sdk::KernelVtable<ScalarKernel>(), sdk::List(kAttributes))};

}  // namespace

// The library's one exported symbol; the name matches
// libshardrec_kernel_scalar_example.so.
SHARDREC_DEFINE_PLUGIN("scalar_example", "1.0", kComponents)
