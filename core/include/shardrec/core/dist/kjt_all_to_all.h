// The seeds' KJTAllToAll (torchrec.distributed.dist_data): redistributes a
// KeyedJaggedTensor whose keys are ordered by destination rank. splits[r]
// keys go to rank r (the same splits and keys on every rank). Two phases,
// as TorchRec's: first each rank learns, per source and per key, how many
// samples and ids it will receive (and whether weights come); then lengths,
// ids and weights travel by all-to-all-v. The result on rank r holds r's
// keys; each key's batch is the concatenation of every source rank's batch
// in rank order (the "recat" from rank-major to feature-major), so its
// stride is the sum of the sources' strides. Per-key batch sizes may differ
// (variable batch per feature).
#pragma once

#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"

namespace shardrec {

// Collective over `group`: every rank calls it with the same keys and splits.
StatusOr<KeyedJaggedTensor> KjtAllToAll(const ProcessGroup& group, const KeyedJaggedTensor& input,
                                        const std::vector<int64_t>& splits);

}  // namespace shardrec
