// The planner's result for people (planner.h, FormatPlannerResult).
#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner_options.h"
#include "shardrec/core/planner/planner.h"
#include "shardrec/core/text/byte_size.h"

namespace shardrec {

namespace {

// The ranks holding any of the table's bytes.
std::string RanksOf(const TableChoice& t) {
  std::vector<int> ranks;
  for (size_t r = 0; r < t.bytes_per_rank.size(); ++r) {
    if (t.bytes_per_rank[r] > 0) ranks.push_back(static_cast<int>(r));
  }
  return ranks.empty() ? "-" : planner_internal::FormatRanks(ranks);
}

}  // namespace

std::string FormatPlannerResult(const PlannerResult& r, const PlannerRequest& req, bool explain) {
  std::string out = fmt::format("plan: {} tables on {} ranks, batch {} per rank; estimated step {:.3f} ms "
                                "(the slowest rank), planned in {:.3f} s ({} options scored, {} improvement moves)\n",
                                r.tables.size(), r.ranks.size(), req.batch_per_rank, r.step_seconds * 1e3,
                                r.plan_seconds, r.options_evaluated, r.improvement_moves);
  if (r.bound_seconds > 0) {
    out += fmt::format("  no plan of these options can be estimated below {:.3f} ms ({}; memory budgets not "
                       "counted); this one is {:.1f}% above that\n",
                       r.bound_seconds * 1e3, r.bound_reason, (r.step_seconds / r.bound_seconds - 1) * 100);
  }
  size_t name_w = 5, type_w = 4, kernel_w = 6, ranks_w = 5;
  std::vector<std::string> ranks;
  for (size_t t = 0; t < r.tables.size(); ++t) {
    ranks.push_back(RanksOf(r.tables[t]));
    name_w = std::max(name_w, req.tables[t].name.size());
    type_w = std::max(type_w, r.tables[t].sharding.sharding_type.size());
    kernel_w = std::max(kernel_w, r.tables[t].sharding.compute_kernel.size());
    ranks_w = std::max(ranks_w, ranks.back().size());
  }
  out += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>10}  {:>10}\n", "table", name_w, "type", type_w, "kernel",
                     kernel_w, "ranks", ranks_w, "ms/rank", "bytes/rank");
  for (size_t t = 0; t < r.tables.size(); ++t) {
    const TableChoice& c = r.tables[t];
    const int64_t bytes = c.bytes_per_rank.empty() ? 0 : *std::max_element(c.bytes_per_rank.begin(), c.bytes_per_rank.end());
    out += fmt::format("  {:<{}}  {:<{}}  {:<{}}  {:<{}}  {:>10.3f}  {:>10}\n", req.tables[t].name, name_w,
                       c.sharding.sharding_type, type_w, c.sharding.compute_kernel, kernel_w, ranks[t], ranks_w,
                       c.seconds * 1e3, FormatByteSize(bytes));
    if (explain) {
      for (const std::string& line : c.why) out += "      " + line + "\n";
    }
  }
  out += "  per rank (estimated ms per step: compute + comm + latency; bytes held / budget):\n";
  constexpr int kBar = 30;
  for (size_t q = 0; q < r.ranks.size(); ++q) {
    const RankEstimate& e = r.ranks[q];
    const int filled = r.step_seconds > 0 ? static_cast<int>(e.total_s() / r.step_seconds * kBar + 0.5) : 0;
    const int compute = r.step_seconds > 0 ? std::min(filled, static_cast<int>(e.compute_s / r.step_seconds * kBar + 0.5)) : 0;
    out += fmt::format("  [{:>3}] {:>9.3f} = {:>8.3f} + {:>8.3f} + {:>6.3f}  {:>10} / {:<10} |{}{}{}|\n", q,
                       e.total_s() * 1e3, e.compute_s * 1e3, e.comm_s * 1e3, e.latency_s * 1e3, FormatByteSize(e.bytes),
                       e.budget > 0 ? FormatByteSize(e.budget) : "unlimited", std::string(static_cast<size_t>(compute), '#'),
                       std::string(static_cast<size_t>(filled - compute), '='),
                       std::string(static_cast<size_t>(kBar - std::min(filled, kBar)), ' '));
  }
  out += "  (# compute, = comm and latency; the bar is the rank's share of the slowest rank's step)\n";
  for (const std::string& n : r.notes) out += "  note: " + n + "\n";
  return out;
}

}  // namespace shardrec
