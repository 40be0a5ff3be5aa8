// Creation and calls of the component wrappers.
#include "shardrec/core/plugin_objects.h"

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

Status EvictionPolicy::Select(const sr_eviction_select_args& args) const {
  if (!HasSelect()) return UnimplementedError(Describe() + ": has no select entry");
  return Call("select", [&] { return vtable().select(handle(), &args); });
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

StatusOr<Kernel> Kernel::Create(const ComponentRef& ref, const sr_kernel_create_args& args) {
  SR_RETURN_IF_ERROR(CheckKind(ref, SR_KIND_KERNEL));
  auto* vt = static_cast<const sr_kernel_vtable*>(ref.vtable());
  SR_ASSIGN_OR_RETURN(sr_kernel * h,
                      CreateHandle<sr_kernel>(ref, [&](auto** out) { return vt->create(&args, out); }));
  return Kernel(ref, h);
}

StatusOr<sr_kernel_table_info> Kernel::TableInfo(int32_t table) const {
  sr_kernel_table_info info{};
  info.struct_size = SR_STRUCT_SIZE(sr_kernel_table_info, bytes);
  SR_RETURN_IF_ERROR(Call("get_table_info", [&] {
    return vtable().get_table_info(handle(), table, &info);
  }));
  return info;
}

}  // namespace shardrec
