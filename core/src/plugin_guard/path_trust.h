// Whether a plugin library or plugin directory may be trusted to load code
// from: the search path is a security boundary (docs/abi.md, "Where plugins
// are found"). Loading a library runs its code with the user's rights, so a
// file or directory someone else can write is someone else's code.
#pragma once

#include <filesystem>

#include "shardrec/core/status.h"

namespace shardrec {

// OK when `path` (a library file or a plugin directory) and every directory
// above it can be changed only by this user or root: none is owned by
// another user, `path` is not world-writable, and no ancestor is
// world-writable without the sticky bit (/tmp's sticky bit keeps others from
// renaming what is ours inside it). FAILED_PRECONDITION naming the first
// offending path and what is wrong with it.
Status CheckOnlyWeCanWrite(const std::filesystem::path& path);

}  // namespace shardrec
