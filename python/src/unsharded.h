// Binds the unsharded EmbeddingBagCollection and EmbeddingCollection
// (unsharded.cc) into _shardrec.
#pragma once

#include <pybind11/pybind11.h>

namespace shardrec::python {

void BindUnsharded(pybind11::module_& m);

}  // namespace shardrec::python
