// Argument validation for forward and backward (lookup_validation.h). Every
// check runs before the first write; messages name the argument, the
// feature index and the bag so a user can find the bad input.
#include "lookup_validation.h"

#include <algorithm>
#include <string>

#include "shardrec/sdk/plugin.hpp"

namespace shardrec::kernel_cpu {
namespace {

using sdk::InvalidArgument;

template <class T>
const T* Contiguous(const sdk::TensorView<const T, 1>& v, std::vector<T>& copy) {
  const int64_t n = v.size(0);
  if (n <= 1 || v.stride(0) == 1) return v.data();
  copy.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) copy[static_cast<size_t>(i)] = v(i);
  return copy.data();
}

std::string FeatureName(size_t f, const Table& t) {
  return "feature " + std::to_string(f) + " (table '" + t.name + "')";
}

}  // namespace

void ValidateLookup(const sr_kernel_lookup_args* a, const std::vector<Table>& tables, Lookup* out) {
  if (a == nullptr) throw InvalidArgument("lookup args are NULL");
  if (a->struct_size < SR_STRUCT_SIZE(sr_kernel_lookup_args, stream)) {
    throw InvalidArgument("lookup args: struct_size " + std::to_string(a->struct_size) +
                          " is smaller than sr_kernel_lookup_args v1.0 (" +
                          std::to_string(SR_STRUCT_SIZE(sr_kernel_lookup_args, stream)) + ")");
  }
  const size_t num_features = a->num_features;
  if (num_features > 0 &&
      (a->feature_table == nullptr || a->feature_pooling == nullptr ||
       a->feature_bag_offsets == nullptr || a->feature_output_row == nullptr ||
       a->feature_output_col == nullptr)) {
    throw InvalidArgument("lookup args: " + std::to_string(num_features) +
                          " features but a feature_* array is NULL");
  }
  // Feature arrays (host memory).
  int64_t num_bags = 0;
  if (a->feature_bag_offsets != nullptr) {
    if (a->feature_bag_offsets[0] != 0) {
      throw InvalidArgument("feature_bag_offsets[0] must be 0, got " +
                            std::to_string(a->feature_bag_offsets[0]));
    }
    for (size_t f = 0; f < num_features; ++f) {
      if (a->feature_bag_offsets[f + 1] < a->feature_bag_offsets[f]) {
        throw InvalidArgument("feature_bag_offsets decreases at feature " + std::to_string(f) +
                              " (" + std::to_string(a->feature_bag_offsets[f]) + " then " +
                              std::to_string(a->feature_bag_offsets[f + 1]) +
                              "): a negative number of bags");
      }
    }
    num_bags = a->feature_bag_offsets[num_features];
  }
  for (size_t f = 0; f < num_features; ++f) {
    const int32_t t = a->feature_table[f];
    if (t < 0 || static_cast<size_t>(t) >= tables.size()) {
      throw InvalidArgument("feature " + std::to_string(f) + ": table index " + std::to_string(t) +
                            " is out of range (the kernel holds " +
                            std::to_string(tables.size()) + " tables)");
    }
    const int32_t p = a->feature_pooling[f];
    if (p != SR_POOLING_SUM && p != SR_POOLING_MEAN && p != SR_POOLING_NONE) {
      throw InvalidArgument(FeatureName(f, tables[static_cast<size_t>(t)]) + ": pooling " +
                            std::to_string(p) + " is not SUM (0), MEAN (1) or NONE (2)");
    }
  }

  // Tensors.
  sdk::TensorView<const int64_t, 1> offsets(a->offsets, "offsets", {num_bags + 1});
  sdk::TensorView<const int64_t, 1> indices(a->indices, "indices");
  const int64_t nnz = indices.size(0);
  out->offsets = Contiguous(offsets, out->offsets_copy);
  out->indices = Contiguous(indices, out->indices_copy);
  out->weights = nullptr;
  if (a->per_sample_weights != nullptr) {
    sdk::TensorView<const float, 1> w(a->per_sample_weights, "per_sample_weights");
    if (w.size(0) != nnz) {
      throw InvalidArgument("per_sample_weights has " + std::to_string(w.size(0)) +
                            " entries, expected one per index (nnz = " + std::to_string(nnz) +
                            ")");
    }
    out->weights = Contiguous(w, out->weights_copy);
  }
  out->num_bags = num_bags;
  out->nnz = nnz;

  // Offsets: start at 0, never decrease, end at nnz.
  const int64_t* off = out->offsets;
  if (off[0] != 0) throw InvalidArgument("offsets[0] must be 0, got " + std::to_string(off[0]));
  for (size_t f = 0; f < num_features; ++f) {
    const int64_t b0 = a->feature_bag_offsets[f];
    const int64_t b1 = a->feature_bag_offsets[f + 1];
    for (int64_t b = b0; b < b1; ++b) {
      if (off[b + 1] < off[b]) {
        throw InvalidArgument(
            FeatureName(f, tables[static_cast<size_t>(a->feature_table[f])]) + ", bag " +
            std::to_string(b - b0) + ": negative length (offsets[" + std::to_string(b) +
            "] = " + std::to_string(off[b]) + " > offsets[" + std::to_string(b + 1) +
            "] = " + std::to_string(off[b + 1]) + ")");
      }
    }
  }
  if (off[num_bags] != nnz) {
    throw InvalidArgument("bag lengths sum to " + std::to_string(off[num_bags]) +
                          " but indices has " + std::to_string(nnz) + " values");
  }

  out->features.resize(num_features);
  for (size_t f = 0; f < num_features; ++f) {
    FeatureWork& w = out->features[f];
    w.table = a->feature_table[f];
    w.pooling = a->feature_pooling[f];
    w.bag_begin = a->feature_bag_offsets[f];
    w.bag_end = a->feature_bag_offsets[f + 1];
    w.id_begin = off[w.bag_begin];
    w.id_end = off[w.bag_end];
    w.out_row = a->feature_output_row[f];
    w.out_col = a->feature_output_col[f];
  }
  out->skip_invalid = false;
}

