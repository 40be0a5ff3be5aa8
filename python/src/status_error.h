// A non-OK Status crossing into Python: the module's translator raises it
// as shardrec.Error (InvalidArgumentError for SR_INVALID_ARGUMENT) with the
// Status's message unchanged and its code name in `.code`.
#pragma once

#include <exception>
#include <utility>

#include "shardrec/core/status.h"

namespace shardrec::python {

class StatusError : public std::exception {
 public:
  explicit StatusError(Status status) : status_(std::move(status)) {}
  const Status& status() const { return status_; }
  const char* what() const noexcept override { return status_.message().c_str(); }

 private:
  Status status_;
};

inline void Check(Status s) {
  if (!s.ok()) throw StatusError(std::move(s));
}

template <class T>
T Unwrap(StatusOr<T> s) {
  if (!s.ok()) throw StatusError(s.status());
  return std::move(s).value();
}

}  // namespace shardrec::python
