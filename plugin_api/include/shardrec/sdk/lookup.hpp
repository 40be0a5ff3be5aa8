// shardrec plugin SDK — the host-side checks of an sr_kernel_lookup_args
// that every kernel makes the same way, wherever its tensors live: the
// struct and its feature arrays (host memory), then — once the kernel knows
// where each feature's ids start — where each feature writes. Messages name
// the argument and the feature, so CPU and CUDA kernels fail alike.
#ifndef SHARDREC_SDK_LOOKUP_HPP_
#define SHARDREC_SDK_LOOKUP_HPP_

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "shardrec/abi/kernel.h"
#include "shardrec/sdk/status.hpp"

namespace shardrec::sdk {

// One feature of a lookup, with its ids located.
struct LookupFeature {
  int32_t table = 0;
  int32_t pooling = SR_POOLING_SUM;
  int64_t bag_begin = 0;  // global bag indices [bag_begin, bag_end)
  int64_t bag_end = 0;
  int64_t id_begin = 0;   // positions in indices [id_begin, id_end)
  int64_t id_end = 0;
  int64_t out_row = 0;    // first output row and column this feature writes
  int64_t out_col = 0;

  // Output rows the feature writes: one per bag, or one per id with NONE.
  int64_t OutputRows() const {
    return pooling == SR_POOLING_NONE ? id_end - id_begin : bag_end - bag_begin;
  }
};

// sr_kernel_lookup_args::num_invalid_ids is set on every path that gets as
// far as reading the arguments, errors included.
inline void ClearInvalidCount(const sr_kernel_lookup_args* a) {
  if (a != nullptr && a->struct_size >= SR_STRUCT_SIZE(sr_kernel_lookup_args, stream) &&
      a->num_invalid_ids != nullptr) {
    *a->num_invalid_ids = 0;
  }
}

// "feature 3 (table 'items')": `table_name(t)` names a local table.
template <class TableName>
std::string FeatureName(size_t f, int32_t table, const TableName& table_name) {
  return "feature " + std::to_string(f) + " (table '" + table_name(table) + "')";
}

// Checks the struct size, the feature arrays (non-NULL, feature_bag_offsets
// starting at 0 and never decreasing), every feature's table index and
// pooling, and the bounds-check mode. Returns the number of bags. Throws
// sdk::Error(SR_INVALID_ARGUMENT).
template <class TableName>
int64_t CheckLookupFeatures(const sr_kernel_lookup_args* a, size_t num_tables,
                            const TableName& table_name) {
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
    if (t < 0 || static_cast<size_t>(t) >= num_tables) {
      throw InvalidArgument("feature " + std::to_string(f) + ": table index " + std::to_string(t) +
                            " is out of range (the kernel holds " + std::to_string(num_tables) +
                            " tables)");
    }
    const int32_t p = a->feature_pooling[f];
    if (p != SR_POOLING_SUM && p != SR_POOLING_MEAN && p != SR_POOLING_NONE) {
      throw InvalidArgument(FeatureName(f, t, table_name) + ": pooling " + std::to_string(p) +
                            " is not SUM (0), MEAN (1) or NONE (2)");
    }
  }
  return num_bags;
}

// Throws unless `mode` is one of SR_BOUNDS_CHECK_*.
inline void CheckBoundsMode(int32_t mode) {
  if (mode != SR_BOUNDS_CHECK_FATAL && mode != SR_BOUNDS_CHECK_WARNING &&
      mode != SR_BOUNDS_CHECK_IGNORE && mode != SR_BOUNDS_CHECK_NONE) {
    throw InvalidArgument("bounds_check " + std::to_string(mode) +
                          " is not FATAL (0), WARNING (1), IGNORE (2) or NONE (3)");
  }
}

// Checks that every row and column `features` write (or read) lies inside a
// [rows, cols] tensor named `what`, and — when `disjoint`, for an output the
// features write in parallel — that no two features cover the same element.
// `table_dim(t)` and `table_name(t)` describe local table t; `order` is
// scratch. Throws SR_INVALID_ARGUMENT naming the feature(s).
template <class TableDim, class TableName>
void CheckPlacement(const std::vector<LookupFeature>& features, const TableDim& table_dim,
                    const TableName& table_name, int64_t rows, int64_t cols, const char* what,
                    bool disjoint, std::vector<size_t>& order) {
  for (size_t f = 0; f < features.size(); ++f) {
    const LookupFeature& w = features[f];
    const int64_t dim = table_dim(w.table);
    const int64_t n = w.OutputRows();
    if (n == 0) continue;  // writes nothing
    if (w.out_row < 0 || w.out_col < 0 || w.out_row > rows - n || w.out_col > cols - dim) {
      throw InvalidArgument(FeatureName(f, w.table, table_name) + " covers " + what + " rows [" +
                            std::to_string(w.out_row) + ", " + std::to_string(w.out_row + n) +
                            ") and columns [" + std::to_string(w.out_col) + ", " +
                            std::to_string(w.out_col + dim) + "), outside " + what +
                            " of shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                            "]");
    }
  }
  if (!disjoint) return;
  // Sweep in column order: only features whose column ranges intersect can
  // collide (in the usual [batch, sum of dims] layout none do, so this is
  // a sort and a pass).
  order.clear();
  for (size_t f = 0; f < features.size(); ++f) {
    if (features[f].OutputRows() > 0) order.push_back(f);
  }
  auto col_end = [&](size_t f) { return features[f].out_col + table_dim(features[f].table); };
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return features[a].out_col < features[b].out_col ||
           (features[a].out_col == features[b].out_col && a < b);
  });
  for (size_t x = 0; x < order.size(); ++x) {
    const LookupFeature& a = features[order[x]];
    for (size_t y = x + 1; y < order.size() && features[order[y]].out_col < col_end(order[x]);
         ++y) {
      const LookupFeature& b = features[order[y]];
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

// The message of an out-of-range id, without the mode-specific tail:
// "feature 0 (table 't'), bag 3, position 1 (indices[13]): id 99 is out of
// range for table 't' with 50 rows".
template <class TableName>
std::string OutOfRangeMessage(size_t feature, int32_t table, const TableName& table_name,
                              int64_t bag, int64_t position_in_bag, int64_t position, int64_t id,
                              int64_t table_rows) {
  return FeatureName(feature, table, table_name) + ", bag " + std::to_string(bag) +
         ", position " + std::to_string(position_in_bag) + " (indices[" +
         std::to_string(position) + "]): id " + std::to_string(id) +
         " is out of range for table '" + table_name(table) + "' with " +
         std::to_string(table_rows) + " rows";
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_LOOKUP_HPP_
