// libshardrec_kernel_sloppy.so: a test fixture, a small scalar float32
// kernel with three deliberate bugs, so the conformance kit's numeric checks
// are shown to fail when a kernel is wrong:
//   1. forward ignores per-id weights;
//   2. with bounds check FATAL it writes the output before noticing a bad id;
//   3. reset_rows zeroes rows instead of redrawing their initial values.
// Everything else (initial weights, unweighted sums, SGD, row I/O) is right.
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/sdk/init.hpp"
#include "shardrec/sdk/plugin.hpp"

namespace {

namespace sdk = shardrec::sdk;

class SloppyKernel {
 public:
  explicit SloppyKernel(const sr_kernel_create_args& a) : optimizer_(a.optimizer) {
    sdk::Options options(a.options, "kernel sloppy");
    options.Finish();
    sdk::Options params(a.optimizer_params, "kernel sloppy optimizer");
    lr_ = params.GetDouble("learning_rate", 0.01);
    params.Finish();
    for (size_t t = 0; t < a.num_tables; ++t) {
      const sr_kernel_table& d = a.tables[t];
      Table table{d.num_rows, d.dim, std::vector<float>(static_cast<size_t>(d.num_rows * d.dim))};
      for (int64_t r = 0; r < d.num_rows; ++r) {
        for (int64_t c = 0; c < d.dim; ++c) {
          table.w[static_cast<size_t>(r * d.dim + c)] =
              sdk::InitialWeight(d.init_seed, d.global_row_offset + r, d.global_col_offset + c,
                                 d.init_min, d.init_max);
        }
      }
      tables_.push_back(std::move(table));
    }
  }

  void TableInfo(int32_t t, sr_kernel_table_info* out) {
    if (t < 0 || static_cast<size_t>(t) >= tables_.size()) throw sdk::InvalidArgument("table");
    out->num_rows = tables_[static_cast<size_t>(t)].rows;
    out->dim = tables_[static_cast<size_t>(t)].dim;
    out->weight_dtype = {kDLFloat, 32, 1};
    out->state_dim = 0;
    out->state_dtype = {kDLFloat, 32, 1};
    out->bytes = out->num_rows * out->dim * 4;
  }

  void Forward(const sr_kernel_forward_args& a) {
    const sr_kernel_lookup_args& l = *a.lookup;
    sdk::TensorView<const int64_t, 1> offsets(l.offsets, "offsets");
    sdk::TensorView<const int64_t, 1> indices(l.indices, "indices");
    sdk::TensorView<float, 2> out(a.output, "output");
    bool bad_id = false;
    for (size_t f = 0; f < l.num_features; ++f) {
      const Table& t = tables_[static_cast<size_t>(l.feature_table[f])];
      const int64_t rows = l.feature_bag_offsets[f + 1] - l.feature_bag_offsets[f];
      if (l.feature_output_row[f] + rows > out.size(0) ||
          l.feature_output_col[f] + t.dim > out.size(1)) {
        throw sdk::InvalidArgument("output too small");
      }
      for (int64_t b = l.feature_bag_offsets[f]; b < l.feature_bag_offsets[f + 1]; ++b) {
        const int64_t len = offsets(b + 1) - offsets(b);
        for (int64_t c = 0; c < t.dim; ++c) {
          float acc = 0;
          for (int64_t i = offsets(b); i < offsets(b + 1); ++i) {
            const int64_t id = indices(i);
            if (id < 0 || id >= t.rows) {
              bad_id = true;  // bug 2: noticed, but the writing goes on
              continue;
            }
            acc += t.w[static_cast<size_t>(id * t.dim + c)];  // bug 1: no weights
          }
          if (l.feature_pooling[f] == SR_POOLING_MEAN) acc /= static_cast<float>(len > 0 ? len : 1);
          out(l.feature_output_row[f] + b - l.feature_bag_offsets[f], l.feature_output_col[f] + c) =
              acc;
        }
      }
    }
    if (bad_id && l.bounds_check == SR_BOUNDS_CHECK_FATAL)
      throw sdk::Error(SR_OUT_OF_RANGE, "bad id");
  }

