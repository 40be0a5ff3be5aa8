// Lap: the wall-clock stopwatch the sharded modules split their step time
// with (ShardedStepTimes). Internal to core/src/modules.
#pragma once

#include <chrono>

namespace shardrec {

class Lap {
 public:
  // Seconds since construction or the previous call.
  double operator()() {
    const auto now = std::chrono::steady_clock::now();
    const double s = std::chrono::duration<double>(now - last_).count();
    last_ = now;
    return s;
  }

 private:
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

}  // namespace shardrec
