// libshardrec_kernel_cuda.so: the plugin table and the one exported symbol.
// Component "cuda" of kind kernel, with the CPU kernel's capabilities on
// device "cuda". initialize() counts the GPUs; without one, create() answers
// SR_UNAVAILABLE with the driver's reason (a skip for the conformance kit).
// The library asks never to be unloaded: a CUDA runtime must not be
// dlclose'd while the process runs.
#include "cuda_kernel.h"
#include "device_probe.h"
#include "shardrec/sdk/plugin.hpp"

namespace {

namespace sdk = shardrec::sdk;

const char* const kDevices[] = {"cuda"};
const char* const kWeightDtypes[] = {"float32",      "float16",      "bfloat16",
                                     "int8_rowwise", "int4_rowwise", "int2_rowwise"};
const char* const kOutputDtypes[] = {"float32"};
const char* const kPoolings[] = {"sum", "mean", "none"};
const char* const kOptimizers[] = {"none", "sgd", "adagrad", "rowwise_adagrad", "adam"};
const char* const kStateDims[] = {"none=0", "sgd=0", "adagrad=dim", "rowwise_adagrad=1",
                                  "adam=2*dim"};
const char* const kBoundsModes[] = {"fatal", "warning", "ignore", "none"};

template <size_t N>
sr_named_value Strings(const char* name, const char* const (&items)[N]) {
  return sdk::StringListAttr(name, items, N);
}

const sr_named_value kAttributes[] = {
    Strings("devices", kDevices),
    Strings("weight_dtypes", kWeightDtypes),
    Strings("output_dtypes", kOutputDtypes),
    Strings("poolings", kPoolings),
    Strings("optimizers", kOptimizers),
    Strings("optimizer_state_dim", kStateDims),
    sdk::StringAttr("state_dtype", "float32"),
    sdk::BoolAttr("deterministic_backward", true),
    Strings("bounds_check_modes", kBoundsModes),
    sdk::BoolAttr("thread_safe", true),
    sdk::BoolAttr("never_unload", true),
};

const sr_component kComponents[] = {sdk::Component(
    SR_KIND_KERNEL, "cuda", "1.0",
    "CUDA embedding kernels: pooled and sequence forward, backward fused with SGD, Adagrad, "
    "row-wise Adagrad and Adam (ids sorted with CUB; no atomics on rows)",
    &sdk::KernelVtable<shardrec::kernel_cuda::CudaKernel>(), sdk::List(kAttributes),
    /*priority=*/5)};

[[maybe_unused]] const bool kHooked = sdk::OnInitialize([](const sr_host_api*) {
  std::string why;
  const int devices = shardrec::cuda::CountDevices(&why);
  shardrec::kernel_cuda::SetDeviceCount(devices, why);
  sdk::Log(SR_LOG_DEBUG, "kernel cuda",
           std::to_string(devices) + " CUDA device(s)" + (devices ? "" : ": " + why));
});

}  // namespace

SHARDREC_DEFINE_PLUGIN("cuda", "1.0", kComponents)
