// KeyedJaggedTensor construction, validation and key operations.
#include "shardrec/core/sparse/keyed_jagged_tensor.h"

#include <algorithm>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace shardrec {

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::Build(std::vector<std::string> keys,
                                                     SharedArray<int64_t> values,
                                                     std::vector<int64_t> lengths,
                                                     std::optional<SharedArray<float>> weights,
                                                     std::vector<int64_t> stride_per_key,
                                                     bool allow_repeated_keys) {
  const size_t num_keys = keys.size();
  std::set<std::string> seen;
  for (const auto& k : keys) {
    if (k.empty()) return InvalidArgumentError("KJT: a key is empty");
    if (!allow_repeated_keys && !seen.insert(k).second) {
      return InvalidArgumentError("KJT: duplicate key '" + k + "'");
    }
  }
  const bool variable = !stride_per_key.empty();
  if (variable) {
    if (stride_per_key.size() != num_keys) {
      return InvalidArgumentError(fmt::format("KJT: stride_per_key has {} entries for {} keys",
                                              stride_per_key.size(), num_keys));
    }
    for (size_t k = 0; k < num_keys; ++k) {
      if (stride_per_key[k] < 0) {
        return InvalidArgumentError(fmt::format("KJT: key '{}' has negative stride {}", keys[k],
                                                stride_per_key[k]));
      }
    }
    // Checked: hostile strides must not overflow the sum.
    int64_t want = 0;
    for (int64_t s : stride_per_key) {
      if (__builtin_add_overflow(want, s, &want)) {
        return InvalidArgumentError(fmt::format("KJT: stride_per_key sums past 2^63 (there are {} lengths)",
                                                lengths.size()));
      }
    }
    if (want != static_cast<int64_t>(lengths.size())) {
      return InvalidArgumentError(fmt::format(
          "KJT: stride_per_key sums to {} samples but there are {} lengths", want, lengths.size()));
    }
  } else if (num_keys == 0) {
    if (!lengths.empty()) return InvalidArgumentError("KJT: lengths given but no keys");
  } else {
    if (lengths.size() % num_keys != 0) {
      return InvalidArgumentError(fmt::format(
          "KJT: {} lengths do not divide evenly over {} keys (give stride_per_key for a "
          "variable batch per key)",
          lengths.size(), num_keys));
    }
    stride_per_key.assign(num_keys, static_cast<int64_t>(lengths.size() / num_keys));
  }

  KeyedJaggedTensor kjt;
  kjt.bag_offset_per_key_.assign(num_keys + 1, 0);
  for (size_t k = 0; k < num_keys; ++k) {
    kjt.bag_offset_per_key_[k + 1] = kjt.bag_offset_per_key_[k] + stride_per_key[k];
  }
  kjt.offsets_.assign(lengths.size() + 1, 0);
  for (size_t k = 0; k < num_keys; ++k) {
    for (int64_t b = kjt.bag_offset_per_key_[k]; b < kjt.bag_offset_per_key_[k + 1]; ++b) {
      const int64_t len = lengths[static_cast<size_t>(b)];
      if (len < 0) {
        return InvalidArgumentError(fmt::format("KJT: key '{}' sample {}: negative length {}", keys[k],
                                                b - kjt.bag_offset_per_key_[k], len));
      }
      // Checked: hostile lengths must not overflow the running sum.
      if (__builtin_add_overflow(kjt.offsets_[static_cast<size_t>(b)], len,
                                 &kjt.offsets_[static_cast<size_t>(b) + 1])) {
        return InvalidArgumentError(fmt::format("KJT: lengths sum past 2^63 (there are {} values)", values.size()));
      }
    }
  }
  if (kjt.offsets_.back() != static_cast<int64_t>(values.size())) {
    return InvalidArgumentError(fmt::format("KJT: lengths sum to {} but there are {} values",
                                            kjt.offsets_.back(), values.size()));
  }
  if (weights && weights->size() != values.size()) {
    return InvalidArgumentError(fmt::format(
        "KJT: weights have {} entries, expected {} (one per value)", weights->size(), values.size()));
  }
  kjt.keys_ = std::move(keys);
  kjt.values_ = std::move(values);
  kjt.lengths_ = std::move(lengths);
  kjt.weights_ = std::move(weights);
  kjt.variable_stride_ = variable;
  kjt.stride_per_key_ = std::move(stride_per_key);
  return kjt;
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::FromLengths(std::vector<std::string> keys,
                                                           SharedArray<int64_t> values,
                                                           std::vector<int64_t> lengths,
                                                           std::optional<SharedArray<float>> weights,
                                                           std::vector<int64_t> stride_per_key) {
  return Build(std::move(keys), std::move(values), std::move(lengths), std::move(weights),
               std::move(stride_per_key));
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::FromOffsets(std::vector<std::string> keys,
                                                           SharedArray<int64_t> values,
                                                           const std::vector<int64_t>& offsets,
                                                           std::optional<SharedArray<float>> weights,
                                                           std::vector<int64_t> stride_per_key) {
  if (offsets.empty()) return InvalidArgumentError("KJT: offsets are empty (need at least [0])");
  if (offsets.front() != 0) {
    return InvalidArgumentError(fmt::format("KJT: offsets start at {}, expected 0", offsets.front()));
  }
  std::vector<int64_t> lengths(offsets.size() - 1);
  for (size_t i = 0; i + 1 < offsets.size(); ++i) lengths[i] = offsets[i + 1] - offsets[i];
  return Build(std::move(keys), std::move(values), std::move(lengths), std::move(weights),
               std::move(stride_per_key));
}

int64_t KeyedJaggedTensor::stride() const {
  return stride_per_key_.empty() ? 0 : *std::max_element(stride_per_key_.begin(), stride_per_key_.end());
}

Status KeyedJaggedTensor::ReplaceValues(SharedArray<int64_t> values) {
  if (values.size() != values_.size()) {
    return InvalidArgumentError("KeyedJaggedTensor: " + std::to_string(values.size()) + " values replace " +
                                std::to_string(values_.size()));
  }
  values_ = std::move(values);
  return Status::Ok();
}

int KeyedJaggedTensor::KeyIndex(const std::string& key) const {
  const auto it = std::find(keys_.begin(), keys_.end(), key);
  return it == keys_.end() ? -1 : static_cast<int>(it - keys_.begin());
}

std::vector<int64_t> KeyedJaggedTensor::length_per_key() const {
  std::vector<int64_t> out(keys_.size());
  for (size_t k = 0; k < keys_.size(); ++k) {
    out[k] = offsets_[static_cast<size_t>(bag_offset_per_key_[k + 1])] -
             offsets_[static_cast<size_t>(bag_offset_per_key_[k])];
  }
  return out;
}

std::vector<int64_t> KeyedJaggedTensor::offset_per_key() const {
  std::vector<int64_t> out(keys_.size() + 1, 0);
  for (size_t k = 0; k <= keys_.size(); ++k) out[k] = offsets_[static_cast<size_t>(bag_offset_per_key_[k])];
  return out;
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::Permute(const std::vector<int>& indices) const {
  std::vector<std::string> keys;
  std::vector<int64_t> values, lengths, strides;
  std::optional<std::vector<float>> weights;
  if (weights_) weights.emplace();
  for (int k : indices) {
    if (k < 0 || k >= num_keys()) {
      return InvalidArgumentError(fmt::format("KJT permute: index {} is outside [0, {})", k, num_keys()));
    }
    keys.push_back(keys_[static_cast<size_t>(k)]);
    strides.push_back(stride_per_key_[static_cast<size_t>(k)]);
    const int64_t b0 = bag_offset_per_key_[static_cast<size_t>(k)];
    const int64_t b1 = bag_offset_per_key_[static_cast<size_t>(k) + 1];
    lengths.insert(lengths.end(), lengths_.begin() + b0, lengths_.begin() + b1);
    const int64_t v0 = offsets_[static_cast<size_t>(b0)], v1 = offsets_[static_cast<size_t>(b1)];
    values.insert(values.end(), values_.begin() + v0, values_.begin() + v1);
    if (weights_) weights->insert(weights->end(), weights_->begin() + v0, weights_->begin() + v1);
  }
  // A repeated index repeats a key, which user-built KJTs may not do;
  // TorchRec allows it in permute for fan-out to several tables.
  const bool repeats = std::set<int>(indices.begin(), indices.end()).size() != indices.size();
  return Build(std::move(keys), std::move(values), std::move(lengths), std::move(weights),
               variable_stride_ ? std::move(strides) : std::vector<int64_t>{}, repeats);
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::Select(const std::vector<std::string>& keys) const {
  std::vector<int> indices;
  for (const auto& key : keys) {
    const int k = KeyIndex(key);
    if (k < 0) {
      return Status(SR_NOT_FOUND, fmt::format("KJT has no key '{}' (keys: {})", key, fmt::join(keys_, ", ")));
    }
    indices.push_back(k);
  }
  return Permute(indices);
}

StatusOr<std::vector<KeyedJaggedTensor>> KeyedJaggedTensor::Split(const std::vector<int>& segments) const {
  int total = 0;
  for (int s : segments) {
    if (s < 0) return InvalidArgumentError(fmt::format("KJT split: negative segment {}", s));
    total += s;
  }
  if (total != num_keys()) {
    return InvalidArgumentError(
        fmt::format("KJT split: segments sum to {} but there are {} keys", total, num_keys()));
  }
  std::vector<KeyedJaggedTensor> parts;
  int start = 0;
  for (int s : segments) {
    std::vector<int> indices(static_cast<size_t>(s));
    std::iota(indices.begin(), indices.end(), start);
    SR_ASSIGN_OR_RETURN(auto part, Permute(indices));
    parts.push_back(std::move(part));
    start += s;
  }
  return parts;
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::FromLengthsWithRepeatedKeys(
    std::vector<std::string> keys, SharedArray<int64_t> values, std::vector<int64_t> lengths,
    std::optional<SharedArray<float>> weights, std::vector<int64_t> stride_per_key) {
  return Build(std::move(keys), std::move(values), std::move(lengths), std::move(weights), std::move(stride_per_key),
               /*allow_repeated_keys=*/true);
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::ConcatSamples(const std::vector<KeyedJaggedTensor>& kjts) {
  if (kjts.empty()) return KeyedJaggedTensor();
  const KeyedJaggedTensor& first = kjts[0];
  for (size_t i = 1; i < kjts.size(); ++i) {
    if (kjts[i].keys() != first.keys() || kjts[i].has_weights() != first.has_weights()) {
      return InvalidArgumentError("ConcatSamples: KJT " + std::to_string(i) +
                                  " differs from the first in its keys or in having weights");
    }
  }
  std::vector<int64_t> values, lengths, strides(first.keys().size(), 0);
  std::optional<std::vector<float>> weights;
  if (first.has_weights()) weights.emplace();
  for (int k = 0; k < first.num_keys(); ++k) {
    for (const auto& kjt : kjts) {
      const int64_t b0 = kjt.BagOffset(k), b1 = kjt.BagOffset(k + 1);
      const int64_t v0 = kjt.offsets_[static_cast<size_t>(b0)], v1 = kjt.offsets_[static_cast<size_t>(b1)];
      strides[static_cast<size_t>(k)] += b1 - b0;
      lengths.insert(lengths.end(), kjt.lengths_.begin() + b0, kjt.lengths_.begin() + b1);
      values.insert(values.end(), kjt.values_.begin() + v0, kjt.values_.begin() + v1);
      if (weights) weights->insert(weights->end(), kjt.weights_->begin() + v0, kjt.weights_->begin() + v1);
    }
  }
  return FromLengths(first.keys(), std::move(values), std::move(lengths), std::move(weights), std::move(strides));
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::SliceSamples(int64_t begin, int64_t end) const {
  std::vector<int64_t> values, lengths, strides;
  std::optional<std::vector<float>> weights;
  if (weights_) weights.emplace();
  for (int k = 0; k < num_keys(); ++k) {
    if (begin < 0 || end < begin || end > stride_per_key_[static_cast<size_t>(k)]) {
      return Status(SR_OUT_OF_RANGE, "SliceSamples: samples [" + std::to_string(begin) + ", " + std::to_string(end) +
                                         ") of key '" + keys_[static_cast<size_t>(k)] + "' with " +
                                         std::to_string(stride_per_key_[static_cast<size_t>(k)]) + " samples");
    }
    const int64_t b0 = BagOffset(k) + begin, b1 = BagOffset(k) + end;
    const int64_t v0 = offsets_[static_cast<size_t>(b0)], v1 = offsets_[static_cast<size_t>(b1)];
    strides.push_back(end - begin);
    lengths.insert(lengths.end(), lengths_.begin() + b0, lengths_.begin() + b1);
    values.insert(values.end(), values_.begin() + v0, values_.begin() + v1);
    if (weights) weights->insert(weights->end(), weights_->begin() + v0, weights_->begin() + v1);
  }
  return FromLengths(keys_, std::move(values), std::move(lengths), std::move(weights), std::move(strides));
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::Concat(const std::vector<KeyedJaggedTensor>& kjts) {
  std::vector<std::string> keys;
  std::vector<int64_t> values, lengths, strides;
  std::optional<std::vector<float>> weights;
  bool variable = false;
  for (size_t i = 0; i < kjts.size(); ++i) {
    const auto& kjt = kjts[i];
    if (i > 0 && kjt.has_weights() != kjts[0].has_weights()) {
      return InvalidArgumentError(
          fmt::format("KJT concat: part {} {} weights but part 0 {}", i,
                      kjt.has_weights() ? "has" : "has no", kjts[0].has_weights() ? "has" : "has none"));
    }
    if (kjt.has_weights() && !weights) weights.emplace();
    variable = variable || kjt.variable_stride_per_key() ||
               (i > 0 && kjt.num_keys() > 0 && kjts[0].num_keys() > 0 && kjt.stride() != kjts[0].stride());
    keys.insert(keys.end(), kjt.keys_.begin(), kjt.keys_.end());
    values.insert(values.end(), kjt.values_.begin(), kjt.values_.end());
    lengths.insert(lengths.end(), kjt.lengths_.begin(), kjt.lengths_.end());
    strides.insert(strides.end(), kjt.stride_per_key_.begin(), kjt.stride_per_key_.end());
    if (kjt.weights_) weights->insert(weights->end(), kjt.weights_->begin(), kjt.weights_->end());
  }
  return Build(std::move(keys), std::move(values), std::move(lengths), std::move(weights),
               variable ? std::move(strides) : std::vector<int64_t>{});
}

JaggedTensor KeyedJaggedTensor::Feature(int k) const {
  const auto kk = static_cast<size_t>(k);
  const int64_t b0 = bag_offset_per_key_[kk], b1 = bag_offset_per_key_[kk + 1];
  const int64_t v0 = offsets_[static_cast<size_t>(b0)], v1 = offsets_[static_cast<size_t>(b1)];
  JaggedTensor jt;
  jt.values = Tensor::FromVector(std::vector<int64_t>(values_.begin() + v0, values_.begin() + v1));
  jt.lengths.assign(lengths_.begin() + b0, lengths_.begin() + b1);
  if (weights_) jt.weights.emplace(weights_->begin() + v0, weights_->begin() + v1);
  return jt;
}

std::map<std::string, JaggedTensor> KeyedJaggedTensor::ToDict() const {
  std::map<std::string, JaggedTensor> dict;
  for (int k = 0; k < num_keys(); ++k) dict.emplace(keys_[static_cast<size_t>(k)], Feature(k));
  return dict;
}

StatusOr<KeyedJaggedTensor> KeyedJaggedTensor::FromDict(const std::vector<std::string>& keys,
                                                        const std::map<std::string, JaggedTensor>& dict) {
  std::vector<int64_t> values, lengths, strides;
  std::optional<std::vector<float>> weights;
  bool any_weights = false, variable = false;
  for (const auto& key : keys) {
    const auto it = dict.find(key);
    if (it == dict.end()) return Status(SR_NOT_FOUND, "KJT from dict: no entry for key '" + key + "'");
    any_weights = any_weights || it->second.weights.has_value();
  }
  if (any_weights) weights.emplace();
  for (const auto& key : keys) {
    const JaggedTensor& jt = dict.at(key);
    SR_RETURN_IF_ERROR(jt.Validate("KJT from dict, key '" + key + "'"));
    if (!SameDType(jt.values.dtype(), dtype::kInt64) || jt.values.ndim() != 1) {
      return InvalidArgumentError("KJT from dict, key '" + key + "': values must be 1-D int64 ids, got " +
                                  DTypeName(jt.values.dtype()) + " " + ShapeString(jt.values.shape()));
    }
    if (any_weights && !jt.weights) {
      return InvalidArgumentError("KJT from dict: key '" + key + "' has no weights but others do");
    }
    if (!strides.empty() && jt.batch_size() != strides.front()) variable = true;
    strides.push_back(jt.batch_size());
    const auto ids = jt.values.span<int64_t>();
    values.insert(values.end(), ids.begin(), ids.end());
    lengths.insert(lengths.end(), jt.lengths.begin(), jt.lengths.end());
    if (any_weights) weights->insert(weights->end(), jt.weights->begin(), jt.weights->end());
  }
  return Build(keys, std::move(values), std::move(lengths), std::move(weights),
               variable ? std::move(strides) : std::vector<int64_t>{});
}

std::string KeyedJaggedTensor::DebugString() const {
  return fmt::format("KJT(keys=[{}], {}, values={}{})", fmt::join(keys_, ", "),
                     variable_stride_ ? fmt::format("stride_per_key=[{}]", fmt::join(stride_per_key_, ", "))
                                      : fmt::format("stride={}", stride()),
                     values_.size(), weights_ ? ", weighted" : "");
}

}  // namespace shardrec
