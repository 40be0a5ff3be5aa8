// A bucket's state for checkpoints (mch_bucket.h): exported as rows of
// int64; every value is checked before any is applied, so a damaged or
// hostile checkpoint is refused without touching the bucket.
#include <algorithm>
#include <numeric>
#include <string>
#include <unordered_set>

#include "mch_bucket.h"

namespace shardrec::mc {

namespace {
enum Column : size_t { kOccupied, kId, kCount, kLast, kWindowCount, kWindowLast, kMetadata };
// Counts far beyond any run, small enough that a count and a window count
// add up without overflow.
constexpr int64_t kMaxCount = int64_t{1} << 60;
}  // namespace

void MchBucket::ExportState(int64_t* rows, std::vector<int64_t>* candidates) const {
  const auto width = static_cast<size_t>(StateWidth()), cols = static_cast<size_t>(metadata_columns_);
  for (size_t s = 0; s < static_cast<size_t>(slots_); ++s) {
    int64_t* r = rows + s * width;
    r[kOccupied] = slot_[s].occupied;
    r[kId] = slot_[s].occupied ? slot_[s].id : 0;
    r[kCount] = slot_[s].count;
    r[kLast] = slot_[s].last;
    r[kWindowCount] = slot_[s].window_count;
    r[kWindowLast] = slot_[s].window_last;
    std::copy_n(metadata_.begin() + static_cast<std::ptrdiff_t>(s * cols), cols, r + kMetadata);
  }
  for (const Candidate& c : candidates_) candidates->insert(candidates->end(), {c.id, c.count, c.last});
}

Status MchBucket::CheckState(const int64_t* rows, std::span<const int64_t> candidates, int64_t iteration) const {
  const auto width = static_cast<size_t>(StateWidth());
  const auto n = static_cast<size_t>(slots_);
  auto bad = [&](const std::string& what) {
    return Status(SR_INVALID_ARGUMENT, "bucket at row " + std::to_string(first_row_) + ": " + what);
  };
  std::unordered_set<int64_t> held;
  for (size_t s = 0; s < n; ++s) {
    const int64_t* r = rows + s * width;
    if (r[kOccupied] != 0 && r[kOccupied] != 1) return bad("slot " + std::to_string(s) + ": occupied must be 0 or 1");
    if (r[kOccupied] && s + 1 == n) return bad("the default slot holds an id");
    if (r[kOccupied] && !held.insert(r[kId]).second) return bad("id " + std::to_string(r[kId]) + " holds two slots");
    if (r[kCount] < 0 || r[kWindowCount] < 0) return bad("slot " + std::to_string(s) + ": a negative count");
    if (r[kCount] > kMaxCount || r[kWindowCount] > kMaxCount) {
      return bad("slot " + std::to_string(s) + ": a count above " + std::to_string(kMaxCount));
    }
    // A slot never empties once filled, and the default slot is never
    // filled: an empty one has never been accessed.
    if (!r[kOccupied] && (r[kCount] != 0 || r[kLast] != 0 || r[kWindowCount] != 0 || r[kWindowLast] != 0)) {
      return bad("slot " + std::to_string(s) + " is empty but has accesses");
    }
    // A step's undo logs a slot at its first id of the step, found by a
    // last access older than the step: none may lie ahead of the state.
    if (r[kLast] < 0 || r[kLast] > iteration || r[kWindowLast] < 0 || r[kWindowLast] > iteration) {
      return bad("slot " + std::to_string(s) + ": a last access outside [0, iteration " + std::to_string(iteration) +
                 "]");
    }
  }
  if (candidates.size() % 3 != 0) return bad("candidates are (id, count, last) triples");
  std::unordered_set<int64_t> seen;
  for (size_t c = 0; c < candidates.size(); c += 3) {
    const int64_t id = candidates[c];
    if (held.contains(id)) return bad("candidate " + std::to_string(id) + " holds a slot");
    if (!seen.insert(id).second) return bad("candidate " + std::to_string(id) + " is listed twice");
    if (candidates[c + 1] < 1 || candidates[c + 1] > kMaxCount) {
      return bad("candidate " + std::to_string(id) + ": a count outside [1, " + std::to_string(kMaxCount) + "]");
    }
    if (candidates[c + 2] < 0 || candidates[c + 2] > iteration) {
      return bad("candidate " + std::to_string(id) + ": a last access outside [0, iteration " +
                 std::to_string(iteration) + "]");
    }
  }
  return Status::Ok();
}

void MchBucket::ApplyState(const int64_t* rows, std::span<const int64_t> candidates) {
  const auto width = static_cast<size_t>(StateWidth()), cols = static_cast<size_t>(metadata_columns_);
  const auto n = static_cast<size_t>(slots_);
  IdSlotIndex index(slots_);
  std::vector<int64_t> holders, empty;
  touched_.clear();
  for (size_t s = 0; s < n; ++s) {
    const int64_t* r = rows + s * width;
    slot_[s].occupied = r[kOccupied] != 0;
    slot_[s].id = r[kOccupied] ? r[kId] : 0;
    slot_[s].count = r[kCount];
    slot_[s].last = r[kLast];
    slot_[s].window_count = r[kWindowCount];
    slot_[s].window_last = r[kWindowLast];
    std::copy_n(r + kMetadata, cols, metadata_.begin() + static_cast<std::ptrdiff_t>(s * cols));
    if (r[kWindowCount] > 0) touched_.push_back(static_cast<int64_t>(s));
    if (s + 1 == n) continue;  // the default slot is in no order
    if (r[kOccupied]) index.Insert(r[kId], static_cast<int64_t>(s));
    if (!incremental_) (r[kOccupied] ? holders : empty).push_back(static_cast<int64_t>(s));  // the exact round's order
  }
  index_ = std::move(index);
  // The tie order the exact round keeps: holders by id, then the empty
  // slots by slot.
  if (!incremental_) {
    std::sort(holders.begin(), holders.end(),
              [&](int64_t a, int64_t b) { return slot_[static_cast<size_t>(a)].id < slot_[static_cast<size_t>(b)].id; });
    order_ = std::move(holders);
    order_.insert(order_.end(), empty.begin(), empty.end());
  }
  candidates_.clear();
  candidate_index_.Clear();
  filed_ = false;  // (either place decides alike)
  for (size_t c = 0; c < candidates.size(); c += 3) {  // checked: none holds a slot, none twice
    candidate_index_.FindOrInsert(candidates[c], CandidateMark(static_cast<int64_t>(candidates_.size())));
    candidates_.push_back({candidates[c], candidates[c + 1], candidates[c + 2], 0.0});
  }
  undo_ = WindowUndo{};
  // The incremental round's keys come from the policy: the next round
  // scores every holder and files them again.
  if (incremental_) {
    ClearFiles();
    keys_ready_ = false;
    RebuildFreeSlots();
  }
}

}  // namespace shardrec::mc