  void Backward(const sr_kernel_backward_args& a) {
    if (optimizer_ != SR_OPTIMIZER_SGD) throw sdk::Error(SR_FAILED_PRECONDITION, "no optimizer");
    const sr_kernel_lookup_args& l = *a.lookup;
    sdk::TensorView<const int64_t, 1> offsets(l.offsets, "offsets");
    sdk::TensorView<const int64_t, 1> indices(l.indices, "indices");
    sdk::TensorView<const float, 1> weights(l.per_sample_weights, "per_sample_weights");
    sdk::TensorView<const float, 2> grad(a.grad_output, "grad_output");
    for (size_t f = 0; f < l.num_features; ++f) {
      Table& t = tables_[static_cast<size_t>(l.feature_table[f])];
      for (int64_t b = l.feature_bag_offsets[f]; b < l.feature_bag_offsets[f + 1]; ++b) {
        for (int64_t i = offsets(b); i < offsets(b + 1); ++i) {
          for (int64_t c = 0; c < t.dim; ++c) {
            // SGD is linear, so updating per occurrence equals summing first.
            t.w[static_cast<size_t>(indices(i) * t.dim + c)] -=
                static_cast<float>(lr_ * weights(i) *
                                   grad(l.feature_output_row[f] + b - l.feature_bag_offsets[f],
                                        l.feature_output_col[f] + c));
          }
        }
      }
    }
  }

  void ReadRows(const sr_kernel_rows_args& a) { Copy(a, true); }
  void WriteRows(const sr_kernel_rows_args& a) { Copy(a, false); }
  void ResetRows(const sr_kernel_rows_args& a) {
    Table& t = tables_[static_cast<size_t>(a.table)];
    sdk::TensorView<const int64_t, 1> rows(a.rows, "rows");
    for (int64_t i = 0; i < rows.size(0); ++i) {
      std::memset(&t.w[static_cast<size_t>(rows(i) * t.dim)], 0, sizeof(float) * t.dim);  // bug 3
    }
  }

 private:
  struct Table {
    int64_t rows;
    int64_t dim;
    std::vector<float> w;
  };

  void Copy(const sr_kernel_rows_args& a, bool read) {
    Table& t = tables_[static_cast<size_t>(a.table)];
    sdk::TensorView<const int64_t, 1> rows(a.rows, "rows");
    sdk::TensorView<float, 2> w(a.weights, "weights", {rows.size(0), t.dim});
    for (int64_t i = 0; i < rows.size(0); ++i) {
      if (rows(i) < 0 || rows(i) >= t.rows) throw sdk::Error(SR_OUT_OF_RANGE, "row out of range");
    }
    for (int64_t i = 0; i < rows.size(0); ++i) {
      for (int64_t c = 0; c < t.dim; ++c) {
        float& cell = t.w[static_cast<size_t>(rows(i) * t.dim + c)];
        if (read) {
          w(i, c) = cell;
        } else {
          cell = w(i, c);
        }
      }
    }
  }

  int32_t optimizer_;
  double lr_;
  std::vector<Table> tables_;
};

const char* const kDtypes[] = {"float32"};
const char* const kPoolings[] = {"sum", "mean"};
const char* const kOptimizers[] = {"none", "sgd"};
const sr_named_value kAttributes[] = {
    sdk::StringListAttr("weight_dtypes", kDtypes, 1),
    sdk::StringListAttr("poolings", kPoolings, 2),
    sdk::StringListAttr("optimizers", kOptimizers, 2),
};
const sr_component kComponents[] = {
    sdk::Component(SR_KIND_KERNEL, "sloppy", "0.0", "a kernel with deliberate bugs (test fixture)",
                   &sdk::KernelVtable<SloppyKernel>(), sdk::List(kAttributes))};

}  // namespace

SHARDREC_DEFINE_PLUGIN("sloppy", "0.0", kComponents)
