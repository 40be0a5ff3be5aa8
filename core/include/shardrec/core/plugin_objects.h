// C++ wrappers over the component vtables. Each object holds a ComponentRef
// (so its library stays loaded), owns one plugin-created handle and destroys
// it with the vtable's destroy, and turns every sr_status into a Status. The
// rest of core talks to plugins only through these.
//
// Thread-safety: as the plugin declares in its attributes ("thread_safe");
// the wrappers add no locking.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shardrec/core/plugin_library.h"
#include "shardrec/core/plugin_options.h"
#include "shardrec/core/status.h"
#include "shardrec/plugin_api.h"

namespace shardrec {

// Owns one handle of type H created through vtable VT.
template <class VT, class H>
class PluginObject {
 public:
  PluginObject(PluginObject&& o) noexcept
      : ref_(std::move(o.ref_)), vt_(o.vt_), handle_(std::exchange(o.handle_, nullptr)) {}
  PluginObject& operator=(PluginObject&& o) noexcept {
    if (this != &o) {
      Reset();
      ref_ = std::move(o.ref_);
      vt_ = o.vt_;
      handle_ = std::exchange(o.handle_, nullptr);
    }
    return *this;
  }
  ~PluginObject() { Reset(); }

  const ComponentRef& component() const { return ref_; }
  const VT& vtable() const { return *vt_; }
  H* handle() const { return handle_; }
  // "eviction lru"
  std::string Describe() const { return std::string(KindName(ref_.kind())) + " " + ref_.name(); }

 protected:
  PluginObject(ComponentRef ref, H* handle)
      : ref_(std::move(ref)), vt_(static_cast<const VT*>(ref_.vtable())), handle_(handle) {}

  // Calls one entry; the message prefix ("eviction lru: score") is built
  // only when the plugin reports an error.
  template <class Entry>
  Status Call(const char* what, Entry&& entry) const {
    Status s = ref_.library->Call(what, std::forward<Entry>(entry));
    return s.ok() ? s : Status(s.code(), Describe() + ": " + s.message());
  }
  // True when the plugin's vtable is large enough to hold `field` and it is
  // set: how optional and newer-minor entries are reached (ABI rules 2-3).
  template <class F>
  bool Has(F VT::*field) const {
    const VT probe{};
    const size_t end = static_cast<size_t>(reinterpret_cast<const char*>(&(probe.*field)) -
                                           reinterpret_cast<const char*>(&probe)) +
                       sizeof(F);
    return vt_->struct_size >= end && vt_->*field != nullptr;
  }

 private:
  void Reset() {
    if (handle_ != nullptr) vt_->destroy(handle_);
    handle_ = nullptr;
  }

  ComponentRef ref_;
  const VT* vt_ = nullptr;
  H* handle_ = nullptr;
};

class EvictionPolicy : public PluginObject<sr_eviction_vtable, sr_eviction_policy> {
 public:
  static StatusOr<EvictionPolicy> Create(const ComponentRef& ref, const OptionList& options);
  // Fills args.scores. See sr_eviction_vtable.score.
  Status Score(const sr_eviction_score_args& args) const;
  // Score over plain arrays: entries [0, residents) are residents, the rest
  // candidates; `metadata` is [entries, columns] (empty: none). Every
  // array holds one value per entry; `scores` gets them.
  Status ScoreEntries(int64_t now, size_t residents, std::span<const int64_t> counts, std::span<const int64_t> lasts,
                      std::span<const int64_t> windows, std::span<const int64_t> metadata, int64_t columns,
                      std::span<double> scores) const;
  bool HasSelect() const { return Has(&sr_eviction_vtable::select); }
  Status Select(const sr_eviction_select_args& args) const;

 private:
  using PluginObject::PluginObject;
};

class Sharder : public PluginObject<sr_sharder_vtable, sr_sharder> {
 public:
  static StatusOr<Sharder> Create(const ComponentRef& ref, const OptionList& options);
  // The raw entry; args.shards may be too small (see sr_shard_table_args).
  Status ShardTable(const sr_shard_table_args& args) const;
  bool HasRouteIds() const { return Has(&sr_sharder_vtable::route_ids); }
  // The sharder's own id routing (only when HasRouteIds()).
  Status RouteIds(const sr_route_ids_args& args) const;
  bool HasEstimateStorage() const { return Has(&sr_sharder_vtable::estimate_storage); }
  // The raw entries (only when Has...()); args as abi/sharder.h says.
  Status EstimateStorage(const sr_estimate_storage_args& args) const;
  // ABI 1.3: the planner's lookup shares (sr_estimate_cost_args).
  bool HasEstimateCost() const { return Has(&sr_sharder_vtable::estimate_cost); }
  Status EstimateCost(const sr_estimate_cost_args& args) const;

 private:
  using PluginObject::PluginObject;
};

// A quantized comm codec (abi/codec.h, ABI 1.2). Encode and Decode may be
// called from several threads at once (the ABI requires codecs to allow it).
class Codec : public PluginObject<sr_codec_vtable, sr_codec> {
 public:
  static StatusOr<Codec> Create(const ComponentRef& ref, const OptionList& options);
  // The element type of encoded blocks, and its size in bytes.
  DLDataType quantized_dtype() const { return dtype_; }
  size_t quantized_element_bytes() const { return (dtype_.bits * dtype_.lanes + 7u) / 8u; }
  // Elements of quantized_dtype() a rows x cols block encodes to.
  StatusOr<int64_t> QuantizedSize(int64_t rows, int64_t cols) const;
  // in: rows x cols float32 values; out: QuantizedSize(rows, cols) elements.
  Status Encode(const float* in, int64_t rows, int64_t cols, void* out) const { return Block(true, in, rows, cols, out); }
  Status Decode(const void* in, int64_t rows, int64_t cols, float* out) const { return Block(false, in, rows, cols, out); }

