// JaggedTensor: the bags of one feature — B variable-length rows stored as
// `values` (rows concatenated; 1-D ids, or [N, D] embeddings as the output
// of an EmbeddingCollection) with `lengths` [B] and optional per-value
// `weights` [N]. offsets() = [0, cumsum(lengths)] is computed on demand.
#pragma once

#include <optional>
#include <vector>

#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

struct JaggedTensor {
  Tensor values;                 // [N] or [N, D]
  std::vector<int64_t> lengths;  // [B], each >= 0, summing to N
  std::optional<std::vector<float>> weights;  // [N] when present

  int64_t batch_size() const { return static_cast<int64_t>(lengths.size()); }
  std::vector<int64_t> offsets() const;
  // Checks lengths against values (and weights), naming `what` in errors.
  Status Validate(const std::string& what) const;
};

}  // namespace shardrec
