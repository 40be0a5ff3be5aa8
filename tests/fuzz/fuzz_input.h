// What every fuzz target shares: the libFuzzer entry point's signature, and
// a fuzz input as a file (an in-memory memfd, named by /proc/self/fd/N) for
// readers that take a path, such as ReadNpy and ReadKeysFile.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace shardrec::fuzz {

// The bytes as a file that lives as long as this object.
class MemFile {
 public:
  MemFile(const uint8_t* data, size_t size) : fd_(memfd_create("shardrec_fuzz", 0)) {
    size_t done = 0;
    while (fd_ >= 0 && done < size) {
      const ssize_t n = write(fd_, data + done, size - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
  }
  ~MemFile() {
    if (fd_ >= 0) close(fd_);
  }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;
  bool ok() const { return fd_ >= 0; }
  std::filesystem::path path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

}  // namespace shardrec::fuzz
