// Creation and calls of the component wrappers.
#include "shardrec/core/plugin_objects.h"

#include <algorithm>
#include <mutex>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "device/device_staging.h"
#include "shardrec/core/dl_view.h"
#include "shardrec/core/tensor/tensor.h"
#include "shardrec/sdk/dtype.hpp"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec {
namespace {

// Creates a handle through `create` under the library's exception guard.
template <class H, class Create>
StatusOr<H*> CreateHandle(const ComponentRef& ref, Create&& create) {
  H* handle = nullptr;
  Status s = ref.library->Call("create", [&] { return create(&handle); });
  s = s.ok() ? s
             : Status(s.code(), std::string(KindName(ref.kind())) + " " + ref.name() + ": " +
                                    s.message());
  if (!s.ok()) return s;
  if (handle == nullptr) {
    return InternalError(std::string(KindName(ref.kind())) + " " + ref.name() +
                         ": create returned success but no object");
  }
  return handle;
}

Status CheckKind(const ComponentRef& ref, int32_t kind) {
  if (ref.component == nullptr) return InvalidArgumentError("no component given");
  if (ref.kind() != kind) {
    return InvalidArgumentError("component '" + ref.name() + "' is a " + KindName(ref.kind()) +
                                ", not a " + KindName(kind));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<EvictionPolicy> EvictionPolicy::Create(const ComponentRef& ref,
                                                const OptionList& options) {
  SR_RETURN_IF_ERROR(CheckKind(ref, SR_KIND_EVICTION));
  auto* vt = static_cast<const sr_eviction_vtable*>(ref.vtable());
  SR_ASSIGN_OR_RETURN(sr_eviction_policy * h, CreateHandle<sr_eviction_policy>(ref, [&](auto** out) {
                        return vt->create(options.view(), out);
                      }));
  return EvictionPolicy(ref, h);
}

Status EvictionPolicy::Score(const sr_eviction_score_args& args) const {
  return Call("score", [&] { return vtable().score(handle(), &args); });
}

Status EvictionPolicy::ScoreEntries(int64_t now, size_t residents, std::span<const int64_t> counts,
                                    std::span<const int64_t> lasts, std::span<const int64_t> windows,
                                    std::span<const int64_t> metadata, int64_t columns,
                                    std::span<double> scores) const {
  const auto n = static_cast<int64_t>(scores.size());
  if (counts.size() != scores.size() || lasts.size() != scores.size() || windows.size() != scores.size() ||
      residents > scores.size() || metadata.size() != (metadata.empty() ? 0 : scores.size() * columns)) {
    AbortOnMisuse("EvictionPolicy::ScoreEntries: arrays of different lengths");
  }
  DLView counts_view(counts.data(), {n}), lasts_view(lasts.data(), {n}), windows_view(windows.data(), {n}),
      scores_view(scores.data(), {n}), metadata_view(metadata.data(), {n, columns});
  sr_eviction_score_args args{};
  args.struct_size = SR_STRUCT_SIZE(sr_eviction_score_args, scores);
  args.now = now;
  args.num_resident = residents;
  args.num_candidates = scores.size() - residents;
  args.counts = counts_view.get();
  args.last_access = lasts_view.get();
  args.window_counts = windows_view.get();
  args.metadata = metadata.empty() ? nullptr : metadata_view.get();
  args.scores = scores_view.get();
  return Score(args);
}

Status EvictionPolicy::Select(const sr_eviction_select_args& args) const {
  if (!HasSelect()) return UnimplementedError(Describe() + ": has no select entry");
  return Call("select", [&] { return vtable().select(handle(), &args); });
}

StatusOr<Codec> Codec::Create(const ComponentRef& ref, const OptionList& options) {
  SR_RETURN_IF_ERROR(CheckKind(ref, SR_KIND_CODEC));
  auto* vt = static_cast<const sr_codec_vtable*>(ref.vtable());
  SR_ASSIGN_OR_RETURN(sr_codec * h, CreateHandle<sr_codec>(ref, [&](auto** out) {
                        sr_codec_create_args a{};
                        a.struct_size = SR_STRUCT_SIZE(sr_codec_create_args, options);
                        a.options = options.view();
                        return vt->create(&a, out);
                      }));
  DLDataType dtype{};
  Codec codec(ref, h, dtype);
  SR_RETURN_IF_ERROR(codec.Call("quantized_dtype", [&] { return vt->quantized_dtype(h, &dtype); }));
  const bool known = (dtype.code == kDLFloat && dtype.bits == 16) || (dtype.code == kDLBfloat && dtype.bits == 16) ||
                     (dtype.code == kDLUInt && dtype.bits == 8) || (dtype.code == kDLInt && dtype.bits == 8) ||
                     (dtype.code == kDLFloat && dtype.bits == 32);
  if (!known || dtype.lanes != 1) {
    return InvalidArgumentError(codec.Describe() + ": quantized_dtype " + sdk::DTypeName(dtype) +
                                " is not one a collective carries (float16, bfloat16, uint8, int8, float32)");
  }
  codec.dtype_ = dtype;
  return codec;
}

StatusOr<int64_t> Codec::QuantizedSize(int64_t rows, int64_t cols) const {
  int64_t n = -1;
  SR_RETURN_IF_ERROR(Call("quantized_size", [&] { return vtable().quantized_size(handle(), rows, cols, &n); }));
  if (n < 0) return InternalError(fmt::format("{}: quantized_size({}, {}) is negative ({})", Describe(), rows, cols, n));
  // A codec exists to shrink blocks: one that would make a block larger than
  // its float32 bytes plus 64 bytes a row (room for per-row parameters) is
  // refused before the host allocates what it asks for.
  const long double bytes = static_cast<long double>(n) * static_cast<long double>(quantized_element_bytes());
  const long double limit = 4.0L * rows * cols + 64.0L * rows + 4096.0L;
  if (bytes > limit) {
    return InternalError(fmt::format("{}: quantized_size({}, {}) is {} elements ({} bytes), more than the block's "
                                     "{} float32 bytes plus 64 a row",
                                     Describe(), rows, cols, n, static_cast<double>(bytes), 4 * rows * cols));
  }
  return n;
}

namespace {
// A flat CPU DLTensor over `n` elements at `data`.
DLTensor Flat(const void* data, DLDataType dtype, int64_t* n) {
  DLTensor t{};
  t.data = const_cast<void*>(data);
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = dtype;
  t.shape = n;
  return t;
}
}  // namespace

Status Codec::Block(bool encode, const void* in, int64_t rows, int64_t cols, void* out) const {
  SR_ASSIGN_OR_RETURN(int64_t q, QuantizedSize(rows, cols));
  int64_t n = rows * cols;
  constexpr DLDataType kF32{kDLFloat, 32, 1};
  const DLTensor input = encode ? Flat(in, kF32, &n) : Flat(in, dtype_, &q);
  DLTensor output = encode ? Flat(out, dtype_, &q) : Flat(out, kF32, &n);
  sr_codec_block_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_codec_block_args, output);
  a.rows = rows;
  a.cols = cols;
  a.input = &input;
  a.output = &output;
  return encode ? Call("encode", [&] { return vtable().encode(handle(), &a); })
                : Call("decode", [&] { return vtable().decode(handle(), &a); });
}

StatusOr<Sharder> Sharder::Create(const ComponentRef& ref, const OptionList& options) {
  SR_RETURN_IF_ERROR(CheckKind(ref, SR_KIND_SHARDER));
  auto* vt = static_cast<const sr_sharder_vtable*>(ref.vtable());
  SR_ASSIGN_OR_RETURN(sr_sharder * h, CreateHandle<sr_sharder>(ref, [&](auto** out) {
                        return vt->create(options.view(), out);
                      }));
  return Sharder(ref, h);
}

Status Sharder::ShardTable(const sr_shard_table_args& args) const {
  return Call("shard_table", [&] { return vtable().shard_table(handle(), &args); });
}

Status Sharder::RouteIds(const sr_route_ids_args& args) const {
  if (!HasRouteIds()) return UnimplementedError(Describe() + " has no route_ids");
  return Call("route_ids", [&] { return vtable().route_ids(handle(), &args); });
}

Status Sharder::EstimateStorage(const sr_estimate_storage_args& args) const {
  if (!HasEstimateStorage()) return UnimplementedError(Describe() + " has no estimate_storage");
  return Call("estimate_storage", [&] { return vtable().estimate_storage(handle(), &args); });
}

Status Sharder::EstimateCost(const sr_estimate_cost_args& args) const {
  if (!HasEstimateCost()) return UnimplementedError(Describe() + " has no estimate_cost");
  return Call("estimate_cost", [&] { return vtable().estimate_cost(handle(), &args); });
}

StatusOr<Kernel> Kernel::Create(const ComponentRef& ref, const std::vector<sr_kernel_table>& tables,
                                int32_t optimizer, const OptionList& optimizer_params,
                                const OptionList& options, DLDevice device) {
  sr_kernel_create_args args{};
  args.struct_size = SR_STRUCT_SIZE(sr_kernel_create_args, options);
  args.device = device;
  args.tables = tables.data();
  args.num_tables = tables.size();
  args.optimizer = optimizer;
  args.optimizer_params = optimizer_params.view();
  args.options = options.view();
  return Create(ref, args);
}

Kernel::Kernel(ComponentRef ref, sr_kernel* handle, DLDevice device, std::unique_ptr<DeviceStaging> staging)
    : PluginObject(std::move(ref), handle), device_(device), staging_(std::move(staging)) {}
Kernel::Kernel(Kernel&&) noexcept = default;

DLDevice DeviceFor(const ComponentRef& ref, int gpu) {
  const auto devices = ref.StringListAttribute("devices");
  if (!devices || devices->empty()) return DLDevice{kDLCPU, 0};
  bool cpu = false, cuda = false;
  for (const std::string& d : *devices) {
    cpu |= d == "cpu";
    cuda |= d == "cuda";
  }
  return cuda && !cpu ? DLDevice{kDLCUDA, gpu < 0 ? 0 : gpu} : DLDevice{kDLCPU, 0};
}

Status CheckKernelOptimizer(const ComponentRef& kernel, int32_t optimizer) {
  const auto listed = kernel.StringListAttribute("optimizers");
  if (!listed) return Status::Ok();
  const std::string name = sdk::OptimizerName(optimizer);
  if (std::find(listed->begin(), listed->end(), name) != listed->end()) return Status::Ok();
  return Status(SR_FAILED_PRECONDITION,
                fmt::format("kernel '{}' has no optimizer '{}' (it has: {})", kernel.name(), name,
                            listed->empty() ? std::string("none listed") : fmt::format("{}", fmt::join(*listed, ", "))));
}

Kernel& Kernel::operator=(Kernel&&) noexcept = default;
Kernel::~Kernel() = default;

StatusOr<Kernel> Kernel::Create(const ComponentRef& ref, const sr_kernel_create_args& args) {
  SR_RETURN_IF_ERROR(CheckKind(ref, SR_KIND_KERNEL));
  auto* vt = static_cast<const sr_kernel_vtable*>(ref.vtable());
  SR_ASSIGN_OR_RETURN(sr_kernel * h,
                      CreateHandle<sr_kernel>(ref, [&](auto** out) { return vt->create(&args, out); }));
  std::unique_ptr<DeviceStaging> staging;
  if (args.device.device_type == kDLCUDA) {
    auto created = DeviceStaging::Create(args.device.device_id);
    if (!created.ok()) {
      vt->destroy(h);
      return created.status().WithContext("kernel '" + ref.name() + "': staging stream");
    }
    staging = std::move(created).value();
  }
  return Kernel(ref, h, args.device, std::move(staging));
}

StatusOr<sr_kernel_table_info> Kernel::TableInfo(int32_t table) const {
  sr_kernel_table_info info{};
  info.struct_size = SR_STRUCT_SIZE(sr_kernel_table_info, row_quantization);
  SR_RETURN_IF_ERROR(Call("get_table_info", [&] {
    return vtable().get_table_info(handle(), table, &info);
  }));
  // A 1.0-1.3 kernel leaves the 1.4 fields zero: its rows are dim elements.
  if (info.row_bytes == 0) info.row_bytes = info.dim * static_cast<int64_t>(DTypeSize(info.weight_dtype));
  return info;
}

namespace {

// The lookup of a call with its host tensors staged; the call then runs on
// the staging stream.
Status StageLookup(DeviceStaging& staging, sr_kernel_lookup_args& lookup) {
  SR_ASSIGN_OR_RETURN(lookup.offsets, staging.In(lookup.offsets));
  SR_ASSIGN_OR_RETURN(lookup.indices, staging.In(lookup.indices));
  SR_ASSIGN_OR_RETURN(lookup.per_sample_weights, staging.In(lookup.per_sample_weights));
  return Status::Ok();
}

StatusOr<DLTensor*> Mutable(StatusOr<const DLTensor*> t) {
  if (!t.ok()) return t.status();
  return const_cast<DLTensor*>(*t);
}

// `call`'s status, else the staging's (the copies back and the wait).
Status Finished(DeviceStaging& staging, Status call) {
  Status finished = staging.Finish();
  return call.ok() ? finished : call;
}

// forward / backward with the lookup's host tensors and `matrix` (args.*
// `member`: the output, staged out, or the gradient, staged in) staged;
// `invoke(args)` makes the call.
template <class Args, class Matrix, class Invoke>
Status StagedLookupCall(DeviceStaging& staging, const Args& args, Matrix Args::*member, bool matrix_is_output,
                        Invoke&& invoke) {
  std::lock_guard<std::mutex> lock(staging.mutex());
  sr_kernel_lookup_args lookup = *args.lookup;
  Args a = args;
  Status s = StageLookup(staging, lookup);
  if (s.ok()) {
    StatusOr<DLTensor*> matrix = matrix_is_output ? staging.Out(const_cast<DLTensor*>(args.*member))
                                                  : Mutable(staging.In(args.*member));
    s = matrix.status();
    if (s.ok()) a.*member = *matrix;
  }
  if (s.ok()) {
    if (staging.staged()) lookup.stream = staging.stream();
    a.lookup = &lookup;
    s = invoke(a);
  }
  return Finished(staging, std::move(s));
}

}  // namespace

Status Kernel::Forward(const sr_kernel_forward_args& args) const {
  auto call = [&](const sr_kernel_forward_args& a) {
    return Call("forward", [&] { return vtable().forward(handle(), &a); });
  };
  if (!staging_ || args.lookup == nullptr) return call(args);
  return StagedLookupCall(*staging_, args, &sr_kernel_forward_args::output, /*matrix_is_output=*/true, call);
}

Status Kernel::Backward(const sr_kernel_backward_args& args) const {
  if (!HasBackward()) return UnimplementedError(Describe() + ": inference only (no backward entry)");
  auto call = [&](const sr_kernel_backward_args& a) {
    return Call("backward", [&] { return vtable().backward(handle(), &a); });
  };
  if (!staging_ || args.lookup == nullptr) return call(args);
  return StagedLookupCall(*staging_, args, &sr_kernel_backward_args::grad_output, /*matrix_is_output=*/false, call);
}

Status Kernel::RowsCall(const char* what, const sr_kernel_rows_args& args, bool writes_tensors,
                        sr_status* (*sr_kernel_vtable::*entry)(sr_kernel*, const sr_kernel_rows_args*)) const {
  if (!staging_) return Call(what, [&] { return (vtable().*entry)(handle(), &args); });
  std::lock_guard<std::mutex> lock(staging_->mutex());
  sr_kernel_rows_args a = args;
  Status s = Status::Ok();
  auto stage = [&](DLTensor* t) -> DLTensor* {
    if (!s.ok() || t == nullptr) return t;
    StatusOr<DLTensor*> staged = writes_tensors ? staging_->Out(t) : Mutable(staging_->In(t));
    s = staged.status();
    return s.ok() ? *staged : t;
  };
  if (auto rows = staging_->In(args.rows); rows.ok()) {
    a.rows = *rows;  // an input whatever the entry
  } else {
    s = rows.status();
  }
  a.weights = stage(args.weights);
  a.state = stage(args.state);
  if (s.ok()) {
    if (staging_->staged()) a.stream = staging_->stream();
    s = Call(what, [&] { return (vtable().*entry)(handle(), &a); });
  }
  return Finished(*staging_, std::move(s));
}

Status Kernel::ReadRows(const sr_kernel_rows_args& args) const {
  return RowsCall("read_rows", args, /*writes_tensors=*/true, &sr_kernel_vtable::read_rows);
}

Status Kernel::WriteRows(const sr_kernel_rows_args& args) const {
  return RowsCall("write_rows", args, /*writes_tensors=*/false, &sr_kernel_vtable::write_rows);
}

Status Kernel::ResetRows(const sr_kernel_rows_args& args) const {
  return RowsCall("reset_rows", args, /*writes_tensors=*/false, &sr_kernel_vtable::reset_rows);
}

CommRequest::~CommRequest() {
  if (request_ != nullptr) vt().request_destroy(request_);
}

StatusOr<bool> CommRequest::Test() const {
  if (request_ == nullptr) return true;  // Completed()
  int32_t done = 0;
  Status s = ref_.library->Call("request test", [&] { return vt().request_test(request_, &done); });
  if (!s.ok()) return Status(s.code(), "comm " + ref_.name() + ": " + s.message());
  return done != 0;
}

Status CommRequest::Wait(int64_t timeout_ms) const {
  if (request_ == nullptr) return Status::Ok();  // Completed()
  Status s =
      ref_.library->Call("request wait", [&] { return vt().request_wait(request_, timeout_ms); });
  return s.ok() ? s : Status(s.code(), "comm " + ref_.name() + ": " + s.message());
}

StatusOr<Communicator> Communicator::Create(const ComponentRef& ref,
                                            const sr_comm_create_args& args) {
  SR_RETURN_IF_ERROR(CheckKind(ref, SR_KIND_COMM));
  auto* vt = static_cast<const sr_comm_vtable*>(ref.vtable());
  SR_ASSIGN_OR_RETURN(sr_communicator * h, CreateHandle<sr_communicator>(ref, [&](auto** out) {
                        return vt->create(&args, out);
                      }));
  return Communicator(ref, h);
}

StatusOr<Communicator> Communicator::Split(int32_t color, int32_t key) const {
  sr_communicator* sub = nullptr;
  SR_RETURN_IF_ERROR(Call("split", [&] { return vtable().split(handle(), color, key, &sub); }));
  if (sub == nullptr) return InternalError(Describe() + ": split returned success but no communicator");
  return Communicator(component(), sub);
}

template <class Entry>
StatusOr<CommRequest> Communicator::Post(const char* what, Entry&& entry) const {
  sr_request* request = nullptr;
  SR_RETURN_IF_ERROR(Call(what, [&] { return entry(&request); }));
  if (request == nullptr) return InternalError(Describe() + ": " + what + " returned no request");
  return CommRequest(component(), request);
}

StatusOr<CommRequest> Communicator::AllToAllV(const sr_collective_args& args) const {
  return Post("all_to_all_v", [&](sr_request** r) { return vtable().all_to_all_v(handle(), &args, r); });
}
StatusOr<CommRequest> Communicator::ReduceScatterV(const sr_collective_args& args) const {
  return Post("reduce_scatter_v",
              [&](sr_request** r) { return vtable().reduce_scatter_v(handle(), &args, r); });
}
StatusOr<CommRequest> Communicator::AllGatherV(const sr_collective_args& args) const {
  return Post("all_gather_v", [&](sr_request** r) { return vtable().all_gather_v(handle(), &args, r); });
}
StatusOr<CommRequest> Communicator::AllReduce(const sr_collective_args& args) const {
  return Post("all_reduce", [&](sr_request** r) { return vtable().all_reduce(handle(), &args, r); });
}
StatusOr<CommRequest> Communicator::Broadcast(const sr_collective_args& args) const {
  return Post("broadcast", [&](sr_request** r) { return vtable().broadcast(handle(), &args, r); });
}
StatusOr<CommRequest> Communicator::Barrier() const {
  return Post("barrier", [&](sr_request** r) { return vtable().barrier(handle(), r); });
}

}  // namespace shardrec
