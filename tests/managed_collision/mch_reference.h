// A brute-force managed-collision module that follows TorchRec's
// MCHManagedCollisionModule step by step: a sorted raw-id buffer with
// INT64_MAX for empty slots, a history buffer of every id seen, unique +
// counts at each round, a stable descending sort of [slot scores ‖ new-id
// scores], and a stable re-sort of the buffers. It is slow on purpose (no
// index, whole-buffer sorts): the tests hold the real module to it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <vector>

namespace shardrec::testing {

struct ReferenceMch {
  enum class Policy { kLru, kLfu, kDistanceLfu };
  enum class Filter { kNone, kAverage, kDynamic };

  ReferenceMch(int64_t zch, int64_t interval, Policy policy, double decay = 1.0, Filter filter = Filter::kNone,
               double skew = 10.0)
      : zch_(zch), interval_(interval), policy_(policy), decay_(decay), filter_(filter), skew_(skew),
        sorted_(static_cast<size_t>(zch), kEmpty), mapping_(static_cast<size_t>(zch)),
        counts_(static_cast<size_t>(zch), 0), last_(static_cast<size_t>(zch), 0) {
    std::iota(mapping_.begin(), mapping_.end(), int64_t{0});
  }

  // profile (training) then remap; rows relative to the table's slot 0.
  std::vector<int64_t> Forward(const std::vector<int64_t>& ids, bool training) {
    if (training) Profile(ids);
    std::vector<int64_t> rows;
    for (int64_t id : ids) {
      const size_t i = Search(id);
      rows.push_back(sorted_[i] == id ? mapping_[i] : zch_ - 1);
    }
    return rows;
  }

  // Rows whose id was evicted since the last call (sorted). Slots that were
  // still empty are left out, as the real module does (their rows were
  // never read, so a reset would change nothing).
  std::vector<int64_t> TakeEvicted() {
    std::vector<int64_t> out = evicted_;
    evicted_.clear();
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }

  // row -> id of every occupied slot.
  std::map<int64_t, int64_t> Slots() const {
    std::map<int64_t, int64_t> out;
    for (size_t i = 0; i < sorted_.size(); ++i) {
      if (sorted_[i] != kEmpty) out[mapping_[i]] = sorted_[i];
    }
    return out;
  }

 private:
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::max();

  // torch.searchsorted(sorted[:-1], id): the first index whose value >= id.
  size_t Search(int64_t id) const {
    return static_cast<size_t>(std::lower_bound(sorted_.begin(), sorted_.end() - 1, id) - sorted_.begin());
  }

  void Profile(const std::vector<int64_t>& ids) {
    ++iter_;
    for (int64_t id : ids) {
      history_.push_back(id);
      history_iter_.push_back(iter_);
    }
    if (iter_ - last_eviction_ == interval_) {
      Coalesce();
      last_eviction_ = iter_;
    }
  }

  void Coalesce() {
    // torch.unique: sorted unique ids, counts, max iteration per id.
    std::map<int64_t, std::pair<int64_t, int64_t>> uniq;
    for (size_t i = 0; i < history_.size(); ++i) {
      auto& e = uniq[history_[i]];
      ++e.first;
      e.second = std::max(e.second, history_iter_[i]);
    }
    history_.clear();
    history_iter_.clear();
    std::vector<int64_t> ids, counts, lasts;
    double total = 0;
    for (const auto& [id, e] : uniq) total += static_cast<double>(e.first);
    double threshold = -std::numeric_limits<double>::infinity();
    if (filter_ != Filter::kNone && !uniq.empty()) {
      const double mean = total / static_cast<double>(uniq.size());
      threshold = filter_ == Filter::kAverage ? mean : mean * skew_;
    }
    for (const auto& [id, e] : uniq) {
      if (!(static_cast<double>(e.first) > threshold)) continue;
      ids.push_back(id);
      counts.push_back(e.first);
      lasts.push_back(e.second);
    }
    UpdateAndEvict(ids, counts, lasts);
  }

  void UpdateAndEvict(const std::vector<int64_t>& ids, const std::vector<int64_t>& counts,
                      const std::vector<int64_t>& lasts) {
    // Frequency order: stable argsort of counts, descending.
    std::vector<size_t> by_freq(ids.size());
    std::iota(by_freq.begin(), by_freq.end(), size_t{0});
    std::stable_sort(by_freq.begin(), by_freq.end(), [&](size_t a, size_t b) { return counts[a] > counts[b]; });
    std::vector<int64_t> new_ids, new_counts, new_lasts;
    for (size_t k : by_freq) {
      const size_t i = Search(ids[k]);
      if (sorted_[i] == ids[k]) {  // matching: the policy updates the slot's metadata
        counts_[i] += counts[k];
        last_[i] = lasts[k];
      } else {
        new_ids.push_back(ids[k]);
        new_counts.push_back(counts[k]);
        new_lasts.push_back(lasts[k]);
      }
    }
    // The last slot is pinned.
    const size_t pin = static_cast<size_t>(zch_ - 1);
    counts_[pin] = std::numeric_limits<int64_t>::max();
    last_[pin] = iter_;
    std::vector<double> scores;
    auto score = [&](int64_t count, int64_t last) {
      const double age = std::pow(static_cast<double>(iter_ - last + 1), decay_);
      switch (policy_) {
        case Policy::kLfu: return static_cast<double>(count);
        case Policy::kLru: return -age;
        default: return static_cast<double>(count) / age;
      }
    };
    for (size_t i = 0; i < sorted_.size(); ++i) scores.push_back(score(counts_[i], last_[i]));
    for (size_t k = 0; k < new_ids.size(); ++k) scores.push_back(score(new_counts[k], new_lasts[k]));
    std::vector<size_t> arg(scores.size());
    std::iota(arg.begin(), arg.end(), size_t{0});
    std::stable_sort(arg.begin(), arg.end(), [&](size_t a, size_t b) { return scores[a] > scores[b]; });
    const size_t z = static_cast<size_t>(zch_);
    std::vector<size_t> evicted, selected;
    for (size_t k = z; k < arg.size(); ++k) {
      if (arg[k] < z) evicted.push_back(arg[k]);
    }
    for (size_t k = 0; k < z; ++k) {
      if (arg[k] >= z) selected.push_back(arg[k] - z);
    }
    for (size_t k = 0; k < evicted.size(); ++k) {
      const size_t slot = evicted[k];
      if (sorted_[slot] != kEmpty) evicted_.push_back(mapping_[slot]);
      sorted_[slot] = new_ids[selected[k]];
      counts_[slot] = new_counts[selected[k]];
      last_[slot] = new_lasts[selected[k]];
    }
    // Re-sort every buffer by raw id (stable).
    std::vector<size_t> order(sorted_.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return sorted_[a] < sorted_[b]; });
    auto permute = [&](std::vector<int64_t>& v) {
      std::vector<int64_t> out;
      for (size_t i : order) out.push_back(v[i]);
      v = std::move(out);
    };
    permute(sorted_);
    permute(mapping_);
    permute(counts_);
    permute(last_);
  }

  int64_t zch_, interval_;
  Policy policy_;
  double decay_;
  Filter filter_;
  double skew_;
  std::vector<int64_t> sorted_, mapping_, counts_, last_;
  std::vector<int64_t> history_, history_iter_;
  int64_t iter_ = 0, last_eviction_ = 0;
  std::vector<int64_t> evicted_;
};

}  // namespace shardrec::testing
