// The distributed half of _shardrec: a process group (a comm plugin over a
// rendezvous string or a torch.distributed store) and the sharded
// EmbeddingBagCollection and EmbeddingCollection on it, with their plans
// (a sharder, a plan file, or the planner) and checkpoints. Both can be closed, which the package does
// at interpreter exit: a group's heartbeat thread must stop while Python can
// still answer it (python_store.h).
#include "distributed.h"

#include <pybind11/stl.h>

#include <atomic>
#include <map>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dlpack_capsule.h"
#include "jagged_output.h"
#include "module_options.h"
#include "python_store.h"
#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/inference/quant_embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_bag_collection.h"
#include "shardrec/core/modules/sharded_embedding_collection.h"
#include "shardrec/core/planner/planner.h"
#include "shardrec/core/planner/table_workload.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/sdk/optimizer.hpp"
#include "status_error.h"
#include "table_access.h"

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

// The plan of a sharded module: one sharder, a plan file's JSON, or the
// planner (for batch_per_rank samples per rank); none of them: the balanced
// table-wise plan. *report: the planner's table for people, else empty.
ShardingPlan PlanFor(const Plugins& plugins, const ProcessGroup& g, const std::vector<EmbeddingTableConfig>& tables,
                     const std::string& sharder, const std::string& plan_json, bool planner, int64_t batch_per_rank,
                     const std::vector<const KeyedJaggedTensor*>& samples, const std::string& kernel,
                     int32_t optimizer, std::string* report) {
  if (planner + !sharder.empty() + !plan_json.empty() > 1) {
    throw StatusError(InvalidArgumentError("give at most one of sharder, plan and planner"));
  }
  auto state_bytes = [optimizer](const EmbeddingTableConfig& t) {
    return sdk::StateDim(optimizer, t.embedding_dim) * static_cast<int64_t>(sizeof(float));
  };
  PlanRequest req;
  req.tables = tables;
  req.world_size = g.world_size();
  req.ranks_per_host = g.local_world_size();
  req.default_kernel = kernel;
  req.sharder = sharder;
  req.state_bytes_per_row = state_bytes;
  if (!plan_json.empty()) req.spec = Unwrap(ParsePlanJson(plan_json, "plan"));
  if (planner) {
    if (batch_per_rank <= 0) throw StatusError(InvalidArgumentError("planner: batch_size must be positive"));
    // Rank 0 plans from its sample batches (ids per sample and row skew
    // per table; none: one id per feature, uniform rows) and every rank
    // takes its plan: ranks with other samples must not plan apart.
    const std::string planned = Unwrap(g.InvokeOnRankAndBroadcastResult(0, [&]() -> StatusOr<std::string> {
      PlannerRequest preq;
      preq.tables = tables;
      preq.batch_per_rank = batch_per_rank;
      preq.world_size = g.world_size();
      preq.ranks_per_host = g.local_world_size();
      preq.kernels = {kernel};
      preq.state_bytes_per_row = state_bytes;
      if (!samples.empty()) {
        std::vector<KeyedJaggedTensor> batches;
        for (const KeyedJaggedTensor* k : samples) batches.push_back(*k);
        preq.workload = MeasureWorkload(tables, batches);
      }
      SR_ASSIGN_OR_RETURN(PlannerResult result, RunPlanner(plugins.registry(), preq));
      PlanRequest from_planner = req;
      from_planner.spec = result.spec;
      SR_ASSIGN_OR_RETURN(ShardingPlan plan, MakePlan(plugins.registry(), from_planner));
      *report = FormatPlannerResult(result, preq, /*explain=*/false);
      return PlanToJson(plan);
    }));
    req.spec = Unwrap(ParsePlanJson(planned, "the planner's plan from rank 0"));
    *report = Unwrap(g.InvokeOnRankAndBroadcastResult(0, [&]() -> StatusOr<std::string> { return *report; }));
  }
  return Unwrap(MakePlan(plugins.registry(), req));
}

