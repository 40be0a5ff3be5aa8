// FileHandle (file_io.h).
#include "file_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "shardrec/core/tensor/npy.h"

namespace shardrec::checkpoint {

namespace {
Status Errno(const std::filesystem::path& path, const std::string& what) {
  return InternalError(path.string() + ": " + what + ": " + std::strerror(errno));
}
}  // namespace

StatusOr<FileHandle> FileHandle::Create(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(path, "cannot create");
  return FileHandle(fd, path);
}

StatusOr<FileHandle> FileHandle::OpenForReading(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return Status(SR_NOT_FOUND, path.string() + ": missing");
    return Errno(path, "cannot open");
  }
  return FileHandle(fd, path);
}

FileHandle::~FileHandle() {
  if (fd_ >= 0) ::close(fd_);
}

Status FileHandle::Append(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Errno(path_, "write failed (disk full?)");
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status FileHandle::ReadAt(void* data, size_t size, int64_t offset) const {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd_, p, size, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Errno(path_, "read failed");
    if (n == 0) return InvalidArgumentError(path_.string() + ": truncated (ends before byte " + std::to_string(offset + static_cast<int64_t>(size)) + ")");
    p += n;
    size -= static_cast<size_t>(n);
    offset += n;
  }
  return Status::Ok();
}

Status FileHandle::SyncAndClose() {
  if (::fsync(fd_) != 0) return Errno(path_, "fsync failed (disk full or failing?)");
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Errno(path_, "close failed");
  return Status::Ok();
}

NpyStream::NpyStream(FileHandle file) : file_(std::move(file)), hash_(std::make_unique<Xxh3Stream>()) {}

StatusOr<NpyStream> NpyStream::Create(const std::filesystem::path& path, const std::string& descr,
                                      const std::vector<int64_t>& shape) {
  SR_ASSIGN_OR_RETURN(std::string prefix, NpyPrefix(descr, shape));
  SR_ASSIGN_OR_RETURN(FileHandle file, FileHandle::Create(path));
  NpyStream s(std::move(file));
  SR_RETURN_IF_ERROR(s.Append(prefix.data(), prefix.size()));
  return s;
}

Status NpyStream::Append(const void* data, size_t size) {
  hash_->Update(data, size);
  bytes_ += static_cast<int64_t>(size);
  return file_.Append(data, size);
}

std::string NpyStream::checksum() const { return Xxh3Hex(hash_->Digest()); }

Status SyncDirectory(const std::filesystem::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(dir, "cannot open directory");
  const bool ok = ::fsync(fd) == 0;
  ::close(fd);
  return ok ? Status::Ok() : Errno(dir, "fsync failed");
}

}  // namespace shardrec::checkpoint
