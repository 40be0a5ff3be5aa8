// The conformance kit's driver: library-level checks, then each component's
// kind-specific checks.
#include "shardrec/core/conformance.h"

#include "recorder.h"

namespace shardrec {

const char* CheckResultName(CheckResult r) {
  switch (r) {
    case CheckResult::kPass: return "PASS";
    case CheckResult::kFail: return "FAIL";
    case CheckResult::kSkip: return "SKIP";
  }
  return "?";
}

std::vector<ConformanceCheck> RunConformance(const std::shared_ptr<PluginLibrary>& library,
                                             const PluginOptions& options) {
  std::vector<ConformanceCheck> out;
  conformance::Recorder lib(&out, "library " + library->name());
  // Loading already validated the table (PluginLibrary::Load); say so.
  lib.Pass("loads with ABI " + library->AbiVersion() + ", entry symbol, names and vtables valid, "
           "initialize succeeded");
  lib.Expect(library->api().num_components > 0, "carries at least one component",
             "num_components is 0");

  for (const ComponentRef& ref : library->Components()) {
    conformance::Recorder rec(&out, std::string(KindName(ref.kind())) + " " + ref.name());
    const OptionList opts = options.For(KindName(ref.kind()), ref.name());
    rec.Expect(ref.component->version != nullptr && ref.component->description != nullptr,
               "declares a version and a description", "version or description is NULL");
    switch (ref.kind()) {
      case SR_KIND_EVICTION: conformance::CheckEviction(ref, opts, rec); break;
      case SR_KIND_SHARDER: conformance::CheckSharder(ref, opts, rec); break;
      case SR_KIND_KERNEL: conformance::CheckKernel(ref, opts, rec); break;
      case SR_KIND_COMM: conformance::CheckComm(ref, opts, rec); break;
      case SR_KIND_CODEC: conformance::CheckCodec(ref, opts, rec); break;
      default: rec.Fail("kind", "unknown kind"); break;
    }
  }
  return out;
}

}  // namespace shardrec
