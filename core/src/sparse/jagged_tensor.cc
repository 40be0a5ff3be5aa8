// JaggedTensor helpers (see jagged_tensor.h).
#include "shardrec/core/sparse/jagged_tensor.h"

#include <cstring>
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

StatusOr<Tensor> JaggedTensor::Bag(int64_t b) const {
  if (b < 0 || b >= batch_size()) {
    return InvalidArgumentError("bag " + std::to_string(b) + " is outside [0, " +
                                std::to_string(batch_size()) + ")");
  }
  const auto offs = offsets();
  std::vector<int64_t> shape = values.shape();
  const int64_t row_elems = shape[0] > 0 ? values.numel() / shape[0] : 0;
  shape[0] = lengths[b];
  Tensor slice = Tensor::Empty(values.dtype(), shape);
  const size_t row_bytes = static_cast<size_t>(row_elems) * DTypeSize(values.dtype());
  std::memcpy(slice.raw_data(), static_cast<const char*>(values.raw_data()) + offs[b] * row_bytes,
              slice.nbytes());
  return slice;
}

}  // namespace shardrec
