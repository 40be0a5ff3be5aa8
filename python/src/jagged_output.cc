#include "jagged_output.h"

#include <pybind11/stl.h>

#include "dlpack_capsule.h"

namespace shardrec::python {

pybind11::list JaggedList(const std::map<std::string, JaggedTensor>& out, const std::vector<std::string>& keys) {
  pybind11::list list;
  for (const std::string& k : keys) {
    auto it = out.find(k);
    if (it == out.end()) continue;
    list.append(pybind11::make_tuple(k, CapsuleFromTensor(it->second.values), it->second.lengths));
  }
  return list;
}

std::map<std::string, Tensor> GradMap(const std::map<std::string, pybind11::capsule>& grads) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, capsule] : grads) out.emplace(k, TensorFromCapsule(capsule, "gradient of " + k));
  return out;
}

}  // namespace shardrec::python