// A sharded module (ShardedEmbeddingBagCollection or
// ShardedEmbeddingCollection) on a Group, closable, with its plan.
template <class M>
class Sharded {
 public:
  Sharded(const Plugins& plugins, std::shared_ptr<Group> group, const std::string& tables_json,
          const std::string& sharder, const std::string& plan_json, bool planner, int64_t batch_per_rank,
          const std::vector<const KeyedJaggedTensor*>& samples, const std::string& kernel,
          const std::vector<std::pair<std::string, std::string>>& kernel_options, const std::string& optimizer,
          uint64_t init_seed, const std::string& bounds_check)
      : group_(std::move(group)) {
    const ProcessGroup& g = group_->get();
    const EmbeddingModuleOptions options = ModuleOptions(kernel, kernel_options, optimizer, init_seed, bounds_check);
    const std::vector<EmbeddingTableConfig> tables = Unwrap(ParseTablesJson(tables_json, "tables"));
    // Counted as a user before the GIL goes, so that no close() of the
    // group from another thread can pass while the module is being made.
    ++group_->users();
    try {
      py::gil_scoped_release release;
      const ShardingPlan plan = PlanFor(plugins, g, tables, sharder, plan_json, planner, batch_per_rank, samples,
                                        kernel, options.optimizer.optimizer, &planner_report_);
      plan_json_ = PlanToJson(plan);
      module_.emplace(Unwrap(M::Create(plugins.registry(), g, plan, options)));
    } catch (...) {
      --group_->users();
      throw;
    }
  }
  // Sub-groups a module may make would have heartbeat threads that need the
  // GIL to stop, as a Group's do.
  ~Sharded() {
    if (module_ && PyGILState_Check()) {
      py::gil_scoped_release release;
      Close();
    } else {
      Close();
    }
  }
  Sharded(const Sharded&) = delete;
  Sharded& operator=(const Sharded&) = delete;

  void Close() {
    if (!module_) return;
    module_.reset();
    --group_->users();
  }
  M& get() {
    if (!module_) throw StatusError(FailedPreconditionError("the sharded module was closed"));
    return *module_;
  }
  py::tuple ReadTable(const std::string& name) {
    std::optional<TableContents> c;
    {
      py::gil_scoped_release release;
      c = Unwrap(get().tables().ReadTable(name));
    }
    return py::make_tuple(CapsuleFromTensor(c->weights), CapsuleFromTensor(c->state));
  }
  void WriteTable(const std::string& name, const py::capsule& weights, const std::optional<py::capsule>& state) {
    TableContents c;
    c.weights = TensorFromCapsule(weights, name);
    c.state = state ? TensorFromCapsule(*state, name + " state") : Tensor::Empty(dtype::kFloat32, {0});
    py::gil_scoped_release release;
    Check(get().tables().WriteTable(name, c));
  }
  // Collective: root/step-NNNNNNNN, published atomically -> (dir, bytes).
  py::tuple SaveCheckpoint(const std::string& root, int64_t step, int64_t iteration, int keep_last) {
    CheckpointSaveRequest req;
    req.root = root;
    req.step = step;
    req.optimizer_iteration = iteration;
    req.keep_last = keep_last;
    std::optional<SavedCheckpoint> saved;
    {
      py::gil_scoped_release release;
      saved = Unwrap(shardrec::SaveCheckpoint(get().tables(), req));
    }
    return py::make_tuple(saved->dir.string(), saved->bytes);
  }
  py::tuple LoadCheckpoint(const std::string& dir, bool reset_optimizer) {
    std::optional<LoadedCheckpoint> loaded;
    {
      py::gil_scoped_release release;
      loaded = Unwrap(shardrec::LoadCheckpoint(get().tables(), LoadRequest(dir, reset_optimizer)));
    }
    return LoadedTuple(*loaded);
  }
  const std::string& plan_json() const { return plan_json_; }
  const std::string& planner_report() const { return planner_report_; }

 private:
  std::shared_ptr<Group> group_;
  std::optional<M> module_;
  std::string plan_json_, planner_report_;
};

using ShardedEbc = Sharded<ShardedEmbeddingBagCollection>;
using ShardedEc = Sharded<ShardedEmbeddingCollection>;
using ShardedQebc = Sharded<ShardedQuantEmbeddingBagCollection>;

