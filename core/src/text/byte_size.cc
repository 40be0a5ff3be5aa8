#include "shardrec/core/text/byte_size.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

namespace shardrec {

StatusOr<int64_t> ParseByteSize(const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  const std::string unit = end == begin ? "?" : std::string(end);
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "KiB" || unit == "K") scale = 1024.0;
  if (unit == "MiB" || unit == "M") scale = 1024.0 * 1024;
  if (unit == "GiB" || unit == "G") scale = 1024.0 * 1024 * 1024;
  if (unit == "TiB" || unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  // strtod takes "nan", "inf" and hex; only finite positive sizes below 2^63 pass.
  if (scale == 0 || !std::isfinite(v) || !(v > 0) || !(v * scale < 9.2e18)) {
    return InvalidArgumentError("'" + text + "' is not a size (e.g. 1000000, 512MiB, 2GiB; below 8 EiB)");
  }
  return static_cast<int64_t>(v * scale);
}

std::string FormatByteSize(int64_t b) {
  const double d = static_cast<double>(b);
  if (b >= (int64_t{1} << 40)) return fmt::format("{:.2f} TiB", d / static_cast<double>(int64_t{1} << 40));
  if (b >= (int64_t{1} << 30)) return fmt::format("{:.2f} GiB", d / (1 << 30));
  if (b >= (int64_t{1} << 20)) return fmt::format("{:.1f} MiB", d / (1 << 20));
  if (b >= 1024) return fmt::format("{:.1f} KiB", d / 1024);
  return fmt::format("{} B", b);
}

}  // namespace shardrec
