// Names that become file names. Table and feature names come from users'
// files and end up as paths (`--out OUT/tables/NAME.npy`,
// `OUT/sequence/FEATURE/`, `--weights DIR/NAME.npy`), so they are checked
// once where configs are loaded, and every such path is built through
// PathUnder, which refuses anything that is not one plain component.
//
// A name is 1 to 128 characters of [A-Za-z0-9_.@-], not starting with '.':
// no separators, no "..", no hidden files, no NUL or control characters.
// ('@' is allowed: sharded modules name a table's shards "NAME@SHARD".)
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

#include "shardrec/core/status.h"

namespace shardrec {

inline constexpr size_t kMaxNameLength = 128;

// OK, or INVALID_ARGUMENT naming `what` ("table", "feature"), the name (its
// first 64 printable characters) and the rule.
Status CheckName(std::string_view what, std::string_view name);

// root / (name + suffix) after CheckName(what, name): a path that cannot
// leave `root`.
StatusOr<std::filesystem::path> PathUnder(const std::filesystem::path& root, std::string_view what,
                                          std::string_view name, std::string_view suffix = "");

}  // namespace shardrec
