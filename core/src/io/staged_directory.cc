#include "shardrec/core/io/staged_directory.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shardrec/core/io/leftovers.h"

namespace shardrec {

namespace fs = std::filesystem;

namespace {

std::string Errno() { return std::strerror(errno); }

// fsync of a file or directory by path.
Status Sync(const fs::path& p, bool directory) {
  const int fd = ::open(p.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) return UnavailableError("cannot open " + p.string() + " to sync it: " + Errno());
  const bool ok = ::fsync(fd) == 0;
  const std::string why = ok ? "" : Errno();
  ::close(fd);
  if (!ok) return UnavailableError("cannot sync " + p.string() + ": " + why);
  return Status::Ok();
}

Status SyncTree(const fs::path& root) {
  std::error_code ec;
  for (auto it = fs::recursive_directory_iterator(root, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    SR_RETURN_IF_ERROR(Sync(it->path(), it->is_directory()));
  }
  if (ec) return UnavailableError("cannot list " + root.string() + ": " + ec.message());
  return Sync(root, true);
}

// The prefixes of the staging and retired names of `dir`: ".NAME.new." and
// ".NAME.old.", each followed by the writer's PID.
std::string Prefix(const fs::path& dir, const char* what) {
  return "." + dir.filename().string() + "." + what + ".";
}

}  // namespace

StagedDirectory::StagedDirectory(fs::path dir, fs::path staging) : dir_(std::move(dir)), staging_(std::move(staging)) {}

StagedDirectory::StagedDirectory(StagedDirectory&& other) noexcept
    : dir_(std::move(other.dir_)), staging_(std::move(other.staging_)), committed_(other.committed_) {
  other.staging_.clear();
}

StagedDirectory::~StagedDirectory() {
  if (committed_ || staging_.empty()) return;
  std::error_code ec;
  fs::remove_all(staging_, ec);
}

StatusOr<StagedDirectory> StagedDirectory::Begin(const fs::path& dir_in, const std::set<std::string>& owned) {
  std::error_code ec;
  // "out/" and "out" are the same directory; its name is what is staged beside it.
  fs::path dir = fs::absolute(dir_in, ec).lexically_normal();
  if (!ec && !dir.has_filename()) dir = dir.parent_path();
  if (ec || dir == dir.root_path() || dir == fs::current_path(ec)) {
    return InvalidArgumentError("'" + dir_in.string() +
                                "' cannot be an output directory: it is replaced as a whole, so it may not be "
                                "the root or the current directory");
  }
  const fs::path parent = dir.parent_path().empty() ? fs::path(".") : dir.parent_path();
  const fs::file_status st = fs::symlink_status(dir, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) {
      return FailedPreconditionError("'" + dir.string() + "' exists and is not a directory");
    }
    std::string foreign;
    int count = 0;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (owned.contains(name)) continue;
      if (++count <= 5) foreign += (foreign.empty() ? "" : ", ") + name;
    }
    if (ec) return UnavailableError("cannot list '" + dir.string() + "': " + ec.message());
    if (count > 0) {
      return FailedPreconditionError(
          "'" + dir.string() + "' holds " + std::to_string(count) + " name(s) this command does not write (" + foreign +
          (count > 5 ? ", ..." : "") +
          "); the directory is replaced as a whole, so give a new or empty directory, or one this command wrote");
    }
  } else {
    fs::create_directories(parent, ec);
    if (ec) return UnavailableError("cannot create '" + parent.string() + "': " + ec.message());
  }
  RemoveLeftoversOfDeadProcesses(parent, Prefix(dir, "new"));
  RemoveLeftoversOfDeadProcesses(parent, Prefix(dir, "old"));
  const fs::path staging = parent / (Prefix(dir, "new") + std::to_string(::getpid()));
  fs::remove_all(staging, ec);  // ours, from an earlier attempt in this process
  if (!fs::create_directory(staging, ec) || ec) {
    return UnavailableError("cannot create the staging directory '" + staging.string() +
                            "': " + (ec ? ec.message() : std::string("it exists")));
  }
  return StagedDirectory(dir, staging);
}

Status StagedDirectory::Commit() {
  if (committed_) return FailedPreconditionError("'" + dir_.string() + "' was already committed");
  SR_RETURN_IF_ERROR(SyncTree(staging_));
  const fs::path parent = staging_.parent_path();
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(dir_, ec))) {
    if (::rename(staging_.c_str(), dir_.c_str()) != 0) {
      return UnavailableError("cannot move '" + staging_.string() + "' to '" + dir_.string() + "': " + Errno());
    }
    committed_ = true;
    return Sync(parent, true);
  }
  // Both exist: swap them in one step, then the old set (now at the staging
  // name) is retired and removed.
  const fs::path retired = parent / (Prefix(dir_, "old") + std::to_string(::getpid()));
  fs::remove_all(retired, ec);
  if (::renameat2(AT_FDCWD, staging_.c_str(), AT_FDCWD, dir_.c_str(), RENAME_EXCHANGE) == 0) {
    committed_ = true;
    SR_RETURN_IF_ERROR(Sync(parent, true));
    if (::rename(staging_.c_str(), retired.c_str()) != 0) fs::remove_all(staging_, ec);
  } else if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) {
    // A file system without atomic exchange (NFS): the old set steps aside,
    // then the new one moves in. A reader may find no directory for that
    // instant, but never a mix of the two sets.
    if (::rename(dir_.c_str(), retired.c_str()) != 0) {
      return UnavailableError("cannot move the old '" + dir_.string() + "' aside: " + Errno());
    }
    if (::rename(staging_.c_str(), dir_.c_str()) != 0) {
      const std::string why = Errno();
      (void)::rename(retired.c_str(), dir_.c_str());
      return UnavailableError("cannot move '" + staging_.string() + "' to '" + dir_.string() + "': " + why);
    }
    committed_ = true;
    SR_RETURN_IF_ERROR(Sync(parent, true));
  } else {
    return UnavailableError("cannot swap '" + staging_.string() + "' into '" + dir_.string() + "': " + Errno());
  }
  fs::remove_all(retired, ec);
  return Status::Ok();
}

}  // namespace shardrec