void ValidatePlacement(Lookup& lookup, const std::vector<Table>& tables, int64_t rows,
                       int64_t cols, const char* what, bool disjoint) {
  for (size_t f = 0; f < lookup.features.size(); ++f) {
    const FeatureWork& w = lookup.features[f];
    const Table& t = tables[static_cast<size_t>(w.table)];
    const int64_t n = w.OutputRows();
    if (n == 0) continue;  // writes nothing
    if (w.out_row < 0 || w.out_col < 0 || w.out_row > rows - n || w.out_col > cols - t.dim) {
      throw InvalidArgument(FeatureName(f, t) + " covers " + what + " rows [" +
                            std::to_string(w.out_row) + ", " + std::to_string(w.out_row + n) +
                            ") and columns [" + std::to_string(w.out_col) + ", " +
                            std::to_string(w.out_col + t.dim) + "), outside " + what +
                            " of shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                            "]");
    }
  }
  if (!disjoint) return;
  // Sweep in column order: only features whose column ranges intersect can
  // collide (in the usual [batch, sum of dims] layout none do, so this is
  // a sort and a pass).
  std::vector<size_t>& order = lookup.order;
  order.clear();
  for (size_t f = 0; f < lookup.features.size(); ++f) {
    if (lookup.features[f].OutputRows() > 0) order.push_back(f);
  }
  auto col_end = [&](size_t f) {
    return lookup.features[f].out_col + tables[static_cast<size_t>(lookup.features[f].table)].dim;
  };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return lookup.features[a].out_col < lookup.features[b].out_col ||
           (lookup.features[a].out_col == lookup.features[b].out_col && a < b);
  });
  for (size_t x = 0; x < order.size(); ++x) {
    const FeatureWork& a = lookup.features[order[x]];
    for (size_t y = x + 1;
         y < order.size() && lookup.features[order[y]].out_col < col_end(order[x]); ++y) {
      const FeatureWork& b = lookup.features[order[y]];
      if (a.out_row < b.out_row + b.OutputRows() && b.out_row < a.out_row + a.OutputRows()) {
        const size_t fa = std::min(order[x], order[y]);
        const size_t fb = std::max(order[x], order[y]);
        throw InvalidArgument("features " + std::to_string(fa) + " and " + std::to_string(fb) +
                              " would both write " + what + " element (" +
                              std::to_string(std::max(a.out_row, b.out_row)) + ", " +
                              std::to_string(std::max(a.out_col, b.out_col)) + ")");
      }
    }
  }
}

void CheckBounds(const sr_kernel_lookup_args& a, const std::vector<Table>& tables,
                 const char* call, Lookup* lookup) {
  lookup->skip_invalid = false;
  if (a.num_invalid_ids != nullptr) *a.num_invalid_ids = 0;
  if (a.bounds_check == SR_BOUNDS_CHECK_NONE) return;
  if (a.bounds_check != SR_BOUNDS_CHECK_FATAL && a.bounds_check != SR_BOUNDS_CHECK_WARNING &&
      a.bounds_check != SR_BOUNDS_CHECK_IGNORE) {
    throw InvalidArgument("bounds_check " + std::to_string(a.bounds_check) +
                          " is not FATAL (0), WARNING (1), IGNORE (2) or NONE (3)");
  }
  int64_t count = 0;
  size_t first_feature = 0;
  int64_t first_position = -1;
  for (size_t f = 0; f < lookup->features.size(); ++f) {
    const FeatureWork& w = lookup->features[f];
    const uint64_t rows = static_cast<uint64_t>(tables[static_cast<size_t>(w.table)].num_rows);
    for (int64_t i = w.id_begin; i < w.id_end; ++i) {
      if (static_cast<uint64_t>(lookup->indices[i]) >= rows) {
        if (count++ == 0) {
          first_feature = f;
          first_position = i;
        }
      }
    }
  }
  if (a.num_invalid_ids != nullptr) *a.num_invalid_ids = count;
  if (count == 0) return;

  const FeatureWork& w = lookup->features[first_feature];
  const Table& t = tables[static_cast<size_t>(w.table)];
  // The bag holding the first offender: the last bag starting at or before it.
  const int64_t* bag_starts = lookup->offsets + w.bag_begin;
  const int64_t bag =
      std::upper_bound(bag_starts, lookup->offsets + w.bag_end + 1, first_position) - bag_starts -
      1;
  const std::string where =
      FeatureName(first_feature, t) + ", bag " + std::to_string(bag) + ", position " +
      std::to_string(first_position - bag_starts[bag]) + " (indices[" +
      std::to_string(first_position) + "]): id " + std::to_string(lookup->indices[first_position]) +
      " is out of range for table '" + t.name + "' with " + std::to_string(t.num_rows) + " rows";
  if (a.bounds_check == SR_BOUNDS_CHECK_FATAL) {
    throw sdk::Error(SR_OUT_OF_RANGE, where + " (" + std::to_string(count) +
                                          " ids out of range in this call; nothing was written)");
  }
  if (a.bounds_check == SR_BOUNDS_CHECK_WARNING) {
    sdk::Log(SR_LOG_WARN, "kernel cpu",
             std::string(call) + ": " + std::to_string(count) +
                 " ids out of range, treated as absent; the first: " + where);
  }
  lookup->skip_invalid = true;
}

}  // namespace shardrec::kernel_cpu
