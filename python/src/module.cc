// shardrec's Python extension, `shardrec._shardrec`: the plugin registry,
// KeyedJaggedTensor and the error types here; the modules behind the
// package's torch.nn.Modules (python/shardrec/) in unsharded.cc and
// distributed.cc. Tensors cross as DLPack capsules
// (dlpack_capsule.h); every non-OK Status becomes shardrec.Error with the
// same message. The GIL is released while a module computes, so a data
// loader's threads run meanwhile.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/stl/filesystem.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "distributed.h"
#include "unsharded.h"
#include "dlpack_capsule.h"
#include "plugins.h"
#include "shardrec/core/host_services.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"
#include "shardrec/core/plugin_library.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/core/version.h"
#include "status_error.h"

namespace py = pybind11;

namespace shardrec::python {
namespace {

// A 1-D tensor's elements borrowed, not copied: the array keeps the tensor
// (and through DLPack the framework's storage) alive for as long as any KJT
// built on it lives.
template <class T>
SharedArray<T> BorrowOut(Tensor t, DLDataType want, const char* dtype_name, const std::string& what) {
  if (t.dtype().code != want.code || t.dtype().bits != want.bits || t.dtype().lanes != 1) {
    throw StatusError(InvalidArgumentError(what + " must be " + dtype_name));
  }
  if (t.ndim() != 1) throw StatusError(InvalidArgumentError(what + " must be 1-D, got " + std::to_string(t.ndim()) + "-D"));
  const auto n = static_cast<size_t>(t.numel());
  auto owner = std::make_shared<const Tensor>(std::move(t));
  return SharedArray<T>::Borrow(owner->data<T>(), n, owner);
}

// KeyedJaggedTensor from 1-D tensors: int64 values and lengths, optional
// float32 weights. The ids and weights are borrowed (no copy); the lengths
// are read into the KJT's own offsets.
KeyedJaggedTensor MakeKjt(std::vector<std::string> keys, const py::capsule& values, const py::capsule& lengths,
                          const std::optional<py::capsule>& weights, std::vector<int64_t> stride_per_key) {
  SharedArray<int64_t> v = BorrowOut<int64_t>(TensorFromCapsule(values, "values"), dtype::kInt64, "int64", "values");
  std::vector<int64_t> l =
      BorrowOut<int64_t>(TensorFromCapsule(lengths, "lengths"), dtype::kInt64, "int64", "lengths").ToVector();
  std::optional<SharedArray<float>> w;
  if (weights) w = BorrowOut<float>(TensorFromCapsule(*weights, "weights"), dtype::kFloat32, "float32", "weights");
  py::gil_scoped_release release;
  return Unwrap(KeyedJaggedTensor::FromLengths(std::move(keys), std::move(v), std::move(l), std::move(w),
                                               std::move(stride_per_key)));
}

void Bind(py::module_& m) {
  m.attr("__version__") = kShardrecVersion;

  // Never deleted: at interpreter exit the registry would unload plugin
  // libraries whose threads (oneTBB's workers, gloo's) still run their code.
  // The process's exit reclaims it.
  py::class_<Plugins, std::unique_ptr<Plugins, py::nodelete>>(
      m, "Plugins", "The plugins this process loaded (one registry per process).")
      .def(py::init<const std::vector<std::filesystem::path>&, bool>(), py::arg("dirs"),
           py::arg("use_environment") = true)
      .def("skipped", &Plugins::Skipped, "(path, why) of each library that was not loaded")
      .def("components", &Plugins::Components, "(kind, name) of each loaded component");

  py::class_<KeyedJaggedTensor>(m, "KeyedJaggedTensorImpl", "The C++ KeyedJaggedTensor (see shardrec.sparse).")
      .def(py::init(&MakeKjt), py::arg("keys"), py::arg("values"), py::arg("lengths"), py::arg("weights"),
           py::arg("stride_per_key"))
      // Where the C++ KJT's ids live: equal to the values tensor's data_ptr()
      // when they were borrowed, which tests/python checks.
      .def_property_readonly("values_address", [](const KeyedJaggedTensor& k) {
        return reinterpret_cast<std::uintptr_t>(k.values().data());
      });

}

}  // namespace
}  // namespace shardrec::python

PYBIND11_MODULE(_shardrec, m) {
  m.doc() = "shardrec's C++ core (use the shardrec and shardrec.torch modules)";
  // shardrec.Error carries the C++ Status's message unchanged and its code
  // name in .code; invalid arguments are also ValueErrors. Handles, never
  // released: a static py::object would be released after the interpreter
  // is gone, at the process's exit.
  static py::handle error = PyErr_NewExceptionWithDoc(
      "shardrec.Error", "An error from shardrec's C++ core; .code names its status.", PyExc_RuntimeError, nullptr);
  static py::handle invalid = PyErr_NewExceptionWithDoc(
      "shardrec.InvalidArgumentError", "An argument shardrec refused.",
      py::make_tuple(error, py::handle(PyExc_ValueError)).ptr(), nullptr);
  if (!error || !invalid) throw py::error_already_set();
  m.attr("Error") = error;
  m.attr("InvalidArgumentError") = invalid;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const shardrec::python::StatusError& e) {
      const py::handle type = e.status().code() == SR_INVALID_ARGUMENT ? invalid : error;
      py::object instance = type(e.status().message());
      instance.attr("code") = shardrec::StatusCodeName(e.status().code());
      PyErr_SetObject(type.ptr(), instance.ptr());
    }
  });
  shardrec::python::Bind(m);
  shardrec::python::BindUnsharded(m);
  shardrec::python::BindDistributed(m);
}
