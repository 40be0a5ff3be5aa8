// ZipfIds: ids in [0, space) drawn from a Zipf law by inverting its CDF, for
// `train`'s and `bench planner`'s synthetic batches (--ids zipf:ALPHA).
//
// Given uniform draws u, Ids() returns for each the first k with cdf[k] >= u:
// exactly what std::lower_bound over the cdf returns (a binary search costs
// ~log2(space) cache misses a draw; this costs about one, fewer at the hot
// head). A generator that takes two cores' worth of a 2-core machine from the
// ranks it feeds distorts every benchmark it drives, hence the care.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace shardrec::cli {

class ZipfIds {
 public:
  // P(k) proportional to (k + 1)^-alpha, k in [0, space); alpha > 0.
  ZipfIds(int64_t space, double alpha);

  // ids[i] = the first k with cdf()[k] >= draws[i], for draws in [0, 1].
  void Ids(std::span<const double> draws, int64_t* ids) const;
  const std::vector<double>& cdf() const { return cdf_; }

  // The head table's cells (16 KiB): a draw whose cell spans at most
  // kShortWalk ids starts its search from it; wider cells (the tail) read
  // the full guide, whose cells span about one id each.
  static constexpr size_t kHeadCells = 4096, kShortWalk = 8;

 private:
  std::vector<double> cdf_;
  // guide_[j]: the first k with cdf[k] >= j / space (spaces past 2^32 keep
  // the binary search: no table that size is drawn from here); head_[j],
  // j in [0, kHeadCells]: the first k with cdf[k] >= j / kHeadCells.
  std::vector<uint32_t> guide_, head_;
};

}  // namespace shardrec::cli
