// Whole-buffer writes and positional reads on a file descriptor, with
// errors that name the file. Internal to core/src/checkpoint.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/core/checkpoint/checksum.h"

#include "shardrec/core/status.h"

namespace shardrec::checkpoint {

class FileHandle {
 public:
  // A new file (O_EXCL: never someone else's), for writing.
  static StatusOr<FileHandle> Create(const std::filesystem::path& path);
  static StatusOr<FileHandle> OpenForReading(const std::filesystem::path& path);
  FileHandle(FileHandle&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }
  FileHandle& operator=(FileHandle&&) = delete;
  ~FileHandle();

  Status Append(const void* data, size_t size);
  // Exactly `size` bytes at `offset`; fewer is an error ("truncated").
  Status ReadAt(void* data, size_t size, int64_t offset) const;
  Status SyncAndClose();  // fsync, then close
  const std::filesystem::path& path() const { return path_; }

 private:
  FileHandle(int fd, std::filesystem::path path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::filesystem::path path_;
};

// One .npy being streamed to a new file: its prefix, then the array's bytes
// appended in pieces, hashed (XXH3) on the way; Finish fsyncs it.
class NpyStream {
 public:
  static StatusOr<NpyStream> Create(const std::filesystem::path& path, const std::string& descr,
                                    const std::vector<int64_t>& shape);
  Status Append(const void* data, size_t size);
  Status Finish() { return file_.SyncAndClose(); }
  int64_t bytes() const { return bytes_; }
  std::string checksum() const;

 private:
  explicit NpyStream(FileHandle file);
  FileHandle file_;
  std::unique_ptr<Xxh3Stream> hash_;
  int64_t bytes_ = 0;
};

// fsync of a directory (a new entry in it reaches the disk).
Status SyncDirectory(const std::filesystem::path& dir);

}  // namespace shardrec::checkpoint
