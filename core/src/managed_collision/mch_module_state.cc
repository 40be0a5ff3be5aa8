// A module's state for checkpoints (mch_module.h): its buckets' rows, the
// window's candidates, the round schedule and the counters.
#include <algorithm>
#include <string>

#include "mch_bucket.h"
#include "shardrec/core/managed_collision/mch_module.h"

namespace shardrec {

namespace {
constexpr int64_t kMaxIteration = int64_t{1} << 50;
}  // namespace

int64_t MchManagedCollisionModule::StateWidth() const {
  return buckets_.empty() ? 6 : buckets_.front()->StateWidth();
}

int64_t MchManagedCollisionModule::FirstRow() const { return buckets_.empty() ? 0 : buckets_.front()->first_row(); }

int64_t MchManagedCollisionModule::NumRows() const {
  int64_t rows = 0;
  for (const auto& b : buckets_) rows += b->slots();
  return rows;
}

void MchManagedCollisionModule::ExportState(std::vector<int64_t>* rows, std::vector<int64_t>* candidates) const {
  const int64_t width = StateWidth();
  rows->assign(static_cast<size_t>(NumRows() * width), 0);
  int64_t at = 0;
  std::vector<int64_t> triples;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b]->ExportState(rows->data() + at * width, &(triples = {}));
    at += buckets_[b]->slots();
    for (size_t c = 0; c < triples.size(); c += 3) {
      candidates->insert(candidates->end(), {range_.first + static_cast<int64_t>(b), triples[c], triples[c + 1], triples[c + 2]});
    }
  }
}

Status MchManagedCollisionModule::ImportState(std::span<const int64_t> rows, std::span<const int64_t> candidates,
                                              int64_t iteration, int64_t last_round,
                                              const ManagedCollisionStats& counters) {
  const int64_t width = StateWidth();
  auto bad = [&](const std::string& what) { return Status(SR_INVALID_ARGUMENT, "table " + table_ + ": " + what); };
  if (static_cast<int64_t>(rows.size()) != NumRows() * width) {
    return bad("managed-collision state of " + std::to_string(rows.size()) + " values, expected " +
               std::to_string(NumRows()) + " rows of " + std::to_string(width));
  }
  if (candidates.size() % 4 != 0) return bad("candidates are (bucket, id, count, last) quadruples");
  // A round runs when a step brings iteration - last round to the
  // interval, and sets last round to it: between steps it is below.
  if (iteration < 0 || last_round < 0 || last_round > iteration || iteration - last_round >= config_.eviction_interval) {
    return bad("iteration " + std::to_string(iteration) + " and last round " + std::to_string(last_round) +
               " do not fit eviction_interval " + std::to_string(config_.eviction_interval) +
               " (between steps, iteration - last round is below it)");
  }
  // Far beyond any run, and below the incremental round's key time (2^52),
  // which every last access must stay under.
  if (iteration > kMaxIteration) {
    return bad("iteration " + std::to_string(iteration) + " is beyond " + std::to_string(kMaxIteration));
  }
  // Each bucket's candidates, as triples.
  std::vector<std::vector<int64_t>> per_bucket(buckets_.size());
  for (size_t c = 0; c < candidates.size(); c += 4) {
    const int64_t b = candidates[c] - range_.first;
    if (b < 0 || b >= static_cast<int64_t>(buckets_.size())) continue;  // another rank's
    per_bucket[static_cast<size_t>(b)].insert(per_bucket[static_cast<size_t>(b)].end(),
                                              {candidates[c + 1], candidates[c + 2], candidates[c + 3]});
  }
  // Every bucket is checked before any changes.
  int64_t at = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (Status st = buckets_[b]->CheckState(rows.data() + at * width, per_bucket[b], iteration); !st.ok()) return bad(st.message());
    at += buckets_[b]->slots();
  }
  at = 0;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    buckets_[b]->ApplyState(rows.data() + at * width, per_bucket[b]);
    at += buckets_[b]->slots();
  }
  iteration_ = iteration;
  last_round_ = last_round;
  lookup_stats_ = counters;
  lookup_stats_.occupied = lookup_stats_.capacity = 0;  // derived from the buckets
  evicted_rows_.clear();
  return Status::Ok();
}

}  // namespace shardrec
