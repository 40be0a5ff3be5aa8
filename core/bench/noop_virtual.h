// The C++ side of the ABI-call benchmark: an interface whose one
// implementation lives in another translation unit, so the compiler cannot
// devirtualise or inline the call.
#pragma once

namespace shardrec::bench {

class NoopInterface {
 public:
  virtual ~NoopInterface() = default;
  virtual int Noop(const void* arg) const = 0;
};

const NoopInterface& MakeNoop();

}  // namespace shardrec::bench
