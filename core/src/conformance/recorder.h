// Shared plumbing of the conformance checks: a recorder that turns Status
// values and expectations into ConformanceCheck lines.
#pragma once

#include <string>
#include <vector>

#include "shardrec/core/conformance.h"
#include "shardrec/core/plugin_library.h"
#include "shardrec/core/plugin_options.h"
#include "shardrec/core/status.h"

namespace shardrec::conformance {

class Recorder {
 public:
  Recorder(std::vector<ConformanceCheck>* out, std::string component)
      : out_(out), component_(std::move(component)) {}

  void Pass(const std::string& check) { Add(check, CheckResult::kPass, ""); }
  void Fail(const std::string& check, const std::string& why) { Add(check, CheckResult::kFail, why); }
  void Skip(const std::string& check, const std::string& why) { Add(check, CheckResult::kSkip, why); }
  // Pass when `ok`, else fail with `why`. Returns ok.
  bool Expect(bool ok, const std::string& check, const std::string& why) {
    ok ? Pass(check) : Fail(check, why);
    return ok;
  }
  // Pass when `s` is OK, else fail with its message. Returns s.ok().
  bool ExpectOk(const Status& s, const std::string& check) {
    return Expect(s.ok(), check, s.ToString());
  }
  // Pass when `s` is an error with `code` and a non-empty message.
  bool ExpectError(const Status& s, int32_t code, const std::string& check) {
    if (s.ok()) return Expect(false, check, "the call succeeded");
    return Expect(s.code() == code && !s.message().empty(), check,
                  std::string("expected ") + StatusCodeName(code) + ", got " + s.ToString());
  }

 private:
  void Add(const std::string& check, CheckResult r, const std::string& detail) {
    out_->push_back(ConformanceCheck{component_, check, r, detail});
  }
  std::vector<ConformanceCheck>* out_;
  std::string component_;
};

// The option every component must refuse: proves options are validated.
inline OptionList UnknownOption() {
  return OptionList(std::vector<std::pair<std::string, std::string>>{{"conformance_no_such_option", "1"}});
}

void CheckEviction(const ComponentRef& ref, const OptionList& options, Recorder& rec);
void CheckSharder(const ComponentRef& ref, const OptionList& options, Recorder& rec);
void CheckKernel(const ComponentRef& ref, const OptionList& options, Recorder& rec);
void CheckComm(const ComponentRef& ref, const OptionList& options, Recorder& rec);
void CheckCodec(const ComponentRef& ref, const OptionList& options, Recorder& rec);

}  // namespace shardrec::conformance
