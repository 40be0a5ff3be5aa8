#include "progress.h"

#include <unistd.h>

#include <algorithm>
#include <iostream>

#include <fmt/format.h>

namespace shardrec::cli {

std::string Rate(double per_s) {
  if (per_s >= 1e9) return fmt::format("{:.2f}G", per_s / 1e9);
  if (per_s >= 1e6) return fmt::format("{:.2f}M", per_s / 1e6);
  if (per_s >= 1e3) return fmt::format("{:.1f}k", per_s / 1e3);
  return fmt::format("{:.0f}", per_s);
}

Progress::Progress(int64_t steps, bool enabled, std::string label, std::string unit, std::string rate_unit)
    : steps_(steps),
      enabled_(enabled),
      tty_(isatty(STDERR_FILENO) != 0),
      label_(std::move(label)),
      unit_(std::move(unit)),
      rate_unit_(std::move(rate_unit)) {}

void Progress::Step(int64_t done, double per_s, const std::string& extra) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * done / std::max<int64_t>(steps_, 1));
  const std::string line = fmt::format("{}[{}{}] {}/{} {}, {} {}/s", label_, std::string(filled, '='),
                                       std::string(kWidth - filled, ' '), done, steps_, unit_, Rate(per_s),
                                       rate_unit_) +
                           (extra.empty() ? "" : ", " + extra);
  if (tty_) {
    std::cerr << "\r" << line << (done == steps_ ? "\n" : "") << std::flush;
  } else if (done == steps_ || done * 10 / steps_ != (done - 1) * 10 / steps_) {
    std::cerr << line << "\n";
  }
}

void Progress::Note(const std::string& line) {
  if (!enabled_) return;
  // On a terminal the bar is redrawn on its line: clear it first.
  std::cerr << (tty_ ? "\r\033[K" : "") << line << "\n" << std::flush;
}

}  // namespace shardrec::cli
