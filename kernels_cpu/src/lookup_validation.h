// Validation of an sr_kernel_lookup_args and of the 2-D tensor a call writes
// (output) or reads (grad_output), done in full before forward or backward
// touches anything, so an error leaves the output and the tables as they
// were. The result is a Lookup: contiguous views of offsets, indices and
// weights (copied into reused buffers only when a caller passes strided 1-D
// tensors) and one FeatureWork per feature.
#pragma once

#include <cstdint>
#include <vector>

#include "shardrec/plugin_api.h"
#include "shardrec/sdk/lookup.hpp"
#include "table.h"

namespace shardrec::kernel_cpu {

using FeatureWork = sdk::LookupFeature;

// A validated lookup. Pointers are valid for the call; the vectors are
// reused between calls (the kernel keeps one Lookup).
struct Lookup {
  std::vector<FeatureWork> features;
  const int64_t* offsets = nullptr;  // [num_bags + 1]
  const int64_t* indices = nullptr;  // [nnz]
  const float* weights = nullptr;    // [nnz] or NULL
  int64_t num_bags = 0;
  int64_t nnz = 0;
  bool skip_invalid = false;  // some ids are invalid and count as absent

  std::vector<size_t> order;          // scratch of ValidatePlacement
  std::vector<int64_t> offsets_copy;  // used only for strided inputs
  std::vector<int64_t> indices_copy;
  std::vector<float> weights_copy;
};

// Checks every field and tensor of `a` (its struct size, feature arrays,
// tables, poolings, offsets, indices, weights) and fills `out`. Messages
// name the argument, the feature and the bag. Throws
// sdk::Error(SR_INVALID_ARGUMENT).
void ValidateLookup(const sr_kernel_lookup_args* a, const std::vector<Table>& tables, Lookup* out);

// Checks that every row and column `lookup` writes (or reads) lies inside a
// [rows, cols] tensor named `what`, and — when `disjoint`, for an output the
// features write in parallel — that no two features cover the same element.
// Throws SR_INVALID_ARGUMENT naming the feature(s).
void ValidatePlacement(Lookup& lookup, const std::vector<Table>& tables, int64_t rows,
                       int64_t cols, const char* what, bool disjoint);

// Applies the bounds-check mode of `a` to the validated lookup: FATAL throws
// SR_OUT_OF_RANGE naming feature, bag, position, id and table; WARNING logs
// the first offender and the count; IGNORE counts; NONE does nothing. Sets
// lookup->skip_invalid, and *a.num_invalid_ids when given
// (also before throwing). `call` names the entry in the warning.
void CheckBounds(const sr_kernel_lookup_args& a, const std::vector<Table>& tables,
                 const char* call, Lookup* lookup);

}  // namespace shardrec::kernel_cpu
