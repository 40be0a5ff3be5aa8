// Conformance checks for comm backends: the collective acceptance suite
// (core/comm/collective_check.h) on a world of one, then on three ranks as
// threads of this process meeting through an in-process rendezvous
// ("local:NAME"). A backend that cannot run ranks as threads, or whose
// device is absent (NCCL on a CPU-only machine), reports that from create
// with FAILED_PRECONDITION, INVALID_ARGUMENT, UNIMPLEMENTED or UNAVAILABLE,
// which is a skip with its message, not a failure. Timeouts are short, so a
// backend that hangs fails here instead of hanging the kit.
#include <atomic>
#include <string>
#include <unistd.h>
#include <vector>

#include "recorder.h"
#include "shardrec/core/comm/collective_check.h"

namespace shardrec::conformance {
namespace {

constexpr int64_t kTimeoutMs = 20000;

bool IsCannotServe(int32_t code) {
  return code == SR_FAILED_PRECONDITION || code == SR_INVALID_ARGUMENT || code == SR_UNIMPLEMENTED ||
         code == SR_UNAVAILABLE;
}

// Runs the suite on `world` threads; fills `create_error` when rank 0
// could not join (then nothing else ran).
std::vector<std::string> RunWorld(const ComponentRef& ref, const OptionList& options, int world,
                                  Status* create_error) {
  static std::atomic<int> job{0};
  ProcessGroupConfig base;
  base.comm = ref.name();
  base.options = options;
  base.rendezvous = "local:conformance_" + std::to_string(::getpid()) + "_" + std::to_string(++job);
  base.prefix = "kit";
  base.timeout_ms = kTimeoutMs;
  std::vector<std::string> failures;
  std::vector<Status> errors(world);
  std::vector<CollectiveCheckReport> reports(world);
  RunRanksAsThreads(ref, base, world, [&](int r, StatusOr<ProcessGroup> group) {
    if (!group.ok()) {
      errors[r] = group.status();
      return;
    }
    reports[r] = RunCollectiveChecks(group.value(), {});
  });
  *create_error = errors[0];
  for (int r = 0; r < world; ++r) {
    if (!errors[r].ok() && r > 0) failures.push_back("rank " + std::to_string(r) + ": " + errors[r].message());
    failures.insert(failures.end(), reports[r].failures.begin(), reports[r].failures.end());
  }
  return failures;
}

std::string Join(const std::vector<std::string>& lines) {
  std::string s;
  for (size_t i = 0; i < lines.size() && i < 5; ++i) s += (i ? "; " : "") + lines[i];
  if (lines.size() > 5) s += "; ... " + std::to_string(lines.size() - 5) + " more";
  return s;
}

}  // namespace

void CheckComm(const ComponentRef& ref, const OptionList& options, Recorder& rec) {
  for (int world : {1, 3}) {
    const std::string check = "collectives, " + std::to_string(world) + (world == 1 ? " rank" : " ranks as threads");
    Status create_error;
    std::vector<std::string> failures = RunWorld(ref, options, world, &create_error);
    if (!create_error.ok()) {
      if (IsCannotServe(create_error.code())) {
        rec.Skip(check, "the backend cannot serve this: " + create_error.message());
      } else {
        rec.Fail(check, "create failed: " + create_error.ToString());
      }
      continue;
    }
    rec.Expect(failures.empty(), check, Join(failures));
  }
}

}  // namespace shardrec::conformance
