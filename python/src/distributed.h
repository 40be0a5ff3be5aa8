// Binds the process group and the sharded EmbeddingBagCollection
// (distributed.cc) into _shardrec.
#pragma once

#include <pybind11/pybind11.h>

#include "plugins.h"

namespace shardrec::python {

void BindDistributed(pybind11::module_& m);

}  // namespace shardrec::python
