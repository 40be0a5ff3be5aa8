// Progress of a long host command on stderr, and the rate format it uses:
// shared by `train` and `replay-evictions`, so both draw the same bar.
#pragma once

#include <cstdint>
#include <string>

namespace shardrec::cli {

// 1234567.0 -> "1.23M", 4200 -> "4.2k".
std::string Rate(double per_s);

// A redrawn bar on a terminal, else a line every tenth of the run (a log
// file should not get one line per step):
//   LABEL[=====     ] 20/40 steps, 1.23M samples/s
class Progress {
 public:
  // `steps` units of work called `unit`; the rate is counted in `rate_unit`.
  // Disabled, Step does nothing.
  Progress(int64_t steps, bool enabled, std::string label = "", std::string unit = "steps",
           std::string rate_unit = "samples");
  // `done` of the steps are finished, at `per_s` rate units per second;
  // `extra` ends the line ("loss 0.6931").
  void Step(int64_t done, double per_s, const std::string& extra = "");
  // A line of its own between steps (a checkpoint saved), not lost under the bar.
  void Note(const std::string& line);

 private:
  int64_t steps_;
  bool enabled_, tty_;
  std::string label_, unit_, rate_unit_;
};

}  // namespace shardrec::cli
