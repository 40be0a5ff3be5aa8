// KeyedTensor: the dense output of an EmbeddingBagCollection — one float32
// row per sample, the pooled embeddings of every key side by side:
// values [B, sum(length_per_key)], key k in columns
// [offset_per_key[k], offset_per_key[k+1]). The seeds' EBC example:
// keys [f1, f2], dims 3 and 4 -> values [3, 7], offset_per_key [0, 3, 7].
#pragma once

#include <map>
#include <string>
#include <vector>

#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

class KeyedTensor {
 public:
  // values must be float32 [B, sum(length_per_key)].
  static StatusOr<KeyedTensor> Create(std::vector<std::string> keys, std::vector<int64_t> length_per_key,
                                      Tensor values);
  // Per-key [B, D_k] tensors side by side (TorchRec's construct_output_kt).
  static StatusOr<KeyedTensor> FromTensors(std::vector<std::string> keys, const std::vector<Tensor>& tensors);

  const std::vector<std::string>& keys() const { return keys_; }
  const std::vector<int64_t>& length_per_key() const { return length_per_key_; }
  const std::vector<int64_t>& offset_per_key() const { return offset_per_key_; }
  const Tensor& values() const { return values_; }
  Tensor& mutable_values() { return values_; }
  int64_t batch_size() const { return values_.size(0); }

  // A copy of one key's columns, [B, D_k].
  StatusOr<Tensor> At(const std::string& key) const;
  std::map<std::string, Tensor> ToDict() const;
  // For each group of keys (taken from any of `kts`, which share B), the
  // columns of those keys side by side (TorchRec's KeyedTensor.regroup).
  static StatusOr<std::vector<Tensor>> Regroup(const std::vector<KeyedTensor>& kts,
                                               const std::vector<std::vector<std::string>>& groups);

 private:
  std::vector<std::string> keys_;
  std::vector<int64_t> length_per_key_;
  std::vector<int64_t> offset_per_key_;
  Tensor values_;
};

}  // namespace shardrec
