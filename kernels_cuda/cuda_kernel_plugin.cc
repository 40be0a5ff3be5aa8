// The CUDA compute-kernel plugin's C face (placeholder stage): component
// "cuda" of kind kernel. initialize() counts devices; create() refuses with
// UNAVAILABLE when there is no GPU and UNIMPLEMENTED when there is one, until
// the CUDA kernel issue lands. The library asks never to be unloaded, since a
// CUDA runtime must not be dlclose'd while the process runs.
#include <string>

#include "device_probe.h"
#include "shardrec/sdk/plugin.hpp"

namespace {

int g_devices = 0;
std::string g_no_device_reason;

class CudaKernel {
 public:
  explicit CudaKernel(const sr_kernel_create_args& args) {
    if (g_devices == 0) throw shardrec::sdk::Error(SR_UNAVAILABLE, g_no_device_reason);
    const std::string smoke = shardrec::cuda::SmokeTest(args.device.device_type == kDLCUDA
                                                            ? args.device.device_id
                                                            : 0);
    if (!smoke.empty()) throw shardrec::sdk::Error(SR_UNAVAILABLE, "CUDA smoke test: " + smoke);
    throw shardrec::sdk::Unimplemented(
        "the CUDA embedding kernels are not implemented yet (CUDA kernel issue); " +
        std::to_string(g_devices) + " device(s) found and the smoke-test kernel ran");
  }
  void TableInfo(int32_t, sr_kernel_table_info*) {}
  void Forward(const sr_kernel_forward_args&) {}
  void ReadRows(const sr_kernel_rows_args&) {}
  void WriteRows(const sr_kernel_rows_args&) {}
  void ResetRows(const sr_kernel_rows_args&) {}
};

const char* const kDevices[] = {"cuda"};
const sr_named_value kAttributes[] = {
    shardrec::sdk::StringListAttr("devices", kDevices, 1),
    shardrec::sdk::BoolAttr("never_unload", true),
};

const sr_component kComponents[] = {shardrec::sdk::Component(
    SR_KIND_KERNEL, "cuda", "0.1.0", "CUDA embedding kernels (placeholder: device discovery only)",
    &shardrec::sdk::KernelVtable<CudaKernel>(), shardrec::sdk::List(kAttributes))};

[[maybe_unused]] const bool kHooked = shardrec::sdk::OnInitialize([](const sr_host_api*) {
  g_devices = shardrec::cuda::CountDevices(&g_no_device_reason);
  shardrec::sdk::Log(SR_LOG_DEBUG, "kernel cuda",
                     std::to_string(g_devices) + " CUDA device(s)" +
                         (g_devices ? "" : ": " + g_no_device_reason));
});

}  // namespace

SHARDREC_DEFINE_PLUGIN("cuda", "0.1.0", kComponents)
