// Byte counts as people write and read them: "512MiB", "2GiB" in flags,
// "1.50 GiB" in reports.
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/core/status.h"

namespace shardrec {

// "1000000", "512MiB" (or "512M"), "2GiB", "1.5GiB", "64KiB" -> bytes.
// INVALID_ARGUMENT for anything else, for zero or less, and for sizes of
// 2^63 bytes or more.
StatusOr<int64_t> ParseByteSize(const std::string& text);

// "812 B", "3.0 KiB", "1.5 MiB", "2.00 GiB", "1.20 TiB".
std::string FormatByteSize(int64_t bytes);

}  // namespace shardrec
