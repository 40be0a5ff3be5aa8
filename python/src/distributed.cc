// The distributed half of _shardrec: a process group (a comm plugin over a
// rendezvous string or a torch.distributed store) and the sharded
// EmbeddingBagCollection on it. Both can be closed, which the package does
// at interpreter exit: a group's heartbeat thread must stop while Python can
// still answer it (python_store.h).
#include "distributed.h"

#include <pybind11/stl.h>

#include <atomic>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dlpack_capsule.h"
#include "module_options.h"
#include "python_store.h"
#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/sdk/optimizer.hpp"
#include "status_error.h"

namespace py = pybind11;

namespace shardrec::python {
namespace {

// A ProcessGroup that can be closed; modules on it keep it open.
class Group {
 public:
  explicit Group(ProcessGroup g) : group_(std::move(g)) {}
  // Its heartbeat thread may be waiting for the GIL this thread holds.
  ~Group() {
    if (group_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      group_.reset();
    }
  }
  const ProcessGroup& get() const {
    if (!group_) throw StatusError(FailedPreconditionError("the process group was closed"));
    return *group_;
  }
  void Close() {
    if (users_.load() > 0) {
      throw StatusError(FailedPreconditionError("the process group is still used by " +
                                                std::to_string(users_.load()) + " module(s); close them first"));
    }
    py::gil_scoped_release release;  // its heartbeat thread may need the GIL to stop
    group_.reset();
  }
  std::atomic<int>& users() { return users_; }

 private:
  std::optional<ProcessGroup> group_;
  std::atomic<int> users_{0};
};

std::shared_ptr<Group> MakeGroup(const Plugins& plugins, const std::string& comm, const std::string& rendezvous,
                                 const py::object& store, const std::string& prefix, int rank, int world_size,
                                 int local_rank, int local_world_size, int64_t timeout_ms) {
  ProcessGroupConfig config;
  config.comm = comm;
  config.rendezvous = store.is_none() ? rendezvous : "torch.distributed store";
  config.prefix = prefix;
  config.timeout_ms = timeout_ms;
  config.placement = {rank, world_size, local_rank, local_world_size};
  const ComponentRef ref = Unwrap(plugins.registry().Find(SR_KIND_COMM, comm));
  std::shared_ptr<KvStore> kv;
  if (!store.is_none()) kv = std::make_shared<PythonStore>(store, prefix, timeout_ms);
  py::gil_scoped_release release;
  return std::make_shared<Group>(Unwrap(kv ? ProcessGroup::Create(ref, config, kv) : ProcessGroup::Create(ref, config)));
}

class ShardedEbc {
 public:
  ShardedEbc(const Plugins& plugins, std::shared_ptr<Group> group, const std::string& tables_json,
             const std::string& sharder, const std::string& plan_json, const std::string& kernel,
             const std::vector<std::pair<std::string, std::string>>& kernel_options, const std::string& optimizer,
             uint64_t init_seed, const std::string& bounds_check)
      : group_(std::move(group)) {
    const ProcessGroup& g = group_->get();
    const EmbeddingModuleOptions options = ModuleOptions(kernel, kernel_options, optimizer, init_seed, bounds_check);
    PlanRequest req;
    req.tables = Unwrap(ParseTablesJson(tables_json, "tables"));
    req.world_size = g.world_size();
    req.ranks_per_host = g.local_world_size();
    req.default_kernel = kernel;
    req.sharder = sharder;
    if (!plan_json.empty()) req.spec = Unwrap(ParsePlanJson(plan_json, "plan"));
    const int32_t opt = options.optimizer.optimizer;
    req.state_bytes_per_row = [opt](const EmbeddingTableConfig& t) {
      return sdk::StateDim(opt, t.embedding_dim) * static_cast<int64_t>(sizeof(float));
    };
    py::gil_scoped_release release;
    const ShardingPlan plan = Unwrap(MakePlan(plugins.registry(), req));
    plan_json_ = PlanToJson(plan);
    module_.emplace(Unwrap(ShardedEmbeddingBagCollection::Create(plugins.registry(), g, plan, options)));
    ++group_->users();
  }
  ~ShardedEbc() { Close(); }

