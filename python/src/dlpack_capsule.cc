#include "dlpack_capsule.h"

#include <cstring>

#include "status_error.h"

namespace shardrec::python {
namespace {

constexpr const char* kFresh = "dltensor";
constexpr const char* kUsed = "used_dltensor";

// Frees a capsule nobody consumed (the DLPack protocol's rule).
void DropUnconsumed(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, kFresh)) {
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, kFresh));
    if (managed != nullptr && managed->deleter != nullptr) managed->deleter(managed);
  }
}

}  // namespace

Tensor TensorFromCapsule(const pybind11::capsule& capsule, const std::string& what) {
  if (!PyCapsule_IsValid(capsule.ptr(), kFresh)) {
    throw StatusError(InvalidArgumentError(what + ": expected an unconsumed DLPack capsule (\"dltensor\")"));
  }
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), kFresh));
  if (PyCapsule_SetName(capsule.ptr(), kUsed) != 0) throw pybind11::error_already_set();
  StatusOr<Tensor> t = Tensor::FromDLPack(managed);  // owns `managed` from here, even on error
  if (!t.ok()) throw StatusError(Status(t.status().code(), what + ": " + t.status().message()));
  return std::move(t).value();
}

pybind11::capsule CapsuleFromTensor(const Tensor& t) {
  return pybind11::capsule(t.ToDLPack(), kFresh, &DropUnconsumed);
}

}  // namespace shardrec::python
