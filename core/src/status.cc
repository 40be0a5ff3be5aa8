// Names of the canonical status codes.
#include "shardrec/core/status.h"

namespace shardrec {

const char* StatusCodeName(int32_t code) {
  switch (code) {
    case SR_OK: return "OK";
    case SR_CANCELLED: return "CANCELLED";
    case SR_UNKNOWN: return "UNKNOWN";
    case SR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case SR_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case SR_NOT_FOUND: return "NOT_FOUND";
    case SR_ALREADY_EXISTS: return "ALREADY_EXISTS";
    case SR_PERMISSION_DENIED: return "PERMISSION_DENIED";
    case SR_RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case SR_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case SR_ABORTED: return "ABORTED";
    case SR_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case SR_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case SR_INTERNAL: return "INTERNAL";
    case SR_UNAVAILABLE: return "UNAVAILABLE";
    case SR_DATA_LOSS: return "DATA_LOSS";
    case SR_UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN_CODE";
  }
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

}  // namespace shardrec
