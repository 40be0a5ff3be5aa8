// Tensors between Python and shardrec as DLPack capsules, the protocol
// torch.utils.dlpack (and numpy, JAX, CuPy) speak: a capsule named
// "dltensor" owns a DLManagedTensor until a consumer takes it and renames
// the capsule "used_dltensor". Neither direction copies the bytes.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "shardrec/core/tensor/tensor.h"

namespace shardrec::python {

// Takes the tensor out of an unconsumed capsule (marking it used). `what`
// names the argument in errors: a used capsule, a non-CPU or non-contiguous
// tensor is refused (StatusError).
Tensor TensorFromCapsule(const pybind11::capsule& capsule, const std::string& what);

// A capsule sharing `t`'s storage; whoever consumes it frees it, or the
// capsule does when it is dropped unconsumed.
pybind11::capsule CapsuleFromTensor(const Tensor& t);

}  // namespace shardrec::python
