// shardrec plugin SDK — errors. Plugins throw sdk::Error (or any exception)
// inside their C++ code; Guard() turns it into an sr_status* at the C
// boundary, so no exception ever unwinds into the host (ABI rule 5).
// Header-only; every symbol stays inside the plugin (hidden visibility).
#ifndef SHARDREC_SDK_STATUS_HPP_
#define SHARDREC_SDK_STATUS_HPP_

#include <exception>
#include <new>
#include <string>
#include <utility>

#include "shardrec/abi/base.h"

// The SDK's concrete status. Each plugin library carries its own copy of
// this definition; the host only ever sees it through the plugin's
// status_code / status_message / status_destroy entries.
struct sr_status {
  int32_t code;
  std::string message;
};

namespace shardrec::sdk {

// An error with a canonical code (SR_*) and a message for the user.
class Error : public std::exception {
 public:
  Error(int32_t code, std::string message)
      : code_(code), message_(std::move(message)) {}
  int32_t code() const noexcept { return code_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  int32_t code_;
  std::string message_;
};

inline Error InvalidArgument(std::string m) {
  return Error(SR_INVALID_ARGUMENT, std::move(m));
}
inline Error Unimplemented(std::string m) {
  return Error(SR_UNIMPLEMENTED, std::move(m));
}

// A preallocated status for when allocating one fails: an error must never
// turn into NULL (success). StatusDestroy leaves it alone.
inline sr_status* OutOfMemoryStatus() noexcept {
  static sr_status oom{SR_RESOURCE_EXHAUSTED, "out of memory"};
  return &oom;
}

// Allocates a status (the preallocated out-of-memory one if that fails).
inline sr_status* MakeStatus(int32_t code, std::string message) noexcept {
  try {
    return new sr_status{code == SR_OK ? SR_UNKNOWN : code, std::move(message)};
  } catch (...) {
    return OutOfMemoryStatus();
  }
}

// Runs `body` and converts whatever it throws into a status. Use it as the
// whole body of every exported C entry:  return sdk::Guard([&] { ... });
template <class Body>
sr_status* Guard(Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Error& e) {
    return MakeStatus(e.code(), e.what());
  } catch (const std::bad_alloc&) {
    return MakeStatus(SR_RESOURCE_EXHAUSTED, "out of memory");
  } catch (const std::exception& e) {
    return MakeStatus(SR_INTERNAL, std::string("uncaught exception: ") + e.what());
  } catch (...) {
    return MakeStatus(SR_INTERNAL, "uncaught non-standard exception");
  }
}

// The three accessors a plugin table needs (sr_plugin_api.status_*).
inline int32_t StatusCode(const sr_status* s) {
  return s == nullptr ? SR_OK : s->code;
}
inline const char* StatusMessage(const sr_status* s) {
  return s == nullptr ? "" : s->message.c_str();
}
inline void StatusDestroy(sr_status* s) {
  if (s != OutOfMemoryStatus()) delete s;
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_STATUS_HPP_
