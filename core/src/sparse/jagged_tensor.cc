// JaggedTensor helpers (see jagged_tensor.h).
#include "shardrec/core/sparse/jagged_tensor.h"

#include <numeric>

namespace shardrec {

std::vector<int64_t> JaggedTensor::offsets() const {
  std::vector<int64_t> offsets(lengths.size() + 1, 0);
  std::partial_sum(lengths.begin(), lengths.end(), offsets.begin() + 1);
  return offsets;
}

Status JaggedTensor::Validate(const std::string& what) const {
  int64_t total = 0;
  for (size_t b = 0; b < lengths.size(); ++b) {
    if (lengths[b] < 0) {
      return InvalidArgumentError(what + ": sample " + std::to_string(b) + " has negative length " +
                                  std::to_string(lengths[b]));
    }
    total += lengths[b];
  }
  const int64_t rows = values.ndim() == 0 ? 0 : values.size(0);
  if (total != rows) {
    return InvalidArgumentError(what + ": lengths sum to " + std::to_string(total) + " but there are " +
                                std::to_string(rows) + " values");
  }
  if (weights && static_cast<int64_t>(weights->size()) != rows) {
    return InvalidArgumentError(what + ": weights have " + std::to_string(weights->size()) +
                                " entries, expected " + std::to_string(rows) + " (one per value)");
  }
  return Status::Ok();
}

}  // namespace shardrec
