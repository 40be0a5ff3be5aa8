// FileSizeLimit: while it lives, this process may not write files past
// `bytes` (RLIMIT_FSIZE), and SIGXFSZ is ignored, so a write past the
// limit fails with EFBIG instead of ending the process: how the cache
// tests make a write fail part-way without a full disk. Restores both
// when it goes.
#pragma once

#include <signal.h>
#include <sys/resource.h>

#include <csignal>
#include <cstdint>

namespace shardrec::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(uint64_t bytes) {
    getrlimit(RLIMIT_FSIZE, &before_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit small = before_;
    small.rlim_cur = bytes;
    ok_ = setrlimit(RLIMIT_FSIZE, &small) == 0;
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &before_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool ok() const { return ok_; }  // the limit took effect

 private:
  rlimit before_{};
  void (*old_handler_)(int) = nullptr;
  bool ok_ = false;
};

}  // namespace shardrec::testing
