// RowLog (row_log.h). Why the ring is about twice the rows, and appends
// go in pieces of at most chunk_ = ceil(rows / 2) records: the ring holds
// records_ = rows + 2 x chunk_. When a piece of k <= chunk_ records finds
// fewer than k free, more than records_ - k >= rows + chunk_ records are in
// use, of which at most `rows` are current (one a row), so more than
// chunk_ >= k are garbage: cleaning from the head always finds room within
// a lap. Each current record the cleaning passes is written again at the
// tail, so over a lap of the ring the records moved are at most the rows,
// while at least records_ - rows >= rows new ones were appended. The
// cleaning goes a block of kCleanBlock records at a time and appends a
// piece of about kPieceBytes at most, so its buffers stay small whatever
// the caller writes at once (a flush of a whole cache).
#include "row_log.h"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

#include "shardrec/core/cache/cache_params.h"

namespace shardrec {

// The plan counts the map's bytes a row (cache_params.h) without this header.
static_assert(sizeof(uint32_t) == kRowLogBytesPerRow, "RowLog's map entry and kRowLogBytesPerRow differ");

int64_t RowLog::RecordsFor(int64_t rows) {
  const int64_t chunk = std::max<int64_t>(1, (rows + 1) / 2);
  const int64_t records = rows + 2 * chunk;
  return records < static_cast<int64_t>(kNone) ? records : 0;
}

RowLog::RowLog(int64_t rows, int64_t row_bytes)
    : rows_(rows),
      row_bytes_(row_bytes),
      records_(RecordsFor(rows)),
      chunk_(std::max<int64_t>(1, (rows + 1) / 2)),
      at_(static_cast<size_t>(rows), kNone) {}

// Records [first, first + n) of the ring as at most two byte ranges (the
// second when it wraps), each handed to `move(offset, bytes, at)`, `at`
// being the range's start within the caller's buffer.
template <class Move>
Status RowLog::EachRange(uint64_t first, int64_t n, Move move) const {
  const auto place = static_cast<int64_t>(PlaceOf(first));
  const int64_t before_end = std::min(n, records_ - place);
  const auto rb = static_cast<size_t>(record_bytes());
  SR_RETURN_IF_ERROR(move(place * record_bytes(), static_cast<size_t>(before_end) * rb, size_t{0}));
  if (n == before_end) return Status::Ok();
  return move(int64_t{0}, static_cast<size_t>(n - before_end) * rb, static_cast<size_t>(before_end) * rb);
}

void RowLog::Point(std::span<const int64_t> rows, uint64_t first) {
  for (size_t i = 0; i < rows.size(); ++i) at_[static_cast<size_t>(rows[i])] = PlaceOf(first + i);
}

Status RowLog::ReadRecords(uint64_t first, int64_t n, std::byte* out, const Io& io) const {
  return EachRange(first, n, [&](int64_t offset, size_t bytes, size_t at) { return io.read(offset, bytes, out + at); });
}

Status RowLog::WriteRecords(uint64_t first, int64_t n, const std::byte* in, const Io& io) const {
  return EachRange(first, n, [&](int64_t offset, size_t bytes, size_t at) { return io.write(offset, bytes, in + at); });
}

Status RowLog::Append(std::span<const int64_t> rows, const std::byte* in, const Io& io,
                      std::vector<int64_t>* damaged) {
  const auto rb = static_cast<size_t>(row_bytes_);
  // Pieces of at most chunk_ records (the room argument above) and of
  // about kPieceBytes, so a flush of a whole cache does not copy it all at once.
  const auto piece = static_cast<size_t>(std::min(chunk_, std::max<int64_t>(1, kPieceBytes / record_bytes())));
  for (size_t at = 0; at < rows.size(); at += piece) {
    const size_t n = std::min(rows.size() - at, piece);
    SR_RETURN_IF_ERROR(MakeRoom(static_cast<int64_t>(n), io, damaged));
    SR_RETURN_IF_ERROR(AppendPiece(rows.subspan(at, n), in + at * rb, io));
  }
  return Status::Ok();
}

Status RowLog::MakeRoom(int64_t k, const Io& io, std::vector<int64_t>* damaged) {
  const auto rec = static_cast<size_t>(record_bytes());
  int64_t scanned = 0;
  while (records_ - used() < k) {
    // The ring holds more than k garbage records (above): a lap finds them.
    if (scanned > records_ || used() == 0) {
      return InternalError(fmt::format("row log: no room for {} records in a ring of {} ({} in use)", k, records_,
                                       used()));
    }
    // A block of the head's records: the current ones among them go to
    // the tail (which may overlap the block itself, read first), the rest
    // are dropped, and the head moves past the block.
    const int64_t block = std::min(used(), kCleanBlock);
    head_buf_.resize(static_cast<size_t>(block) * rec);
    SR_RETURN_IF_ERROR(ReadRecords(head_, block, head_buf_.data(), io));
    moved_rows_.clear();
    for (int64_t j = 0; j < block; ++j) {
      const std::byte* record = head_buf_.data() + static_cast<size_t>(j) * rec;
      int64_t row = 0;
      std::memcpy(&row, record, sizeof(row));
      if (row < 0 || row >= rows_ || at_[static_cast<size_t>(row)] != PlaceOf(head_ + static_cast<uint64_t>(j))) {
        continue;  // garbage
      }
      std::byte* to = head_buf_.data() + moved_rows_.size() * rec;
      if (to != record) std::memmove(to, record, rec);
      moved_rows_.push_back(row);
    }
    const auto moved = static_cast<int64_t>(moved_rows_.size());
    if (moved > 0) {
      // Until this write succeeds the moved rows' places still name the
      // block's records, which it may overwrite.
      if (Status wrote = WriteRecords(tail_, moved, head_buf_.data(), io); !wrote.ok()) {
        if (damaged != nullptr) damaged->insert(damaged->end(), moved_rows_.begin(), moved_rows_.end());
        return wrote;
      }
    }
    Point(moved_rows_, tail_);
    head_ += static_cast<uint64_t>(block);
    tail_ += static_cast<uint64_t>(moved);
    relocated_ += moved;
    scanned += block;
  }
  return Status::Ok();
}

Status RowLog::AppendPiece(std::span<const int64_t> rows, const std::byte* in, const Io& io) {
  const auto k = static_cast<int64_t>(rows.size());
  const auto rec = static_cast<size_t>(record_bytes());
  out_buf_.resize(static_cast<size_t>(k) * rec);
  for (int64_t i = 0; i < k; ++i) {
    std::byte* record = out_buf_.data() + static_cast<size_t>(i) * rec;
    const int64_t row = rows[static_cast<size_t>(i)];
    std::memcpy(record, &row, sizeof(row));
    std::memcpy(record + kHeaderBytes, in + static_cast<size_t>(i) * static_cast<size_t>(row_bytes_),
                static_cast<size_t>(row_bytes_));
  }
  // Free records only (MakeRoom): a failure overwrites no row's current record.
  SR_RETURN_IF_ERROR(WriteRecords(tail_, k, out_buf_.data(), io));
  Point(rows, tail_);
  tail_ += static_cast<uint64_t>(k);
  return Status::Ok();
}

}  // namespace shardrec
