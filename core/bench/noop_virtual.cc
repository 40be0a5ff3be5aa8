// The out-of-line implementation behind NoopInterface (see noop_virtual.h).
#include "noop_virtual.h"

namespace shardrec::bench {
namespace {

class NoopImpl final : public NoopInterface {
 public:
  int Noop(const void* arg) const override { return arg == nullptr ? 0 : 1; }
};

}  // namespace

const NoopInterface& MakeNoop() {
  static const NoopImpl noop;
  return noop;
}

}  // namespace shardrec::bench
