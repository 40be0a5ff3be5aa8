// An EmbeddingCollection's per-feature output and gradients as they cross
// to and from Python (unsharded and sharded alike).
#pragma once

#include <pybind11/pybind11.h>

#include <map>
#include <string>
#include <vector>

#include "shardrec/core/sparse/jagged_tensor.h"

namespace shardrec::python {

// [(feature, values capsule [N, D], lengths)] in `keys` order (features
// missing from `out` are left out).
pybind11::list JaggedList(const std::map<std::string, JaggedTensor>& out, const std::vector<std::string>& keys);

// feature -> gradient [N_f, D_f], from Python's {feature: capsule}.
std::map<std::string, Tensor> GradMap(const std::map<std::string, pybind11::capsule>& grads);

}  // namespace shardrec::python
