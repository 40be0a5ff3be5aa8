#include "path_trust.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

namespace shardrec {

namespace fs = std::filesystem;

namespace {

Status Untrusted(const fs::path& p, const std::string& why) {
  return FailedPreconditionError(fmt::format("{} {}: another user could put code there", p.string(), why));
}

// One path: its owner, and who may write it. `leaf` is the path asked
// about; ancestors may be world-writable when sticky.
Status CheckOne(const fs::path& p, bool leaf) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return Status::Ok();  // absent: the loader says so
  const uid_t me = ::geteuid();
  if (st.st_uid != me && st.st_uid != 0) {
    return Untrusted(p, fmt::format("is owned by user {}, not by you ({}) or root", st.st_uid, me));
  }
  const bool world_writable = (st.st_mode & S_IWOTH) != 0;
  if (world_writable && (leaf || (st.st_mode & S_ISVTX) == 0)) {
    return Untrusted(p, leaf ? "is world-writable" : "is a world-writable directory without the sticky bit");
  }
  return Status::Ok();
}

}  // namespace

Status CheckOnlyWeCanWrite(const fs::path& path) {
  // The real location is what the loader opens, so links are followed.
  std::error_code ec;
  fs::path p = fs::canonical(path, ec);
  if (ec) p = fs::absolute(path, ec).lexically_normal();
  if (ec) return Status::Ok();
  SR_RETURN_IF_ERROR(CheckOne(p, /*leaf=*/true));
  while (p.has_relative_path()) {
    p = p.parent_path();
    SR_RETURN_IF_ERROR(CheckOne(p, /*leaf=*/false));
  }
  return Status::Ok();
}

}  // namespace shardrec
