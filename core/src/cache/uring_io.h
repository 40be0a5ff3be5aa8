// UringIo: a row file's batches of scattered reads and writes through one
// io_uring (liburing), every run of adjacent rows one preadv/pwritev
// request, up to the ring's depth in flight at once from one thread.
// RowFile uses it when asked (RowFileSpec::io = "io_uring") and this build
// has liburing and the kernel allows io_uring (a seccomp filter,
// io_uring_disabled or an old kernel may not: Create says why).
#pragma once

#include <sys/uio.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec {

class UringIo {
 public:
  // Null, with the reason in `why`, when io_uring cannot be used here.
  static std::unique_ptr<UringIo> Create(unsigned depth, std::string* why);
  ~UringIo();
  UringIo(const UringIo&) = delete;
  UringIo& operator=(const UringIo&) = delete;

  struct Request {
    int64_t offset = 0;
    iovec* iov = nullptr;  // the caller's, alive until Run returns
    int count = 0;
    size_t bytes = 0;
  };
  // Every request done on `fd` when it returns OK. A short transfer is
  // finished with TransferPlain; an error names `what` and errno.
  Status Run(int fd, bool reading, std::vector<Request>& requests, const std::string& what);

 private:
  UringIo();
  struct Ring;
  std::unique_ptr<Ring> ring_;
};

// One request with plain preadv/pwritev calls, from `done` bytes in until
// all of it moved (what RowFile's pool of threads runs, and what finishes
// a ring's short transfer). Consumes the request's iovecs.
Status TransferPlain(int fd, bool reading, UringIo::Request r, size_t done, const std::string& what);

}  // namespace shardrec