template <class M>
py::class_<Sharded<M>> BindSharded(py::module_& m, const char* name, const char* doc) {
  py::class_<Sharded<M>> cls(m, name, doc);
  cls.def(py::init<const Plugins&, std::shared_ptr<Group>, const std::string&, const std::string&, const std::string&,
                   bool, int64_t, const std::vector<const KeyedJaggedTensor*>&, const std::string&,
                   const std::vector<std::pair<std::string, std::string>>&, const std::string&, uint64_t,
                   const std::string&>(),
          py::arg("plugins"), py::arg("group"), py::arg("tables_json"), py::arg("sharder"), py::arg("plan_json"),
          py::arg("planner"), py::arg("batch_per_rank"), py::arg("samples"), py::arg("kernel"),
          py::arg("kernel_options"), py::arg("optimizer"), py::arg("init_seed"), py::arg("bounds_check"),
          py::keep_alive<1, 2>())
      .def("read_table", &Sharded<M>::ReadTable)
      .def("write_table", &Sharded<M>::WriteTable, py::arg("name"), py::arg("weights"), py::arg("state") = py::none())
      .def("save_checkpoint", &Sharded<M>::SaveCheckpoint, py::arg("root"), py::arg("step"), py::arg("iteration"),
           py::arg("keep_last") = 0)
      .def("load_checkpoint", &Sharded<M>::LoadCheckpoint, py::arg("dir"), py::arg("reset_optimizer") = false)
      .def("plan_json", &Sharded<M>::plan_json)
      .def("planner_report", &Sharded<M>::planner_report)
      .def("close", [](Sharded<M>& e) {
        py::gil_scoped_release release;
        e.Close();
      });
  return cls;
}

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

  BindSharded<ShardedEmbeddingBagCollection>(m, "ShardedEmbeddingBagCollectionImpl",
                                             "The C++ ShardedEmbeddingBagCollection.")
      .def("forward",
           [](ShardedEbc& e, const KeyedJaggedTensor& kjt) {
             int64_t invalid = 0;
             std::optional<KeyedTensor> kt;
             {
               py::gil_scoped_release release;
               kt = Unwrap(e.get().Forward(kjt, &invalid));
             }
             return py::make_tuple(CapsuleFromTensor(kt->values()), invalid);
           })
      .def("backward",
           [](ShardedEbc& e, const py::capsule& grad, int64_t iteration) {
             Tensor g = TensorFromCapsule(grad, "grad");
             py::gil_scoped_release release;
             Check(e.get().Backward(g, iteration));
           })
      .def("output_dist", [](ShardedEbc& e) { return std::string(e.get().output_dist()); });

  BindSharded<ShardedEmbeddingCollection>(m, "ShardedEmbeddingCollectionImpl", "The C++ ShardedEmbeddingCollection.")
      .def("forward",
           [](ShardedEc& e, const KeyedJaggedTensor& kjt) {
             int64_t invalid = 0;
             std::optional<std::map<std::string, JaggedTensor>> out;
             {
               py::gil_scoped_release release;
               out = Unwrap(e.get().Forward(kjt, &invalid));
             }
             return py::make_tuple(JaggedList(*out, kjt.keys()), invalid);
           })
      .def("backward", [](ShardedEc& e, const std::map<std::string, py::capsule>& grads, int64_t iteration) {
        std::map<std::string, Tensor> g = GradMap(grads);
        py::gil_scoped_release release;
        Check(e.get().Backward(g, iteration));
      });

  BindSharded<ShardedQuantEmbeddingBagCollection>(m, "ShardedQuantEmbeddingBagCollectionImpl",
                                                  "The C++ ShardedQuantEmbeddingBagCollection (inference sharding).")
      .def(
          "forward",
          // The rank holding the batch passes it and gets (values, invalid
          // ids); the others pass None and get (None, invalid ids).
          [](ShardedQebc& e, const KeyedJaggedTensor* kjt) -> py::tuple {
            int64_t invalid = 0;
            std::optional<std::optional<KeyedTensor>> kt;
            {
              py::gil_scoped_release release;
              kt = Unwrap(e.get().Forward(kjt, &invalid));
            }
            if (!kt->has_value()) return py::make_tuple(py::none(), invalid);
            return py::make_tuple(CapsuleFromTensor((*kt)->values()), invalid);
          },
          py::arg("kjt").none(true));

  m.def("shut_down_stores", &PythonStore::ShutDown,
        "At interpreter exit, after the groups closed: stores refuse every call from now on.");
}

}  // namespace shardrec::python
