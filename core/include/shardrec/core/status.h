// Host-side error values. Every fallible core function returns Status or
// StatusOr<T>; exceptions are not used for expected failures, and a plugin's
// sr_status is converted into a Status at the wrapper boundary. The codes are
// the canonical SR_* ones (equal to absl's), so a plugin's error keeps its code.
//
// A small local type rather than absl::Status: Debian bookworm's abseil is an
// LTS snapshot whose shared libraries we would then ship a dependency on for
// ~100 lines of code; std::expected arrives only with C++23.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <utility>

#include "shardrec/abi/base.h"

namespace shardrec {

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(int32_t code, std::string message)
      : code_(code), message_(code == SR_OK ? std::string() : std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == SR_OK; }
  int32_t code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: message" or "OK".
  std::string ToString() const;

  // Prefixes context ("loading /x/libfoo.so: ...") to an error; OK stays OK.
  Status WithContext(const std::string& context) const {
    return ok() ? *this : Status(code_, context + ": " + message_);
  }

 private:
  int32_t code_ = SR_OK;
  std::string message_;
};

// Name of a canonical code ("DEADLINE_EXCEEDED").
const char* StatusCodeName(int32_t code);

inline Status InvalidArgumentError(std::string m) { return Status(SR_INVALID_ARGUMENT, std::move(m)); }
inline Status NotFoundError(std::string m) { return Status(SR_NOT_FOUND, std::move(m)); }
inline Status FailedPreconditionError(std::string m) { return Status(SR_FAILED_PRECONDITION, std::move(m)); }
inline Status AlreadyExistsError(std::string m) { return Status(SR_ALREADY_EXISTS, std::move(m)); }
inline Status InternalError(std::string m) { return Status(SR_INTERNAL, std::move(m)); }
inline Status UnavailableError(std::string m) { return Status(SR_UNAVAILABLE, std::move(m)); }
inline Status UnimplementedError(std::string m) { return Status(SR_UNIMPLEMENTED, std::move(m)); }
inline Status DataLossError(std::string m) { return Status(SR_DATA_LOSS, std::move(m)); }

// A value or an error.
template <class T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit like absl
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    assert(!status_.ok() && "StatusOr constructed from an OK status");
    if (status_.ok()) status_ = InternalError("StatusOr constructed from an OK status");
  }
  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() & { return *value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace shardrec

#define SR_STATUS_CONCAT_INNER_(a, b) a##b
#define SR_STATUS_CONCAT_(a, b) SR_STATUS_CONCAT_INNER_(a, b)

// Returns the Status from the enclosing function when `expr` is an error.
#define SR_RETURN_IF_ERROR(expr)                     \
  do {                                               \
    ::shardrec::Status sr_status_tmp_ = (expr);      \
    if (!sr_status_tmp_.ok()) return sr_status_tmp_; \
  } while (0)

// `lhs = value of expr` or return its error.
#define SR_ASSIGN_OR_RETURN(lhs, expr) \
  SR_ASSIGN_OR_RETURN_IMPL_(SR_STATUS_CONCAT_(sr_statusor_, __LINE__), lhs, expr)
#define SR_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
