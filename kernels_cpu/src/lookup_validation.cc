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

// Table names and dims for the SDK's checks.
struct TableName {
  const std::vector<Table>& tables;
  const std::string& operator()(int32_t t) const { return tables[static_cast<size_t>(t)].name; }
};
struct TableDim {
  const std::vector<Table>& tables;
  int64_t operator()(int32_t t) const { return tables[static_cast<size_t>(t)].dim; }
};

}  // namespace

void ValidateLookup(const sr_kernel_lookup_args* a, const std::vector<Table>& tables, Lookup* out) {
  const int64_t num_bags = sdk::CheckLookupFeatures(a, tables.size(), TableName{tables});
  const size_t num_features = a->num_features;

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
            sdk::FeatureName(f, a->feature_table[f], TableName{tables}) + ", bag " +
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
  sdk::CheckPlacement(lookup.features, TableDim{tables}, TableName{tables}, rows, cols, what,
                      disjoint, lookup.order);
}

void CheckBounds(const sr_kernel_lookup_args& a, const std::vector<Table>& tables,
                 const char* call, Lookup* lookup) {
  lookup->skip_invalid = false;
  if (a.num_invalid_ids != nullptr) *a.num_invalid_ids = 0;
  if (a.bounds_check == SR_BOUNDS_CHECK_NONE) return;
  sdk::CheckBoundsMode(a.bounds_check);
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
  const std::string where = sdk::OutOfRangeMessage(
      first_feature, w.table, TableName{tables}, bag, first_position - bag_starts[bag],
      first_position, lookup->indices[first_position], t.num_rows);
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
