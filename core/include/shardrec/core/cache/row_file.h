// RowFile: the rows of a table larger than memory, on a local (SSD) file;
// the lower tier of a cached table (docs/cache.md). Fixed-size rows (a
// row's weights and its optimizer state, as the cache keeps them), read
// and written in batches of scattered rows by a pool of I/O threads, so
// many reads are in flight at once.
//
// The file says whether it can be trusted. Its header is marked "open"
// (and made durable) before the first row changes, and "clean" only by
// Sync(), after the rows and the map of written rows are durable. A
// process killed between the two leaves "open", and Open() refuses such a
// file: its rows may be half-written. Such a file is trusted only through a
// checkpoint manifest that names it (a later issue step); otherwise start
// again. Rows never written read as absent (Written() false), so a new
// table needs no pass over the disk: the cache draws their initial values.
//
// Layout (little-endian): a 4 KiB header (magic, version, state, rows,
// row_bytes, the spec's description hash, the offsets, an XXH3 of the
// header), the written-rows bitmap padded to 4 KiB, then the rows: in
// place (row r at r x row_bytes), or, for a scratch file, as a log
// (RowFileSpec::layout, row_log.h: each write appended as records, the
// version saying so), whose map of rows lives in memory only, so such a
// file is never opened again.
//
// I/O: each batch's runs of adjacent rows go out as preadv/pwritev
// requests, spread over a pool of I/O threads, or through one io_uring
// (liburing, uring_io.h), or as copies into a shared mapping, when asked
// (a log's appends are written even then: row_file.cc).
// A file is locked (flock) while open: a second RowFile on it, in this
// process or another, is refused.
// Not thread-safe: one caller at a time (its reads and writes use the pool).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec {

struct RowFileSpec {
  int64_t rows = 0;       // > 0
  int64_t row_bytes = 0;  // > 0
  // What the rows are (e.g. "t0: 64 x float32 + 64 x float32 state"): a
  // file made for other rows is refused by name.
  std::string description;
  int io_threads = 8;  // reads and writes in flight at once (1..256)
  // How: "threads" (the pool of io_threads threads), "io_uring" (one ring;
  // refused, saying why, when this build has no liburing or the kernel
  // does not allow io_uring), "auto" (the ring where it can be used, else
  // the pool, io_backend() saying why: from a disk the ring measured
  // faster, from the page cache level, docs/cache.md), or "mmap" (copies
  // into a shared mapping of the rows: no system call a row, fastest where
  // the page cache holds the file; a log's appends, sequential, are one
  // pwrite each; the file's whole size is reserved on disk when it is made
  // or opened, its pages count in the process's RSS, and a read the device
  // fails stops the process with SIGBUS). Files moved by system calls read
  // no pages ahead (POSIX_FADV_RANDOM).
  std::string io = "auto";
  // Where rows sit: "in_place" (row r at its own offset: a write-back of a
  // scattered row dirties a page of its own), or "log" (CreateScratch
  // only: each write appended at the end of a ring about twice the rows'
  // size, one sequential write, the rows' older copies reclaimed as the
  // ring comes round, row_log.h; 4 bytes of memory a row).
  std::string layout = "in_place";
};

struct RowFileCounters {
  int64_t rows_read = 0, rows_written = 0;
  int64_t bytes_read = 0, bytes_written = 0;
  int64_t syncs = 0;
  int64_t rows_relocated = 0;  // layout log: current rows moved again by the ring's cleaning
};

class RowFile {
 public:
  // A new file; refused when `path` exists (nothing is overwritten), and
  // for layout "log" (scratch only).
  static StatusOr<RowFile> Create(const std::filesystem::path& path, const RowFileSpec& spec);
  // A new file that lives as long as this object: the rows of a cached
  // table inside a module, whose trusted copy is a checkpoint. An earlier
  // run's row file at `path`, no longer in use, is replaced; anything else
  // there is refused.
  static StatusOr<RowFile> CreateScratch(const std::filesystem::path& path, const RowFileSpec& spec);
  // A file made with the same rows, row size and description, closed by
  // Sync(). Refused, naming the file and what differs, otherwise.
  static StatusOr<RowFile> Open(const std::filesystem::path& path, const RowFileSpec& spec);

  RowFile(RowFile&&) noexcept;
  RowFile& operator=(RowFile&&) noexcept;
  ~RowFile();  // closes without Sync(): a file written since is left "open"

  int64_t rows() const;
  int64_t row_bytes() const;
  const std::filesystem::path& path() const;
  // What moves the rows: "io_uring", "mmap", or "8 threads" (with io auto
  // where io_uring cannot be used: "8 threads (io auto: io_uring cannot be
  // used here: WHY)").
  const std::string& io_backend() const;
  bool Written(int64_t row) const;
  std::string layout() const;  // RowFileSpec::layout
  // Its bookkeeping in memory: the written-rows map, and a log's row map.
  int64_t memory_bytes() const;
  const RowFileCounters& counters() const;

  // out: rows.size() x row_bytes, row i of `rows` at i x row_bytes. Every
  // row must be in range and written. Adjacent rows are read together.
  Status Read(std::span<const int64_t> rows, std::byte* out) const;
  // in: as Read's out. Rows may repeat: the last copy wins.
  Status Write(std::span<const int64_t> rows, const std::byte* in);
  // Rows read as never written again (a reset row is drawn anew).
  Status Forget(std::span<const int64_t> rows);
  // Makes every row and the bitmap durable, then marks the file clean.
  Status Sync();
  // Writes the rows' changed pages to the device and has the kernel drop
  // the file's pages from the page cache (a mapping's are unmapped first),
  // so the next reads come from the device: for measuring a disk the page
  // cache does not hold (`bench cache --drop-page-cache`). The header and
  // what the file is trusted for are unchanged. The kernel may keep pages
  // still in use elsewhere; `ResidentBytes` says what is left.
  Status DropPageCache();
  // Bytes of the file in the page cache now (mincore over a read-only map).
  StatusOr<int64_t> ResidentBytes() const;

 private:
  struct State;
  explicit RowFile(std::unique_ptr<State> state);
  static StatusOr<RowFile> Make(const std::filesystem::path& path, const RowFileSpec& spec);
  Status WriteLog(std::span<const int64_t> rows, const std::byte* in);
  std::unique_ptr<State> s_;
};

}  // namespace shardrec
