// UringIo (uring_io.h).
#include "uring_io.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#ifdef SHARDREC_HAVE_LIBURING
#include <liburing.h>
#endif

namespace shardrec {
namespace {

// Moves `done` bytes past the front of an iovec array.
void Advance(iovec*& v, int& count, size_t done) {
  while (done > 0 && count > 0) {
    const size_t step = std::min(done, v->iov_len);
    v->iov_base = static_cast<char*>(v->iov_base) + step;
    v->iov_len -= step;
    done -= step;
    if (v->iov_len == 0) {
      ++v;
      --count;
    }
  }
}

}  // namespace

Status TransferPlain(int fd, bool reading, UringIo::Request r, size_t done, const std::string& what) {
  Advance(r.iov, r.count, done);
  size_t left = r.bytes - done;
  int64_t offset = r.offset + static_cast<int64_t>(done);
  while (left > 0) {
    const ssize_t n = reading ? ::preadv(fd, r.iov, r.count, offset) : ::pwritev(fd, r.iov, r.count, offset);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return InternalError(fmt::format("{}: ends early at byte {} (truncated?)", what, offset));
    if (n < 0) {
      return InternalError(fmt::format("{}: cannot {}: {}", what, reading ? "read" : "write", std::strerror(errno)));
    }
    left -= static_cast<size_t>(n);
    offset += n;
    Advance(r.iov, r.count, static_cast<size_t>(n));
  }
  return Status::Ok();
}

#ifdef SHARDREC_HAVE_LIBURING

struct UringIo::Ring {
  io_uring ring{};
  unsigned depth = 0;
};

UringIo::UringIo() : ring_(std::make_unique<Ring>()) {}
UringIo::~UringIo() {
  if (ring_) io_uring_queue_exit(&ring_->ring);  // null: its init failed
}

std::unique_ptr<UringIo> UringIo::Create(unsigned depth, std::string* why) {
  std::unique_ptr<UringIo> io(new UringIo());
  const int e = io_uring_queue_init(depth, &io->ring_->ring, 0);
  if (e < 0) {
    io->ring_.reset();
    *why = std::string("io_uring_queue_init: ") + std::strerror(-e);
    // The usual causes, named: a kernel setting or a container's filter.
    if (e == -EPERM || e == -ENOSYS) *why += " (the kernel's io_uring_disabled setting or a seccomp filter forbids it)";
    if (e == -ENOMEM) *why += " (before Linux 5.12 a ring counts against RLIMIT_MEMLOCK: raise it with ulimit -l)";
    return nullptr;
  }
  io->ring_->depth = depth;
  return io;
}

Status UringIo::Run(int fd, bool reading, std::vector<Request>& requests, const std::string& what) {
  io_uring& ring = ring_->ring;
  size_t next = 0, in_flight = 0;
  Status failed = Status::Ok();
  while (next < requests.size() || in_flight > 0) {
    // Fill the ring, then submit what was queued.
    while (next < requests.size() && in_flight < ring_->depth && failed.ok()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe == nullptr) break;
      const Request& r = requests[next];
      if (reading) {
        io_uring_prep_readv(sqe, fd, r.iov, static_cast<unsigned>(r.count), static_cast<uint64_t>(r.offset));
      } else {
        io_uring_prep_writev(sqe, fd, r.iov, static_cast<unsigned>(r.count), static_cast<uint64_t>(r.offset));
      }
      io_uring_sqe_set_data64(sqe, next);
      ++next;
      ++in_flight;
    }
    if (in_flight == 0) break;  // failed before queueing more
    const int e = io_uring_submit_and_wait(&ring, 1);
    if (e < 0 && e != -EINTR && e != -EAGAIN && e != -EBUSY) {
      // Wait out what is in flight (it names the caller's buffers) before
      // returning. If even that fails, the kernel may still write into
      // buffers the caller frees next (closing the ring does not wait for
      // them): stop the process rather than corrupt its memory.
      failed = InternalError(fmt::format("{}: io_uring submit: {}", what, std::strerror(-e)));
      while (in_flight > 0) {
        io_uring_cqe* done = nullptr;
        const int w = io_uring_wait_cqe(&ring, &done);
        if (w == -EINTR || w == -EAGAIN || w == -EBUSY) continue;
        if (w < 0) {
          std::fprintf(stderr, "shardrec: fatal: %s: io_uring wait failed with %zu requests in flight (%s) after: %s; "
                       "stopping rather than free buffers the kernel may still write\n",
                       what.c_str(), in_flight, std::strerror(-w), failed.message().c_str());
          std::abort();
        }
        io_uring_cqe_seen(&ring, done);
        --in_flight;
      }
      return failed;
    }
    io_uring_cqe* cqe = nullptr;
    unsigned head = 0, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      ++seen;
      --in_flight;
      const Request& r = requests[static_cast<size_t>(io_uring_cqe_get_data64(cqe))];
      const int res = cqe->res;
      if (!failed.ok()) continue;
      if (res < 0 && res != -EAGAIN && res != -EINTR) {
        failed = InternalError(fmt::format("{}: cannot {}: {}", what, reading ? "read" : "write", std::strerror(-res)));
      } else if (static_cast<size_t>(std::max(res, 0)) < r.bytes) {
        failed = TransferPlain(fd, reading, r, static_cast<size_t>(std::max(res, 0)), what);
      }
    }
    io_uring_cq_advance(&ring, seen);
  }
  return failed;
}

#else  // no liburing in this build

struct UringIo::Ring {};
UringIo::UringIo() = default;
UringIo::~UringIo() = default;

std::unique_ptr<UringIo> UringIo::Create(unsigned, std::string* why) {
  *why = "this build has no liburing (apt-get install liburing-dev, then reconfigure)";
  return nullptr;
}

Status UringIo::Run(int fd, bool reading, std::vector<Request>& requests, const std::string& what) {
  for (Request& r : requests) SR_RETURN_IF_ERROR(TransferPlain(fd, reading, r, 0, what));
  return Status::Ok();
}

#endif

}  // namespace shardrec