 private:
  Codec(ComponentRef ref, sr_codec* handle, DLDataType dtype)
      : PluginObject(std::move(ref), handle), dtype_(dtype) {}
  // One block through encode (float32 in) or decode (float32 out).
  Status Block(bool encode, const void* in, int64_t rows, int64_t cols, void* out) const;
  DLDataType dtype_;
};

class DeviceStaging;  // core/src/device/device_staging.h

// Where to create an object of component `ref` (a kernel, a communicator):
// the CPU when it lists "cpu" among its "devices" attribute (or lists
// none), else cuda:gpu (gpu < 0: cuda:0).
DLDevice DeviceFor(const ComponentRef& ref, int gpu);

// Whether a kernel component lists `optimizer` (SR_OPTIMIZER_*) in its
// "optimizers" attribute; FAILED_PRECONDITION naming the kernel and the
// optimizers it has otherwise. A kernel that declares no list is taken at
// its word by create.
Status CheckKernelOptimizer(const ComponentRef& kernel, int32_t optimizer);

// A kernel object. When its device is a GPU, calls may still pass host
// tensors: they are staged to the device and outputs copied back before the
// call returns (DeviceStaging); device tensors pass straight through.
class Kernel : public PluginObject<sr_kernel_vtable, sr_kernel> {
 public:
  Kernel(Kernel&&) noexcept;
  Kernel& operator=(Kernel&&) noexcept;
  ~Kernel();
  static StatusOr<Kernel> Create(const ComponentRef& ref, const sr_kernel_create_args& args);
  // The same with the create args filled in from host-side values.
  static StatusOr<Kernel> Create(const ComponentRef& ref, const std::vector<sr_kernel_table>& tables,
                                 int32_t optimizer, const OptionList& optimizer_params,
                                 const OptionList& options, DLDevice device = {kDLCPU, 0});
  StatusOr<sr_kernel_table_info> TableInfo(int32_t table) const;
  Status Forward(const sr_kernel_forward_args& args) const;
  bool HasBackward() const { return Has(&sr_kernel_vtable::backward); }
  // UNIMPLEMENTED for an inference-only kernel (no backward entry).
  Status Backward(const sr_kernel_backward_args& args) const;
  Status ReadRows(const sr_kernel_rows_args& args) const;
  Status WriteRows(const sr_kernel_rows_args& args) const;
  Status ResetRows(const sr_kernel_rows_args& args) const;

  // The device the kernel was created on.
  DLDevice device() const { return device_; }

 private:
  Kernel(ComponentRef ref, sr_kernel* handle, DLDevice device,
         std::unique_ptr<DeviceStaging> staging);
  // read_rows / write_rows / reset_rows with their host tensors staged;
  // `writes_tensors`: weights and state are outputs (read_rows).
  Status RowsCall(const char* what, const sr_kernel_rows_args& args, bool writes_tensors,
                  sr_status* (*sr_kernel_vtable::*entry)(sr_kernel*, const sr_kernel_rows_args*)) const;

  DLDevice device_{kDLCPU, 0};
  std::unique_ptr<DeviceStaging> staging_;
};

// An outstanding collective. Destroying an incomplete request is allowed
// only after its communicator failed (sr_comm_vtable); Wait() first.
class CommRequest {
 public:
  CommRequest(CommRequest&& o) noexcept
      : ref_(std::move(o.ref_)), request_(std::exchange(o.request_, nullptr)) {}
  CommRequest& operator=(CommRequest&&) = delete;
  ~CommRequest();
  // A request that is already complete (a collective that finished inside
  // its post, e.g. staged through a GPU).
  static CommRequest Completed() { return CommRequest(ComponentRef(), nullptr); }

  // True once complete; an error if the collective failed.
  StatusOr<bool> Test() const;
  // Blocks up to timeout_ms (< 0: the communicator's default).
  Status Wait(int64_t timeout_ms = -1) const;

 private:
  friend class Communicator;
  CommRequest(ComponentRef ref, sr_request* request) : ref_(std::move(ref)), request_(request) {}
  const sr_comm_vtable& vt() const { return *static_cast<const sr_comm_vtable*>(ref_.vtable()); }
  ComponentRef ref_;
  sr_request* request_ = nullptr;
};

class Communicator : public PluginObject<sr_comm_vtable, sr_communicator> {
 public:
  static StatusOr<Communicator> Create(const ComponentRef& ref, const sr_comm_create_args& args);
  StatusOr<Communicator> Split(int32_t color, int32_t key) const;
  StatusOr<CommRequest> AllToAllV(const sr_collective_args& args) const;
  StatusOr<CommRequest> ReduceScatterV(const sr_collective_args& args) const;
  StatusOr<CommRequest> AllGatherV(const sr_collective_args& args) const;
  StatusOr<CommRequest> AllReduce(const sr_collective_args& args) const;
  StatusOr<CommRequest> Broadcast(const sr_collective_args& args) const;
  StatusOr<CommRequest> Barrier() const;

 private:
  using PluginObject::PluginObject;
  template <class Entry>
  StatusOr<CommRequest> Post(const char* what, Entry&& entry) const;
};

}  // namespace shardrec
