// The unsharded modules behind shardrec.torch.EmbeddingBagCollection and
// EmbeddingCollection: created from a tables file's JSON, looked up and
// trained with the GIL released, tables and checkpoints through
// table_access.h.
#include "unsharded.h"

#include <pybind11/stl.h>

#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dlpack_capsule.h"
#include "jagged_output.h"
#include "module_options.h"
#include "plugins.h"
#include "shardrec/core/modules/embedding_bag_collection.h"
#include "shardrec/core/modules/embedding_collection.h"
#include "status_error.h"
#include "table_access.h"

namespace py = pybind11;

namespace shardrec::python {
namespace {

using Options = std::vector<std::pair<std::string, std::string>>;

template <class Module>
Module Make(const Plugins& plugins, const std::string& tables_json, const std::string& kernel,
            const Options& kernel_options, const std::string& optimizer, uint64_t init_seed,
            const std::string& bounds_check, int device) {
  std::vector<EmbeddingTableConfig> tables = Unwrap(ParseTablesJson(tables_json, "tables"));
  EmbeddingModuleOptions options = ModuleOptions(kernel, kernel_options, optimizer, init_seed, bounds_check);
  options.device = device;
  py::gil_scoped_release release;
  return Unwrap(Module::Create(plugins.registry(), std::move(tables), options));
}

}  // namespace

void BindUnsharded(py::module_& m) {
  const auto nan = std::numeric_limits<double>::quiet_NaN();
  py::class_<EmbeddingBagCollection> ebc(m, "EmbeddingBagCollectionImpl",
                                         "The C++ EmbeddingBagCollection (see shardrec.torch).");
  ebc.def(py::init(&Make<EmbeddingBagCollection>), py::arg("plugins"), py::arg("tables_json"), py::arg("kernel"),
          py::arg("kernel_options"), py::arg("optimizer"), py::arg("init_seed"), py::arg("bounds_check"),
          py::arg("device"), py::keep_alive<1, 2>())
      .def(
          "forward",
          [](const EmbeddingBagCollection& e, const KeyedJaggedTensor& kjt) {
            int64_t invalid = 0;
            std::optional<KeyedTensor> kt;
            {
              py::gil_scoped_release release;
              kt = Unwrap(e.Forward(kjt, &invalid));
            }
            return py::make_tuple(CapsuleFromTensor(kt->values()), invalid);
          },
          "-> (values capsule [B, sum of dims] in table order, ids outside their table)")
      .def(
          "backward",
          [](const EmbeddingBagCollection& e, const KeyedJaggedTensor& kjt, const py::capsule& grad,
             int64_t iteration, double learning_rate) {
            Tensor g = TensorFromCapsule(grad, "grad");
            py::gil_scoped_release release;
            Check(e.Backward(kjt, g, iteration, learning_rate));
          },
          py::arg("kjt"), py::arg("grad"), py::arg("iteration"), py::arg("learning_rate") = nan);
  BindTableAccess(ebc);

  py::class_<EmbeddingCollection> ec(m, "EmbeddingCollectionImpl", "The C++ EmbeddingCollection (see shardrec.torch).");
  ec.def(py::init(&Make<EmbeddingCollection>), py::arg("plugins"), py::arg("tables_json"), py::arg("kernel"),
         py::arg("kernel_options"), py::arg("optimizer"), py::arg("init_seed"), py::arg("bounds_check"),
         py::arg("device"), py::keep_alive<1, 2>())
      .def(
          "forward",
          [](const EmbeddingCollection& e, const KeyedJaggedTensor& kjt) {
            int64_t invalid = 0;
            std::optional<std::map<std::string, JaggedTensor>> out;
            {
              py::gil_scoped_release release;
              out = Unwrap(e.Forward(kjt, &invalid));
            }
            return py::make_tuple(JaggedList(*out, kjt.keys()), invalid);
          },
          "-> ([(feature, values capsule [N, D], lengths)], ids outside their table)")
      .def(
          "backward",
          [](const EmbeddingCollection& e, const KeyedJaggedTensor& kjt, const std::map<std::string, py::capsule>& grads,
             int64_t iteration) {
            std::map<std::string, Tensor> g = GradMap(grads);
            py::gil_scoped_release release;
            Check(e.Backward(kjt, g, iteration));
          },
          py::arg("kjt"), py::arg("grads"), py::arg("iteration"));
  BindTableAccess(ec);
}

}  // namespace shardrec::python