  void Close() {
    if (!module_) return;
    module_.reset();
    --group_->users();
  }

  py::tuple Forward(const KeyedJaggedTensor& kjt) {
    int64_t invalid = 0;
    std::optional<KeyedTensor> kt;
    {
      py::gil_scoped_release release;
      kt = Unwrap(get().Forward(kjt, &invalid));
    }
    return py::make_tuple(CapsuleFromTensor(kt->values()), kt->keys(), kt->length_per_key(), invalid);
  }
  void Backward(const py::capsule& grad, int64_t iteration) {
    Tensor g = TensorFromCapsule(grad, "grad");
    py::gil_scoped_release release;
    Check(get().Backward(g, iteration));
  }
  py::tuple ReadTable(const std::string& name) {
    std::optional<TableContents> c;
    {
      py::gil_scoped_release release;
      c = Unwrap(get().ReadTable(name));
    }
    return py::make_tuple(CapsuleFromTensor(c->weights), CapsuleFromTensor(c->state));
  }
  void WriteTable(const std::string& name, const py::capsule& weights, const std::optional<py::capsule>& state) {
    TableContents c;
    c.weights = TensorFromCapsule(weights, name);
    if (state) c.state = TensorFromCapsule(*state, name + " state");
    else c.state = Tensor::Empty(dtype::kFloat32, {0});
    py::gil_scoped_release release;
    Check(get().tables().WriteTable(name, c));
  }
  const std::string& plan_json() const { return plan_json_; }
  std::string output_dist() { return get().output_dist(); }

 private:
  ShardedEmbeddingBagCollection& get() {
    if (!module_) throw StatusError(FailedPreconditionError("the sharded module was closed"));
    return *module_;
  }
  std::shared_ptr<Group> group_;
  std::optional<ShardedEmbeddingBagCollection> module_;
  std::string plan_json_;
};

}  // namespace

void BindDistributed(py::module_& m) {
  py::class_<Group, std::shared_ptr<Group>>(m, "ProcessGroupImpl", "A comm plugin's group of ranks (see shardrec.distributed).")
      .def(py::init(&MakeGroup), py::arg("plugins"), py::arg("comm"), py::arg("rendezvous"), py::arg("store"),
           py::arg("prefix"), py::arg("rank"), py::arg("world_size"), py::arg("local_rank"),
           py::arg("local_world_size"), py::arg("timeout_ms"), py::keep_alive<1, 2>())
      .def("rank", [](const Group& g) { return g.get().rank(); })
      .def("world_size", [](const Group& g) { return g.get().world_size(); })
      .def("backend", [](const Group& g) { return g.get().backend(); })
      .def("close", &Group::Close);

  py::class_<ShardedEbc>(m, "ShardedEmbeddingBagCollectionImpl", "The C++ ShardedEmbeddingBagCollection.")
      .def(py::init<const Plugins&, std::shared_ptr<Group>, const std::string&, const std::string&,
                    const std::string&, const std::string&, const std::vector<std::pair<std::string, std::string>>&,
                    const std::string&, uint64_t, const std::string&>(),
           py::arg("plugins"), py::arg("group"), py::arg("tables_json"), py::arg("sharder"), py::arg("plan_json"),
           py::arg("kernel"), py::arg("kernel_options"), py::arg("optimizer"), py::arg("init_seed"),
           py::arg("bounds_check"), py::keep_alive<1, 2>())
      .def("forward", &ShardedEbc::Forward)
      .def("backward", &ShardedEbc::Backward)
      .def("read_table", &ShardedEbc::ReadTable)
      .def("write_table", &ShardedEbc::WriteTable, py::arg("name"), py::arg("weights"), py::arg("state") = py::none())
      .def("plan_json", &ShardedEbc::plan_json)
      .def("output_dist", &ShardedEbc::output_dist)
      .def("close", [](ShardedEbc& e) {
        py::gil_scoped_release release;
        e.Close();
      });

  m.def("shut_down_stores", &PythonStore::ShutDown,
        "At interpreter exit, after the groups closed: stores refuse every call from now on.");
}

}  // namespace shardrec::python
