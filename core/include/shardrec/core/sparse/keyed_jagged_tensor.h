// KeyedJaggedTensor (KJT): a batch of sparse id lists keyed by feature,
// laid out feature-major as in TorchRec ([F x B x L]): all bags of key 0,
// then all bags of key 1, ... `lengths` has one entry per (key, sample),
// `values` holds the int64 ids, `weights` (optional) one float per id.
// Every key has the same batch size (stride) unless stride_per_key is given
// (TorchRec's variable batch per feature).
//
//   keys ["f1","f2"], values [0..7], offsets [0,2,2,3,4,5,8]
//   f1: [0,1] [] [2]      f2: [3] [4] [5,6,7]
//
// A KJT is immutable once built; every factory validates it and names the
// offending key and sample. The ids and weights are SharedArrays: a KJT over
// a framework's tensors borrows them (no copy), and copies of a KJT share them.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "shardrec/core/sparse/jagged_tensor.h"
#include "shardrec/core/sparse/shared_array.h"
#include "shardrec/core/status.h"

namespace shardrec {

class KeyedJaggedTensor {
 public:
  // From one length per (key, sample). stride_per_key empty: every key has
  // lengths.size() / keys.size() samples (which must divide evenly).
  static StatusOr<KeyedJaggedTensor> FromLengths(std::vector<std::string> keys,
                                                 SharedArray<int64_t> values,
                                                 std::vector<int64_t> lengths,
                                                 std::optional<SharedArray<float>> weights = {},
                                                 std::vector<int64_t> stride_per_key = {});
  // As FromLengths, but a key may appear more than once: the bucket-major
  // layout of a row-wise input dist repeats every key once per bucket.
  static StatusOr<KeyedJaggedTensor> FromLengthsWithRepeatedKeys(std::vector<std::string> keys,
                                                                 SharedArray<int64_t> values,
                                                                 std::vector<int64_t> lengths,
                                                                 std::optional<SharedArray<float>> weights = {},
                                                                 std::vector<int64_t> stride_per_key = {});
  // From offsets = [0, cumsum(lengths)] (one more entry than lengths).
  static StatusOr<KeyedJaggedTensor> FromOffsets(std::vector<std::string> keys,
                                                 SharedArray<int64_t> values,
                                                 const std::vector<int64_t>& offsets,
                                                 std::optional<SharedArray<float>> weights = {},
                                                 std::vector<int64_t> stride_per_key = {});
  // From per-key jagged tensors, in the order of `keys` (each must be present).
  static StatusOr<KeyedJaggedTensor> FromDict(const std::vector<std::string>& keys,
                                              const std::map<std::string, JaggedTensor>& dict);
  // Keys side by side (disjoint key sets; weights on all or none).
  static StatusOr<KeyedJaggedTensor> Concat(const std::vector<KeyedJaggedTensor>& kjts);
  // Samples end to end: the same keys in the same order, each key's samples
  // of kjts[0], then kjts[1], ... (every rank's batch as one global batch).
  static StatusOr<KeyedJaggedTensor> ConcatSamples(const std::vector<KeyedJaggedTensor>& kjts);

  const std::vector<std::string>& keys() const { return keys_; }
  const SharedArray<int64_t>& values() const { return values_; }
  const std::vector<int64_t>& lengths() const { return lengths_; }
  const std::vector<int64_t>& offsets() const { return offsets_; }
  const std::optional<SharedArray<float>>& weights() const { return weights_; }
  bool has_weights() const { return weights_.has_value(); }
  int num_keys() const { return static_cast<int>(keys_.size()); }

  // Samples per key; stride() is the common one (the largest when variable).
  const std::vector<int64_t>& stride_per_key() const { return stride_per_key_; }
  int64_t stride() const;
  bool variable_stride_per_key() const { return variable_stride_; }
  // Index of `key`, or -1.
  int KeyIndex(const std::string& key) const;
  // The same keys, lengths and weights over new values (as many as before):
  // ids rewritten in place, e.g. remapped to rows.
  Status ReplaceValues(SharedArray<int64_t> values);
  // Bags before key k, and ids per key / before key k (TorchRec's
  // length_per_key / offset_per_key count values, not samples).
  int64_t BagOffset(int k) const { return bag_offset_per_key_[static_cast<size_t>(k)]; }
  std::vector<int64_t> length_per_key() const;
  std::vector<int64_t> offset_per_key() const;

  // The keys in the order of `indices` (an index may repeat, as in TorchRec).
  StatusOr<KeyedJaggedTensor> Permute(const std::vector<int>& indices) const;
  // The keys named, in that order.
  StatusOr<KeyedJaggedTensor> Select(const std::vector<std::string>& keys) const;
  // Consecutive groups of segments[i] keys (summing to num_keys()).
  StatusOr<std::vector<KeyedJaggedTensor>> Split(const std::vector<int>& segments) const;
  // One JaggedTensor per key.
  // Samples [begin, end) of every key; every key must have more than `end` - 1 samples.
  StatusOr<KeyedJaggedTensor> SliceSamples(int64_t begin, int64_t end) const;
  std::map<std::string, JaggedTensor> ToDict() const;
  JaggedTensor Feature(int k) const;

  // "KJT(keys=[f1, f2], stride=3, values=8, weighted)"
  std::string DebugString() const;

  // No keys (an empty batch); a valid KJT.
  KeyedJaggedTensor() = default;

 private:
  static StatusOr<KeyedJaggedTensor> Build(std::vector<std::string> keys, SharedArray<int64_t> values,
                                           std::vector<int64_t> lengths,
                                           std::optional<SharedArray<float>> weights,
                                           std::vector<int64_t> stride_per_key,
                                           bool allow_repeated_keys = false);

  std::vector<std::string> keys_;
  SharedArray<int64_t> values_;
  std::vector<int64_t> lengths_;
  std::vector<int64_t> offsets_{0};
  std::optional<SharedArray<float>> weights_;
  std::vector<int64_t> stride_per_key_;
  std::vector<int64_t> bag_offset_per_key_{0};  // [F + 1]
  bool variable_stride_ = false;
};

}  // namespace shardrec
