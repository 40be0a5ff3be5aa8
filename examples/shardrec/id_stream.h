// A recorded id stream: one 1-D .npy array of integer ids, in the order they
// were looked up (np.save(path, ids)). int64 is TorchRec's id type; smaller
// integer types widen to it, and uint64 is taken bit for bit, so ids above
// 2^63 stay distinct (they become negative int64 ids, which the module
// accepts like any other).
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec::cli {

// Errors name the file: unreadable, not an .npy, not 1-D, not integers.
StatusOr<std::vector<int64_t>> ReadIdStream(const std::filesystem::path& path);

}  // namespace shardrec::cli
