// RowLog: where each row of a row file laid out as a log is (RowFileSpec
// layout "log", docs/cache.md). A write appends its rows at the log's tail
// as records (the row's number, then its bytes), so a cache's write-backs,
// scattered rows, reach the file as one sequential write instead of one
// dirtied page per row; the row's older record becomes garbage. The log is
// a ring of `records()` records, about twice the table's rows: when an
// append needs room, the records at its head are read (one sequential
// read), the ones still current are appended again with the new rows, and
// the head moves past them all. With at most `rows` current records in a
// ring of 2 x rows, each row written costs at most one record moved, and
// every byte reaches the file sequentially.
//
// Only the bookkeeping lives here: the bytes move through the callbacks a
// RowFile gives (its mapping, or pread/pwrite). The map of rows to records
// (4 bytes a row) lives in memory only, so a log-laid file is scratch: a
// RowFile refuses to open one.
// Not thread-safe (the RowFile's one caller at a time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec {

class RowLog {
 public:
  // Contiguous bytes of the file's record region, from a byte offset
  // within it (never past its end: a wrapping range comes as two calls).
  struct Io {
    std::function<Status(int64_t offset, size_t bytes, std::byte* out)> read;
    std::function<Status(int64_t offset, size_t bytes, const std::byte* in)> write;
  };

  // Records a ring for `rows` rows holds; 0 when `rows` is too many for
  // the map's 32-bit record numbers.
  static int64_t RecordsFor(int64_t rows);
  static constexpr int64_t kHeaderBytes = 8;  // a record's row number, before its bytes

  RowLog(int64_t rows, int64_t row_bytes);

  int64_t records() const { return records_; }
  int64_t record_bytes() const { return row_bytes_ + kHeaderBytes; }
  int64_t region_bytes() const { return records_ * record_bytes(); }
  int64_t memory_bytes() const { return static_cast<int64_t>(at_.size() * sizeof(uint32_t)); }
  // Records moved by the ring's cleaning, and their bytes (beside the rows
  // the callers wrote).
  int64_t rows_relocated() const { return relocated_; }
  // Records between head and tail: current ones and garbage.
  int64_t used() const { return static_cast<int64_t>(tail_ - head_); }

  // Whether `row` has a record (written, and not forgotten since).
  bool Has(int64_t row) const { return at_[static_cast<size_t>(row)] != kNone; }
  // The byte offset, within the region, of `row`'s bytes (it must have a record).
  int64_t OffsetOf(int64_t row) const {
    return static_cast<int64_t>(at_[static_cast<size_t>(row)]) * record_bytes() + kHeaderBytes;
  }
  void Forget(int64_t row) { at_[static_cast<size_t>(row)] = kNone; }

  // Appends `rows` (in range; a repeated row's last copy wins), their bytes
  // `in` (rows.size() x row_bytes), cleaning the head as needed. On
  // failure the pieces before stay appended, and the bytes of the rows in
  // `*damaged` (current records the failed write may have overwritten) are
  // in doubt: the caller treats them as torn.
  Status Append(std::span<const int64_t> rows, const std::byte* in, const Io& io, std::vector<int64_t>* damaged);

 private:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  static constexpr int64_t kCleanBlock = 4096;          // records the cleaning reads at a time
  static constexpr int64_t kPieceBytes = int64_t{16} << 20;  // about the most an append copies at once
  // Cleans the head until `k` records are free (k <= chunk_, so the ring
  // always holds enough garbage, row_log.cc). A failed move leaves the
  // rows it was moving in `*damaged`.
  Status MakeRoom(int64_t k, const Io& io, std::vector<int64_t>* damaged);
  // Appends rows into free records (MakeRoom first).
  Status AppendPiece(std::span<const int64_t> rows, const std::byte* in, const Io& io);
  // Record number n's place in the ring.
  uint32_t PlaceOf(uint64_t n) const { return static_cast<uint32_t>(n % static_cast<uint64_t>(records_)); }
  // rows[i]'s current record is now record number first + i.
  void Point(std::span<const int64_t> rows, uint64_t first);
  // Contiguous records [first, first + n) of the ring (wrapping), as bytes.
  Status ReadRecords(uint64_t first, int64_t n, std::byte* out, const Io& io) const;
  Status WriteRecords(uint64_t first, int64_t n, const std::byte* in, const Io& io) const;
  template <class Move>
  Status EachRange(uint64_t first, int64_t n, Move move) const;

  int64_t rows_ = 0, row_bytes_ = 0, records_ = 0, chunk_ = 0;
  uint64_t head_ = 0, tail_ = 0;  // records appended ever; a record's place is its number mod records_
  std::vector<uint32_t> at_;      // per row: its record's place, kNone when it has none
  int64_t relocated_ = 0;
  // Scratch, kept across appends: a block of the head's records, and a piece's records.
  std::vector<std::byte> head_buf_, out_buf_;
  std::vector<int64_t> moved_rows_;
};

}  // namespace shardrec
