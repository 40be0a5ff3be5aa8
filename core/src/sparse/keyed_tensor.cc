// KeyedTensor construction, slicing and regrouping.
#include "shardrec/core/sparse/keyed_tensor.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <fmt/format.h>

namespace shardrec {

namespace {
// Copies columns [src_col, src_col + width) of every row of src into columns
// [dst_col, ...) of dst (both float32 2-D, same number of rows).
void CopyColumns(const Tensor& src, int64_t src_col, Tensor& dst, int64_t dst_col, int64_t width) {
  const int64_t rows = src.size(0), src_w = src.size(1), dst_w = dst.size(1);
  const float* s = src.data<float>();
  float* d = dst.data<float>();
  for (int64_t r = 0; r < rows; ++r) {
    std::memcpy(d + r * dst_w + dst_col, s + r * src_w + src_col, static_cast<size_t>(width) * sizeof(float));
  }
}
}  // namespace

StatusOr<KeyedTensor> KeyedTensor::Create(std::vector<std::string> keys, std::vector<int64_t> length_per_key,
                                          Tensor values) {
  if (keys.size() != length_per_key.size()) {
    return InvalidArgumentError(fmt::format("KeyedTensor: {} keys but {} lengths", keys.size(),
                                            length_per_key.size()));
  }
  std::set<std::string> seen;
  for (const auto& k : keys) {
    if (!seen.insert(k).second) return InvalidArgumentError("KeyedTensor: duplicate key '" + k + "'");
  }
  SR_RETURN_IF_ERROR(ExpectTensor(values, "KeyedTensor values", dtype::kFloat32, 2));
  KeyedTensor kt;
  kt.offset_per_key_.assign(keys.size() + 1, 0);
  for (size_t k = 0; k < keys.size(); ++k) {
    if (length_per_key[k] < 0) {
      return InvalidArgumentError("KeyedTensor: key '" + keys[k] + "' has a negative length");
    }
    kt.offset_per_key_[k + 1] = kt.offset_per_key_[k] + length_per_key[k];
  }
  if (values.size(1) != kt.offset_per_key_.back()) {
    return InvalidArgumentError(fmt::format("KeyedTensor: values have {} columns, the keys need {}",
                                            values.size(1), kt.offset_per_key_.back()));
  }
  kt.keys_ = std::move(keys);
  kt.length_per_key_ = std::move(length_per_key);
  kt.values_ = std::move(values);
  return kt;
}

StatusOr<KeyedTensor> KeyedTensor::FromTensors(std::vector<std::string> keys, const std::vector<Tensor>& tensors) {
  if (keys.size() != tensors.size()) {
    return InvalidArgumentError(fmt::format("KeyedTensor: {} keys but {} tensors", keys.size(), tensors.size()));
  }
  std::vector<int64_t> lengths;
  int64_t batch = tensors.empty() ? 0 : (tensors[0].ndim() == 2 ? tensors[0].size(0) : -1);
  for (size_t k = 0; k < tensors.size(); ++k) {
    SR_RETURN_IF_ERROR(ExpectTensor(tensors[k], "KeyedTensor key '" + keys[k] + "'", dtype::kFloat32, 2));
    if (tensors[k].size(0) != batch) {
      return InvalidArgumentError(fmt::format("KeyedTensor: key '{}' has {} rows, key '{}' has {}", keys[k],
                                              tensors[k].size(0), keys[0], batch));
    }
    lengths.push_back(tensors[k].size(1));
  }
  int64_t width = 0;
  for (int64_t l : lengths) width += l;
  Tensor values = Tensor::Empty(dtype::kFloat32, {batch, width});
  int64_t col = 0;
  for (size_t k = 0; k < tensors.size(); ++k) {
    CopyColumns(tensors[k], 0, values, col, lengths[k]);
    col += lengths[k];
  }
  return Create(std::move(keys), std::move(lengths), std::move(values));
}

StatusOr<Tensor> KeyedTensor::At(const std::string& key) const {
  const auto it = std::find(keys_.begin(), keys_.end(), key);
  if (it == keys_.end()) return Status(SR_NOT_FOUND, "KeyedTensor has no key '" + key + "'");
  const auto k = static_cast<size_t>(it - keys_.begin());
  Tensor out = Tensor::Empty(dtype::kFloat32, {batch_size(), length_per_key_[k]});
  CopyColumns(values_, offset_per_key_[k], out, 0, length_per_key_[k]);
  return out;
}

std::map<std::string, Tensor> KeyedTensor::ToDict() const {
  std::map<std::string, Tensor> dict;
  for (const auto& key : keys_) dict.emplace(key, At(key).value());
  return dict;
}

StatusOr<std::vector<Tensor>> KeyedTensor::Regroup(const std::vector<KeyedTensor>& kts,
                                                   const std::vector<std::vector<std::string>>& groups) {
  std::vector<Tensor> out;
  for (const auto& group : groups) {
    std::vector<std::pair<const KeyedTensor*, size_t>> where;
    int64_t width = 0, batch = -1;
    for (const auto& key : group) {
      const KeyedTensor* found = nullptr;
      size_t index = 0;
      for (const auto& kt : kts) {
        const auto it = std::find(kt.keys_.begin(), kt.keys_.end(), key);
        if (it != kt.keys_.end()) {
          found = &kt;
          index = static_cast<size_t>(it - kt.keys_.begin());
          break;
        }
      }
      if (found == nullptr) return Status(SR_NOT_FOUND, "regroup: no KeyedTensor has key '" + key + "'");
      if (batch >= 0 && found->batch_size() != batch) {
        return InvalidArgumentError("regroup: key '" + key + "' has a different batch size");
      }
      batch = found->batch_size();
      width += found->length_per_key_[index];
      where.emplace_back(found, index);
    }
    Tensor t = Tensor::Empty(dtype::kFloat32, {std::max<int64_t>(batch, 0), width});
    int64_t col = 0;
    for (const auto& [kt, index] : where) {
      CopyColumns(kt->values_, kt->offset_per_key_[index], t, col, kt->length_per_key_[index]);
      col += kt->length_per_key_[index];
    }
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace shardrec
