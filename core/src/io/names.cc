// Names that become file names (names.h).
#include "shardrec/core/io/names.h"

#include <fmt/format.h>

namespace shardrec {
namespace {

bool Allowed(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
         c == '@' || c == '-';
}

// The name as it can be shown: printable characters kept, others as \xNN,
// at most 64 of them.
std::string Shown(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size() && i < 64; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    out += (c >= 0x20 && c < 0x7F) ? std::string(1, static_cast<char>(c)) : fmt::format("\\x{:02x}", c);
  }
  return name.size() > 64 ? out + "..." : out;
}

}  // namespace

Status CheckName(std::string_view what, std::string_view name) {
  const auto bad = [&](const std::string& why) {
    return InvalidArgumentError(fmt::format("{} name '{}' {}: names are 1 to {} characters of letters, digits and "
                                            "_ . @ -, not starting with '.' (they become file names)",
                                            what, Shown(name), why, kMaxNameLength));
  };
  if (name.empty()) return bad("is empty");
  if (name.size() > kMaxNameLength) return bad(fmt::format("has {} characters", name.size()));
  if (name[0] == '.') return bad("starts with '.'");
  for (char c : name) {
    if (!Allowed(c)) {
      const auto u = static_cast<unsigned char>(c);
      return bad(u >= 0x20 && u < 0x7F ? fmt::format("contains '{}'", c) : fmt::format("contains byte 0x{:02x}", u));
    }
  }
  return Status::Ok();
}

StatusOr<std::filesystem::path> PathUnder(const std::filesystem::path& root, std::string_view what,
                                          std::string_view name, std::string_view suffix) {
  SR_RETURN_IF_ERROR(CheckName(what, name));
  return root / (std::string(name) + std::string(suffix));
}

}  // namespace shardrec
