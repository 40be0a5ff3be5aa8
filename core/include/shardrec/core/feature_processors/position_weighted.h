// TorchRec's PositionWeightedModule (seed 002_*, WE-9): trainable weights by
// position that become an EmbeddingBagCollection's per-id weights. For
// feature f with max length M_f, the id at 0-based position j of its bag
// gets weight P_f[j]; P_f is a parameter of shape [M_f], initialised to 1.0.
// The collection then pools sum_j P_f[j] * row_j, so
//   dL/dP_f[j] = sum over bags of <row at position j, dL/dpooled of the bag>,
// the per-id weight gradient the (sharded) collection's Backward returns
// (shards compute it where the rows live; see sharded_embedding_bag_
// collection.h), summed here by position.
//
// Data-parallel like the dense half: every rank holds the same P, adds the
// gradient of its own samples, and the trainer all-reduces it with the
// dense gradients (core/train/model_trainer.h).
//
// A bag longer than M_f is an error naming the feature and sample (upstream
// indexes past the parameter there). Not thread-safe: one Forward, then its
// Backward.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "shardrec/core/dense/dense_layer.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"

namespace shardrec {

class PositionWeightedModule {
 public:
  // max_feature_lengths: feature -> M_f (>= 1). Parameters are named
  // "position_weights.<feature>" in the map's (sorted) order.
  static StatusOr<PositionWeightedModule> Create(const std::map<std::string, int64_t>& max_feature_lengths);

  // The input with weights: P_f[j] on the features it weights; on the
  // others the input's weights, or 1.0 when it has none. Values, lengths
  // and keys are unchanged.
  StatusOr<KeyedJaggedTensor> Forward(const KeyedJaggedTensor& input);
  // id_weight_grad: dL/dweight of every id of the last Forward's output
  // (same order as its values). Adds into the parameters' gradients. With
  // slices > 1 the samples are taken as that many equal slices, each summed
  // on its own and the slices then added in order (as ranks' gradients are
  // by an all-reduce), so an unsharded reference matches the ranks' bits.
  Status Backward(std::span<const float> id_weight_grad, int slices = 1);

  std::vector<dense::Parameter*> Parameters();
  const std::map<std::string, int64_t>& max_feature_lengths() const { return max_lengths_; }

 private:
  PositionWeightedModule() = default;

  std::map<std::string, int64_t> max_lengths_;
  std::vector<dense::Parameter> params_;  // in max_lengths_ order
  // The last Forward's: per output value, its parameter (or -1) and position.
  std::vector<int32_t> param_of_;
  std::vector<int32_t> position_of_;
  std::vector<int64_t> sample_of_;  // the id's sample, for slices
  int64_t batch_ = 0;
  bool forwarded_ = false;
};

}  // namespace shardrec
