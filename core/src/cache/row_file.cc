// RowFile (row_file.h): header, bitmap and rows on one file; batched
// scattered reads and writes spread over a pool of I/O threads, each
// issuing preadv/pwritev over runs of adjacent rows.
#include "shardrec/core/cache/row_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "row_log.h"
#include "uring_io.h"

namespace shardrec {
namespace {

constexpr std::array<char, 8> kMagic = {'S', 'R', 'R', 'O', 'W', 'S', '\0', '\1'};
constexpr uint32_t kVersion = 1;     // rows in place
constexpr uint32_t kVersionLog = 2;  // rows as a log (RowLog): scratch, never opened
constexpr uint32_t kStateOpen = 1, kStateClean = 2;
constexpr int64_t kPage = 4096;

struct Header {
  std::array<char, 8> magic;
  uint32_t version;
  uint32_t state;
  int64_t rows;
  int64_t row_bytes;
  uint64_t description_hash;
  int64_t bitmap_offset;
  int64_t data_offset;
  uint64_t checksum;  // XXH3 of the bytes before it
};
static_assert(sizeof(Header) <= kPage);

uint64_t HeaderChecksum(const Header& h) { return XXH3_64bits(&h, offsetof(Header, checksum)); }
int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }
std::string Errno(int e) { return std::strerror(e); }

// Runs jobs on a fixed set of threads; Run() returns when all are done.
class IoPool {
 public:
  explicit IoPool(int threads) {
    for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { Loop(); });
  }
  ~IoPool() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_) t.join();
  }
  size_t size() const { return workers_.size(); }
  void Run(std::vector<std::function<void()>> jobs) {
    if (jobs.empty()) return;
    std::unique_lock lock(mu_);
    pending_ += jobs.size();
    for (auto& j : jobs) queue_.push_back(std::move(j));
    wake_.notify_all();
    done_.wait(lock, [&] { return pending_ == 0; });
  }

 private:
  void Loop() {
    std::unique_lock lock(mu_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping
      auto job = std::move(queue_.back());
      queue_.pop_back();
      lock.unlock();
      job();
      lock.lock();
      if (--pending_ == 0) done_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable wake_, done_;
  std::vector<std::function<void()>> queue_;
  size_t pending_ = 0;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace

struct RowFile::State {
  std::filesystem::path path;
  int fd = -1;
  Header header{};
  std::vector<uint64_t> written;  // bit per row
  bool marked_open = false;       // the header on disk says "open"
  // Rows of a Write that failed part-way that were written before it: some
  // may hold a torn mix of old and new bytes (a row never written reads as
  // unwritten whatever its bytes). Sync refuses while any is left; writing
  // them again whole, or Forget, clears them (a cache's failed flush keeps
  // its rows and retries).
  std::vector<uint64_t> torn;  // bit per row, empty until a Write fails
  int64_t torn_rows = 0;
  void SetTorn(int64_t r, bool is_torn) {
    if (torn.empty()) {
      if (!is_torn) return;
      torn.assign(written.size(), 0);
    }
    uint64_t& word = torn[static_cast<size_t>(r) / 64];
    const uint64_t bit = uint64_t{1} << (r % 64);
    if (((word & bit) != 0) == is_torn) return;
    word ^= bit;
    torn_rows += is_torn ? 1 : -1;
  }
  bool scratch = false;           // removed when closed (CreateScratch)
  RowFileCounters counters;
  std::unique_ptr<IoPool> pool;
  std::unique_ptr<UringIo> uring;  // null: the pool moves the rows
  // io "mmap": the rows' region mapped shared; reads and writes are copies
  // (MapRows). Null otherwise.
  std::byte* map = nullptr;        // row 0
  std::byte* map_start = nullptr;  // the mapping: from the page holding row 0
  size_t map_bytes = 0;            // from map_start
  std::string io_backend;
  std::unique_ptr<RowLog> log;  // layout "log"; null in place

  // The rows' region: in place, or the log's ring of records.
  int64_t data_bytes() const { return log ? log->region_bytes() : header.rows * header.row_bytes; }
  // Where `row`'s bytes start in the region.
  int64_t OffsetOf(int64_t row) const { return log ? log->OffsetOf(row) : row * header.row_bytes; }

  ~State() {
    pool.reset();  // no transfer in flight while the file goes
    uring.reset();
    if (map_start != nullptr) ::munmap(map_start, map_bytes);
    if (scratch && NamesThisFile()) ::unlink(path.c_str());  // still locked: no one else uses this file
    if (fd >= 0) ::close(fd);
  }
  // Whether `path` still names the file open at `fd` (a name another run
  // has since taken is not ours to remove).
  bool NamesThisFile() const {
    struct stat open_file {}, named {};
    return fd >= 0 && ::fstat(fd, &open_file) == 0 && ::lstat(path.c_str(), &named) == 0 &&
           open_file.st_dev == named.st_dev && open_file.st_ino == named.st_ino;
  }
  // One writer per file, across processes and within one: a second open
  // of a file in use is refused (the lock goes with the process, so a
  // killed run's file is free again).
  Status Lock() const {
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return Status::Ok();
    if (errno == EWOULDBLOCK) {
      return FailedPreconditionError(path.string() + " is in use by another table or process");
    }
    return Fail("cannot lock", errno);
  }
  Status Fail(const std::string& what, int e) const {
    return InternalError(fmt::format("{}: {}: {}", path.string(), what, Errno(e)));
  }
  Status WriteAt(const void* data, size_t size, int64_t offset) const {
    const char* p = static_cast<const char*>(data);
    while (size > 0) {
      const ssize_t n = ::pwrite(fd, p, size, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail("cannot write", n < 0 ? errno : EIO);
      p += n;
      size -= static_cast<size_t>(n);
      offset += n;
    }
    return Status::Ok();
  }
  Status ReadAt(void* data, size_t size, int64_t offset) const {
    char* p = static_cast<char*>(data);
    while (size > 0) {
      const ssize_t n = ::pread(fd, p, size, offset);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return Fail("cannot read", n < 0 ? errno : EIO);
      p += n;
      size -= static_cast<size_t>(n);
      offset += n;
    }
    return Status::Ok();
  }
  // A log's records, contiguous bytes of the region: reads copy through the
  // mapping, else one pread; writes are one pwrite (sequential, so one
  // thread keeps up), the mapping's too. An append reaches pages of the
  // ring no row has used yet: a store into the mapping faulted each one in
  // first, the kernel zero-filling it (in 2 MiB folios on ext4 since Linux
  // 6.x) before the copy overwrote it, and those fresh pages came at every
  // step until the ring's first lap ends. A pwrite of whole pages fills
  // them directly; the mapping sees the same page cache. bench cache --io
  // mmap: warm passes 1.1-1.4x, train io=mmap 1.28x (docs/benchmarks.md).
  RowLog::Io LogIo() const {
    return {[this](int64_t offset, size_t bytes, std::byte* out) {
              if (map != nullptr) {
                std::memcpy(out, map + offset, bytes);
                return Status::Ok();
              }
              return ReadAt(out, bytes, header.data_offset + offset);
            },
            [this](int64_t offset, size_t bytes, const std::byte* in) {
              return WriteAt(in, bytes, header.data_offset + offset);
            }};
  }
  Status SyncData() const {
    while (::fdatasync(fd) != 0) {
      if (errno != EINTR) return Fail("cannot sync", errno);
    }
    return Status::Ok();
  }
  Status WriteHeader(uint32_t state) {
    header.state = state;
    header.checksum = HeaderChecksum(header);
    std::vector<char> page(kPage, 0);
    std::memcpy(page.data(), &header, sizeof(header));
    SR_RETURN_IF_ERROR(WriteAt(page.data(), page.size(), 0));
    return SyncData();
  }
  // The way rows move, as the spec asks (RowFileSpec::io).
  Status StartIo(const RowFileSpec& spec) {
    if (spec.io == "mmap") {  // mapped once the file has its size (MapRows)
      io_backend = "mmap";
      return Status::Ok();
    }
    // auto: the ring where this build and the kernel allow one, else the
    // pool, saying why. From a disk the page cache does not hold the ring
    // moved rows 1.13-1.19x faster than the pool (8, 32 or 64 threads);
    // from the page cache the two train level (docs/cache.md).
    std::string why;
    if (spec.io == "io_uring" || spec.io == "auto") {
      uring = UringIo::Create(256, &why);
      if (uring) {
        io_backend = "io_uring";
        return Status::Ok();
      }
      if (spec.io == "io_uring") {
        return FailedPreconditionError(path.string() + ": io_uring cannot be used here: " + why);
      }
    }
    pool = std::make_unique<IoPool>(spec.io_threads);
    io_backend = fmt::format("{} threads", spec.io_threads);
    if (!why.empty()) io_backend += " (io auto: io_uring cannot be used here: " + why + ")";
    return Status::Ok();
  }
  // Rows moved by system calls are read one request at a time, at random:
  // the kernel's read-ahead would bring the pages around each (it reads
  // ahead when the page before a read is cached, as the log's recent
  // appends and cleaning leave them), which the next row rarely wants.
  // POSIX_FADV_RANDOM reads what is asked. From the disk it cut the bytes
  // read by 35% and ran 1.2x faster (docs/benchmarks.md). A mapping's
  // faults are left to read ahead: MADV_RANDOM made each read one page
  // and the probe 5x slower from the disk (docs/cache.md).
  void ReadOnlyWhatIsAsked() const {
    if (pool == nullptr && uring == nullptr) return;  // io mmap
    (void)::posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);  // advice: a refusal changes no result
  }
  // io "mmap": the rows' region mapped shared, every block of it reserved
  // first. A store into a hole of a mapped file that the disk cannot hold
  // ends the process (SIGBUS) rather than failing a call, so the space is
  // taken now, where running out is an error that names the file; a
  // reservation takes no pass over the disk (unwritten extents). (A
  // copy-on-write file system, e.g. btrfs with snapshots, may still need
  // new blocks for an overwrite: there a full disk can still stop it.)
  Status MapRows(const RowFileSpec& spec) {
    if (spec.io != "mmap") return Status::Ok();
    const int64_t bytes = data_bytes();
    int reserved = 0;
    while ((reserved = ::fallocate(fd, 0, header.data_offset, bytes)) != 0 && errno == EINTR) {
    }
    if (reserved != 0) {
      const int e = errno;
      if (e == ENOSPC) {
        struct statvfs fs {};
        const double free_gib = ::fstatvfs(fd, &fs) == 0 ? static_cast<double>(fs.f_bavail) * static_cast<double>(fs.f_frsize) / (1 << 30) : 0;
        return Status(SR_RESOURCE_EXHAUSTED,
                      fmt::format("{}: io mmap reserves the rows' {:.2f} GiB on disk first, and its file system has "
                                  "{:.2f} GiB free (io threads takes the space only as rows are written)",
                                  path.string(), static_cast<double>(bytes) / (1 << 30), free_gib));
      }
      if (e == EOPNOTSUPP) {
        return FailedPreconditionError(path.string() + ": io mmap needs a file system that can reserve a file's "
                                                       "space (fallocate); this one cannot: use io threads");
      }
      return Fail("cannot reserve the rows' space for io mmap", e);
    }
    // A mapping starts on a page of the system's size (4 KiB here, 16 or 64
    // KiB on some kernels), which the rows' 4 KiB-aligned offset may not be.
    const auto page = static_cast<int64_t>(::sysconf(_SC_PAGESIZE));
    const int64_t start = page > 0 ? header.data_offset / page * page : header.data_offset;
    const auto skip = static_cast<size_t>(header.data_offset - start);
    void* at = ::mmap(nullptr, skip + static_cast<size_t>(bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, start);
    if (at == MAP_FAILED) return Fail("cannot map the rows (io mmap)", errno);
    map_start = static_cast<std::byte*>(at);
    map_bytes = skip + static_cast<size_t>(bytes);
    map = map_start + skip;
    return Status::Ok();
  }
  // (offset of a row's bytes in the region, position in `buffer`) pairs:
  // sorted, runs of adjacent rows go as one preadv/pwritev request (at most
  // IOV_MAX rows), through the ring or spread over the pool.
  Status Transfer(std::vector<std::pair<int64_t, size_t>> order, std::byte* buffer, bool reading) const {
    const auto row_bytes = static_cast<size_t>(header.row_bytes);
    if (map != nullptr) {  // copies, in the callers' order: no request to form
      for (const auto& [offset, at] : order) {
        std::byte* file_row = map + offset;
        std::byte* mem_row = buffer + at * row_bytes;
        if (reading) {
          std::memcpy(mem_row, file_row, row_bytes);
        } else {
          std::memcpy(file_row, mem_row, row_bytes);
        }
      }
      return Status::Ok();
    }
    std::sort(order.begin(), order.end());
    std::vector<iovec> iov(order.size());
    std::vector<UringIo::Request> requests;
    for (size_t b = 0; b < order.size();) {
      size_t e = b + 1;
      while (e < order.size() && e - b < IOV_MAX && order[e].first == order[e - 1].first + header.row_bytes) ++e;
      for (size_t k = b; k < e; ++k) iov[k] = {buffer + order[k].second * row_bytes, row_bytes};
      requests.push_back({header.data_offset + order[b].first, iov.data() + b,
                          static_cast<int>(e - b), (e - b) * row_bytes});
      b = e;
    }
    if (uring) return uring->Run(fd, reading, requests, path.string());
    // Spread over the pool: many reads in flight at once. (Buffered writes
    // to one file serialize on its inode lock; one writer thread measured
    // the same, 2026-11-26.)
    const size_t tasks = std::min(requests.size(), pool->size() * 4);
    std::vector<Status> results(tasks, Status::Ok());
    std::vector<std::function<void()>> jobs;
    for (size_t t = 0; t < tasks; ++t) {
      jobs.push_back([&, t] {
        for (size_t r = t * requests.size() / tasks; r < (t + 1) * requests.size() / tasks && results[t].ok(); ++r) {
          results[t] = TransferPlain(fd, reading, requests[r], 0, path.string());
        }
      });
    }
    pool->Run(std::move(jobs));
    for (const Status& s : results) SR_RETURN_IF_ERROR(s);
    return Status::Ok();
  }
};

namespace {

Status CheckSpec(const std::filesystem::path& path, const RowFileSpec& spec) {
  if (spec.rows <= 0 || spec.row_bytes <= 0) {
    return InvalidArgumentError(fmt::format("{}: rows ({}) and row bytes ({}) must be positive", path.string(),
                                            spec.rows, spec.row_bytes));
  }
  if (spec.rows > (int64_t{1} << 40) || spec.row_bytes > (int64_t{1} << 24) ||
      spec.rows > (INT64_MAX / 2) / spec.row_bytes) {
    return InvalidArgumentError(fmt::format("{}: {} rows of {} bytes is more than a row file holds", path.string(),
                                            spec.rows, spec.row_bytes));
  }
  if (spec.io_threads < 1 || spec.io_threads > 256) {
    return InvalidArgumentError(fmt::format("{}: io_threads {} is outside 1..256", path.string(), spec.io_threads));
  }
  if (spec.io != "auto" && spec.io != "io_uring" && spec.io != "threads" && spec.io != "mmap") {
    return InvalidArgumentError(fmt::format("{}: io '{}' is not auto, threads, io_uring or mmap", path.string(), spec.io));
  }
  if (spec.layout != "in_place" && spec.layout != "log") {
    return InvalidArgumentError(fmt::format("{}: layout '{}' is not in_place or log", path.string(), spec.layout));
  }
  if (spec.layout == "log" && RowLog::RecordsFor(spec.rows) == 0) {
    return InvalidArgumentError(fmt::format("{}: {} rows are more than a log-laid row file numbers (2^31): use layout "
                                            "in_place", path.string(), spec.rows));
  }
  return Status::Ok();
}

}  // namespace

RowFile::RowFile(std::unique_ptr<State> state) : s_(std::move(state)) {}
RowFile::RowFile(RowFile&&) noexcept = default;
RowFile& RowFile::operator=(RowFile&&) noexcept = default;
RowFile::~RowFile() = default;

int64_t RowFile::rows() const { return s_->header.rows; }
int64_t RowFile::row_bytes() const { return s_->header.row_bytes; }
const std::filesystem::path& RowFile::path() const { return s_->path; }
const std::string& RowFile::io_backend() const { return s_->io_backend; }
const RowFileCounters& RowFile::counters() const { return s_->counters; }
bool RowFile::Written(int64_t row) const {
  return row >= 0 && row < rows() && (s_->written[static_cast<size_t>(row) / 64] >> (row % 64) & 1) != 0;
}

int64_t RowFile::memory_bytes() const {
  return static_cast<int64_t>(s_->written.size() * sizeof(uint64_t)) + (s_->log ? s_->log->memory_bytes() : 0);
}
std::string RowFile::layout() const { return s_->log ? "log" : "in_place"; }

StatusOr<RowFile> RowFile::Create(const std::filesystem::path& path, const RowFileSpec& spec) {
  if (spec.layout == "log") {
    return InvalidArgumentError(path.string() + ": a log-laid row file keeps its map of rows in memory, so it is made "
                                                "as scratch only (layout in_place for a file to open again)");
  }
  return Make(path, spec);
}

StatusOr<RowFile> RowFile::Make(const std::filesystem::path& path, const RowFileSpec& spec) {
  SR_RETURN_IF_ERROR(CheckSpec(path, spec));
  auto s = std::make_unique<State>();
  s->path = path;
  if (spec.layout == "log") s->log = std::make_unique<RowLog>(spec.rows, spec.row_bytes);
  SR_RETURN_IF_ERROR(s->StartIo(spec));
  s->fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);  // a model's weights
  if (s->fd < 0) {
    if (errno == EEXIST) {
      return FailedPreconditionError(path.string() + " exists already: a row file is never overwritten (delete it, "
                                                     "or open it)");
    }
    return s->Fail("cannot create", errno);
  }
  if (Status locked = s->Lock(); !locked.ok()) {
    ::unlink(path.c_str());
    return locked;
  }
  s->ReadOnlyWhatIsAsked();
  Header& h = s->header;
  h.magic = kMagic;
  h.version = s->log ? kVersionLog : kVersion;
  h.rows = spec.rows;
  h.row_bytes = spec.row_bytes;
  h.description_hash = XXH3_64bits(spec.description.data(), spec.description.size());
  h.bitmap_offset = kPage;
  h.data_offset = kPage + RoundUp((spec.rows + 7) / 8, kPage);
  s->written.assign(static_cast<size_t>((spec.rows + 63) / 64), 0);
  // Sparse: the rows take disk space only once written.
  if (::ftruncate(s->fd, h.data_offset + s->data_bytes()) != 0) {
    const int e = errno;
    ::unlink(path.c_str());
    return s->Fail("cannot size", e);
  }
  if (Status header = s->WriteHeader(kStateOpen); !header.ok()) {
    ::unlink(path.c_str());  // no headerless file left behind
    return header;
  }
  s->marked_open = true;
  if (Status mapped = s->MapRows(spec); !mapped.ok()) {
    ::unlink(path.c_str());  // the file was this call's
    return mapped;
  }
  return RowFile(std::move(s));
}

StatusOr<RowFile> RowFile::CreateScratch(const std::filesystem::path& path, const RowFileSpec& spec) {
  SR_RETURN_IF_ERROR(CheckSpec(path, spec));
  std::error_code ec;
  if (std::filesystem::exists(path, ec) || std::filesystem::is_symlink(path, ec)) {
    // Only an earlier run's row file, no longer in use, is replaced.
    State old;
    old.path = path;
    old.fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (old.fd < 0) return old.Fail("exists and cannot be opened to be replaced", errno);
    std::array<char, 8> magic{};
    if (::pread(old.fd, magic.data(), magic.size(), 0) != static_cast<ssize_t>(magic.size()) || magic != kMagic) {
      return FailedPreconditionError(path.string() + " exists and is not a row file: it is left alone (delete it, "
                                                     "or choose another directory)");
    }
    SR_RETURN_IF_ERROR(old.Lock());
    // Locked, but the name may already be another run's new file (it
    // replaced this one and let go of it): that file is not ours to remove.
    if (!old.NamesThisFile()) {
      return FailedPreconditionError(path.string() + " was replaced while this run opened it: another run is using "
                                                     "this directory");
    }
    if (::unlink(path.c_str()) != 0) return old.Fail("cannot replace", errno);
  }
  SR_ASSIGN_OR_RETURN(RowFile file, Make(path, spec));
  file.s_->scratch = true;
  return file;
}

StatusOr<RowFile> RowFile::Open(const std::filesystem::path& path, const RowFileSpec& spec) {
  SR_RETURN_IF_ERROR(CheckSpec(path, spec));
  if (spec.layout == "log") {
    return InvalidArgumentError(path.string() + ": a log-laid row file is scratch and cannot be opened again");
  }
  auto s = std::make_unique<State>();
  s->path = path;
  SR_RETURN_IF_ERROR(s->StartIo(spec));
  s->fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (s->fd < 0) return s->Fail("cannot open", errno);
  SR_RETURN_IF_ERROR(s->Lock());
  s->ReadOnlyWhatIsAsked();
  Header& h = s->header;
  std::vector<char> page(kPage);
  const ssize_t got = ::pread(s->fd, page.data(), page.size(), 0);
  if (got != kPage) return FailedPreconditionError(path.string() + ": not a row file (shorter than its header)");
  std::memcpy(&h, page.data(), sizeof(h));
  if (h.magic != kMagic) return FailedPreconditionError(path.string() + ": not a row file (no SRROWS magic)");
  if (h.version == kVersionLog) {
    return FailedPreconditionError(path.string() + ": its rows are laid out as a log, whose map of rows lived only in "
                                                   "the memory of the run that wrote it (a scratch file): start from "
                                                   "a checkpoint, or delete it");
  }
  if (h.version != kVersion) {
    return FailedPreconditionError(fmt::format("{}: row file version {}, this build reads {}", path.string(),
                                               h.version, kVersion));
  }
  if (h.checksum != HeaderChecksum(h)) return FailedPreconditionError(path.string() + ": its header is corrupt");
  if (h.state != kStateClean) {
    return FailedPreconditionError(path.string() + ": was being written when its process stopped (a killed run?), so "
                                                   "its rows may be half-written; such a file is trusted only through "
                                                   "a checkpoint manifest. Start from a checkpoint, or delete it");
  }
  const uint64_t want = XXH3_64bits(spec.description.data(), spec.description.size());
  if (h.rows != spec.rows || h.row_bytes != spec.row_bytes || h.description_hash != want) {
    return FailedPreconditionError(fmt::format("{}: holds {} rows of {} bytes{}; wanted {} rows of {} bytes for \"{}\"",
                                               path.string(), h.rows, h.row_bytes,
                                               h.description_hash != want ? " of other rows" : "", spec.rows,
                                               spec.row_bytes, spec.description));
  }
  struct stat st {};
  if (::fstat(s->fd, &st) != 0) return s->Fail("cannot stat", errno);
  if (h.bitmap_offset != kPage || h.data_offset != kPage + RoundUp((h.rows + 7) / 8, kPage) ||
      st.st_size < h.data_offset + h.rows * h.row_bytes) {
    return FailedPreconditionError(path.string() + ": truncated or not laid out as its header says");
  }
  s->written.assign(static_cast<size_t>((h.rows + 63) / 64), 0);
  const auto bitmap_bytes = static_cast<size_t>((h.rows + 7) / 8);
  if (::pread(s->fd, s->written.data(), bitmap_bytes, h.bitmap_offset) != static_cast<ssize_t>(bitmap_bytes)) {
    return s->Fail("cannot read the written-rows map", errno);
  }
  SR_RETURN_IF_ERROR(s->MapRows(spec));
  return RowFile(std::move(s));
}

Status RowFile::Read(std::span<const int64_t> rows, std::byte* out) const {
  std::vector<std::pair<int64_t, size_t>> order(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!Written(rows[i])) {
      return InvalidArgumentError(fmt::format("{}: row {} is {}", s_->path.string(), rows[i],
                                              rows[i] < 0 || rows[i] >= this->rows()
                                                  ? fmt::format("outside [0, {})", this->rows())
                                                  : std::string("not written yet")));
    }
    order[i] = {s_->OffsetOf(rows[i]), i};
  }
  SR_RETURN_IF_ERROR(s_->Transfer(std::move(order), out, /*reading=*/true));
  s_->counters.rows_read += static_cast<int64_t>(rows.size());
  s_->counters.bytes_read += static_cast<int64_t>(rows.size()) * row_bytes();
  return Status::Ok();
}

Status RowFile::Write(std::span<const int64_t> rows, const std::byte* in) {
  for (int64_t r : rows) {
    if (r < 0 || r >= this->rows()) {
      return InvalidArgumentError(fmt::format("{}: row {} is outside [0, {})", s_->path.string(), r, this->rows()));
    }
  }
  if (!s_->marked_open) {  // durable "open" before any row changes
    SR_RETURN_IF_ERROR(s_->WriteHeader(kStateOpen));
    s_->marked_open = true;
  }
  if (s_->log) return WriteLog(rows, in);
  std::vector<std::pair<int64_t, size_t>> order(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) order[i] = {rows[i], i};
  // A repeated row: only its last copy is written.
  std::stable_sort(order.begin(), order.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::pair<int64_t, size_t>> last;
  for (size_t i = 0; i < order.size(); ++i) {
    if (i + 1 < order.size() && order[i + 1].first == order[i].first) continue;
    last.push_back({order[i].first * row_bytes(), order[i].second});
  }
  const size_t written = last.size();
  if (Status moved = s_->Transfer(std::move(last), const_cast<std::byte*>(in), /*reading=*/false); !moved.ok()) {
    for (int64_t r : rows) {
      if (Written(r)) s_->SetTorn(r, true);
    }
    return moved;
  }
  if (s_->torn_rows > 0) {
    for (int64_t r : rows) s_->SetTorn(r, false);
  }
  for (int64_t r : rows) s_->written[static_cast<size_t>(r) / 64] |= uint64_t{1} << (r % 64);
  s_->counters.rows_written += static_cast<int64_t>(written);
  s_->counters.bytes_written += static_cast<int64_t>(written) * row_bytes();
  return Status::Ok();
}

// Layout log: the rows appended to the ring (RowLog::Append), cleaning it
// as needed. A failure leaves as torn every row of the call written before
// and every row the cleaning was moving (their records may be overwritten).
Status RowFile::WriteLog(std::span<const int64_t> rows, const std::byte* in) {
  std::vector<int64_t> damaged;
  const int64_t moved_before = s_->log->rows_relocated();
  if (Status appended = s_->log->Append(rows, in, s_->LogIo(), &damaged); !appended.ok()) {
    for (int64_t r : rows) {
      if (Written(r)) s_->SetTorn(r, true);
    }
    for (int64_t r : damaged) s_->SetTorn(r, true);
    return appended;
  }
  if (s_->torn_rows > 0) {
    for (int64_t r : rows) s_->SetTorn(r, false);
  }
  for (int64_t r : rows) s_->written[static_cast<size_t>(r) / 64] |= uint64_t{1} << (r % 64);
  const int64_t moved = s_->log->rows_relocated() - moved_before;
  s_->counters.rows_written += static_cast<int64_t>(rows.size());
  s_->counters.rows_relocated += moved;
  s_->counters.bytes_written += (static_cast<int64_t>(rows.size()) + moved) * s_->log->record_bytes();
  return Status::Ok();
}

Status RowFile::Forget(std::span<const int64_t> rows) {
  for (int64_t r : rows) {
    if (r < 0 || r >= this->rows()) {
      return InvalidArgumentError(fmt::format("{}: row {} is outside [0, {})", s_->path.string(), r, this->rows()));
    }
  }
  if (rows.empty()) return Status::Ok();
  if (!s_->marked_open) {  // the map on disk changes at the next Sync
    SR_RETURN_IF_ERROR(s_->WriteHeader(kStateOpen));
    s_->marked_open = true;
  }
  for (int64_t r : rows) {
    s_->written[static_cast<size_t>(r) / 64] &= ~(uint64_t{1} << (r % 64));
    if (s_->log) s_->log->Forget(r);
    if (s_->torn_rows > 0) s_->SetTorn(r, false);  // unwritten: its bytes no longer matter
  }
  return Status::Ok();
}

Status RowFile::DropPageCache() {
  if (s_->map_start != nullptr) {
    if (::msync(s_->map_start, s_->map_bytes, MS_SYNC) != 0) return s_->Fail("cannot write the mapped rows back", errno);
    // Unmapped from this process (a shared mapping's data stays in the
    // file), so that the page cache may let them go.
    if (::madvise(s_->map_start, s_->map_bytes, MADV_DONTNEED) != 0) return s_->Fail("cannot unmap the rows' pages", errno);
  }
  SR_RETURN_IF_ERROR(s_->SyncData());  // written pages are dropped only once clean
  if (const int e = ::posix_fadvise(s_->fd, 0, 0, POSIX_FADV_DONTNEED); e != 0) {
    return s_->Fail("cannot drop the file's pages from the page cache", e);
  }
  return Status::Ok();
}

StatusOr<int64_t> RowFile::ResidentBytes() const {
  struct stat st {};
  if (::fstat(s_->fd, &st) != 0) return s_->Fail("cannot stat", errno);
  if (st.st_size == 0) return int64_t{0};
  const auto size = static_cast<size_t>(st.st_size);
  void* at = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, s_->fd, 0);
  if (at == MAP_FAILED) return s_->Fail("cannot map to count its resident pages", errno);
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((size + page - 1) / page);
  const int rc = ::mincore(at, size, in.data());
  const int e = errno;
  ::munmap(at, size);
  if (rc != 0) return s_->Fail("cannot count its resident pages", e);
  int64_t pages = 0;
  for (unsigned char c : in) pages += c & 1;
  return pages * static_cast<int64_t>(page);
}

Status RowFile::Sync() {
  if (!s_->marked_open) return Status::Ok();  // nothing changed since the last Sync
  if (s_->torn_rows > 0) {
    return FailedPreconditionError(fmt::format(
        "{}: {} rows of a write that failed part-way have not been written again; the file stays marked open, "
        "so no later run trusts it", s_->path.string(), s_->torn_rows));
  }
  // Rows stored through the mapping reach the file as the kernel writes
  // back its pages; this writes them all now.
  if (s_->map_start != nullptr && ::msync(s_->map_start, s_->map_bytes, MS_SYNC) != 0) {
    return s_->Fail("cannot write the mapped rows back", errno);
  }
  const auto bitmap_bytes = static_cast<size_t>((rows() + 7) / 8);
  SR_RETURN_IF_ERROR(s_->WriteAt(s_->written.data(), bitmap_bytes, s_->header.bitmap_offset));
  SR_RETURN_IF_ERROR(s_->SyncData());
  SR_RETURN_IF_ERROR(s_->WriteHeader(kStateClean));
  s_->marked_open = false;
  ++s_->counters.syncs;
  return Status::Ok();
}

}  // namespace shardrec
