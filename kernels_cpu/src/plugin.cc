// libshardrec_kernel_cpu.so: the plugin table and the one exported symbol.
// Component "cpu" of kind kernel, with its capability attributes (the keys
// are documented in docs/kernels.md, "Capability attributes").
#include "cpu_kernel.h"
#include "shardrec/sdk/plugin.hpp"

namespace {

namespace sdk = shardrec::sdk;

const char* const kDevices[] = {"cpu"};
const char* const kWeightDtypes[] = {"float32",      "float16",      "bfloat16",
                                     "int8_rowwise", "int4_rowwise", "int2_rowwise"};
const char* const kOutputDtypes[] = {"float32"};
const char* const kPoolings[] = {"sum", "mean", "none"};
const char* const kOptimizers[] = {"none", "sgd", "adagrad", "rowwise_adagrad", "adam"};
const char* const kStateDims[] = {"none=0", "sgd=0", "adagrad=dim", "rowwise_adagrad=1",
                                  "adam=2*dim"};
const char* const kBoundsModes[] = {"fatal", "warning", "ignore", "none"};
// The component's options (`--plugin-opt kernel.cpu.KEY=VALUE`); listed so
// hosts (e.g. `shardrec bench kernel --threads`) know what they may pass.
const char* const kOptions[] = {"threads", "prefetch_distance", "huge_pages"};

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
    Strings("options", kOptions),
};

const sr_component kComponents[] = {sdk::Component(
    SR_KIND_KERNEL, "cpu", "1.0",
    "CPU embedding kernels: pooled and sequence forward, backward fused with SGD, Adagrad, "
    "row-wise Adagrad and Adam, INT8/INT4/INT2 row-wise quantized inference tables (oneTBB + Highway)",
    &sdk::KernelVtable<shardrec::kernel_cpu::CpuKernel>(), sdk::List(kAttributes),
    /*priority=*/10)};

}  // namespace

SHARDREC_DEFINE_PLUGIN("cpu", "1.0", kComponents)
