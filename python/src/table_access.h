// What every module of the package offers on its tables, bound once for
// each module class: whole tables read and written as DLPack capsules, and
// checkpoints (docs/checkpoints.md) loaded into them.
#pragma once

#include <pybind11/pybind11.h>

#include <string>

#include "dlpack_capsule.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/modules/table_weights.h"
#include "status_error.h"

namespace shardrec::python {

// (dir, step, optimizer iteration, optimizer state loaded) of a load.
inline pybind11::tuple LoadedTuple(const LoadedCheckpoint& l) {
  return pybind11::make_tuple(l.dir.string(), l.manifest.step, l.manifest.optimizer_iteration,
                              l.optimizer_state_loaded);
}

inline CheckpointLoadRequest LoadRequest(const std::string& dir, bool reset_optimizer) {
  CheckpointLoadRequest req;
  req.dir = dir;
  req.reset_optimizer = reset_optimizer;
  return req;
}

// Binds read_weights, write_weights, read_state, write_state and
// load_checkpoint on a class whose objects have tables() -> EmbeddingTables.
template <class Module, class... Extra>
void BindTableAccess(pybind11::class_<Module, Extra...>& cls) {
  namespace py = pybind11;
  auto index = [](const Module& m, const std::string& table) { return Unwrap(m.tables().TableIndex(table)); };
  cls.def("read_weights",
          [index](const Module& m, const std::string& table) {
            return CapsuleFromTensor(Unwrap(m.tables().ReadWeights(index(m, table))));
          })
      .def("write_weights",
           [index](const Module& m, const std::string& table, const py::capsule& weights) {
             Check(m.tables().WriteWeights(index(m, table), TensorFromCapsule(weights, table)));
           })
      // Float32 [rows, dim] whatever the table's type: a quantized table's
      // rows dequantized on read and quantized on write (table_weights.h).
      .def("read_float_weights",
           [index](const Module& m, const std::string& table) {
             const int32_t t = index(m, table);
             const Tensor stored = Unwrap(m.tables().ReadWeights(t));
             return CapsuleFromTensor(Unwrap(DecodeWeights(stored, m.tables().configs()[static_cast<size_t>(t)], table)));
           })
      .def("write_float_weights",
           [index](const Module& m, const std::string& table, const py::capsule& weights) {
             const int32_t t = index(m, table);
             const Tensor f32 = TensorFromCapsule(weights, table);
             Check(m.tables().WriteWeights(t, Unwrap(EncodeWeights(f32, m.tables().configs()[static_cast<size_t>(t)], table))));
           })
      .def("read_state",
           [index](const Module& m, const std::string& table) {
             return CapsuleFromTensor(Unwrap(m.tables().ReadState(index(m, table))));
           })
      .def("write_state",
           [index](const Module& m, const std::string& table, const py::capsule& state) {
             Check(m.tables().WriteState(index(m, table), TensorFromCapsule(state, table + " state")));
           })
      .def(
          "load_checkpoint",
          [](const Module& m, const std::string& dir, bool reset_optimizer) {
            std::optional<LoadedCheckpoint> loaded;
            {
              py::gil_scoped_release release;
              loaded = Unwrap(LoadCheckpoint(m.tables(), LoadRequest(dir, reset_optimizer)));
            }
            return LoadedTuple(*loaded);
          },
          py::arg("dir"), py::arg("reset_optimizer") = false);
}

}  // namespace shardrec::python
