// The planner: enumerate, estimate, partition, explain (planner.h).
#include "shardrec/core/planner/planner.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "planner_options.h"
#include "shardrec/core/tensor/tensor.h"
#include "shardrec/core/text/byte_size.h"

namespace shardrec {

using planner_internal::Relocate;
using planner_internal::Shape;
using planner_internal::SharderSet;

namespace {

// One way to run one table: a shape, a kernel, where it goes.
struct Candidate {
  int shape = -1, kernel = -1, offset = 0;
};

// How a candidate leaves the step: fits the budgets or not (and where not),
// the slowest rank's estimate, and a balance tie-break.
struct Score {
  bool fits = true;
  int over_rank = -1;
  int64_t over_bytes = 0;
  double makespan = 0, sum_sq = 0;
  bool Better(const Score& o) const {
    if (fits != o.fits) return fits;
    const double tol = 1e-9 * std::max(makespan, o.makespan);
    if (std::abs(makespan - o.makespan) > tol) return makespan < o.makespan;
    return sum_sq < o.sum_sq * (1 - 1e-12);
  }
};

struct TableState {
  sr_table_desc desc{};
  std::vector<Shape> shapes;
  std::vector<int> kernels;          // indices into the planner's kernels allowed for this table
  std::vector<int> pinned;           // constraint ranks (sorted), empty: any
  std::vector<std::string> excluded; // options left out before scoring, and why
  Candidate chosen;
  TableEffect effect;
  bool placed = false;
  double order_cost = 0;
  std::vector<std::string> why;
};

std::string Ms(double s) { return fmt::format("{:.3f} ms", s * 1e3); }

std::string RankList(const std::vector<sr_shard>& shards) {
  std::set<int> ranks;
  for (const sr_shard& s : shards) {
    if (s.num_rows > 0 && s.num_cols > 0) ranks.insert(s.rank);
  }
  return planner_internal::FormatRanks(std::vector<int>(ranks.begin(), ranks.end()));
}

class Planner {
 public:
  Planner(const PluginRegistry& registry, const PlannerRequest& req)
      : registry_(registry), req_(req),
        world_(req.world_size),
        per_host_(req.ranks_per_host > 0 ? req.ranks_per_host
                                         : (req.topology.ranks_per_host > 0 ? std::min(req.topology.ranks_per_host, req.world_size) : req.world_size)),
        model_(req.topology, world_, per_host_, req.batch_per_rank) {}

  StatusOr<PlannerResult> Run();
  StatusOr<PlannerResult> Estimate(const ShardingPlan& plan);

 private:
  Status Validate();
  Status PrepareTables();
  Status CheckSmallestReason() const;
  Status Greedy(bool memory_first);
  void Improve();
  void TrySeeds();
  double Makespan() const;
  bool TrySwap(int slowest, const std::vector<std::pair<double, size_t>>& on, double now);
  TableEffect EffectOf(size_t t, const Candidate& c) const;
  std::pair<double, std::string> LowerBound() const;
  // The placements of a shape: how many shifts it may take, and whether
  // shift `off` keeps it on the table's pinned ranks (if any).
  int Shifts(const Shape& shape) const;
  bool PinnedAllows(const TableState& st, const Shape& shape, int off) const;
  Score ScoreOf(const TableEffect& e) const;
  // The best candidate for table t against the current loads; fills
  // per-option lines when `explain`.
  std::pair<Candidate, Score> Best(size_t t, bool memory_first, std::vector<std::string>* explain);
  void Place(size_t t, const Candidate& c);
  void Remove(size_t t);
  std::string Describe(size_t t, const Candidate& c) const;
  PlannerResult Result() const;
  Status Kernels();

  const PluginRegistry& registry_;
  const PlannerRequest& req_;
  int world_, per_host_;
  CostModel model_;
  std::vector<int64_t> budget_;  // per rank, 0: unlimited
  sr_topology topo_{};
  std::vector<std::string> kernel_names_;
  std::vector<KernelCost> kernel_costs_;
  SharderSet sharders_;
  std::vector<TableState> tables_;
  std::vector<RankLoad> loads_;
  int sharded_ = 0, replicated_ = 0;  // tables placed of each kind, for the latency term
  int moves_ = 0;
  int64_t evaluated_ = 0;
  std::vector<std::string> notes_;
};

Status Planner::Validate() {
  if (world_ < 1) return InvalidArgumentError("planner: the world size must be >= 1");
  if (per_host_ < 1 || world_ % per_host_ != 0) {
    return InvalidArgumentError(fmt::format("planner: {} ranks do not split into hosts of {}", world_, per_host_));
  }
  if (req_.batch_per_rank < 1) return InvalidArgumentError("planner: the batch per rank must be >= 1");
  if (!req_.workload.empty() && req_.workload.size() != req_.tables.size()) {
    return InvalidArgumentError(fmt::format("planner: traffic for {} tables, but {} tables", req_.workload.size(),
                                            req_.tables.size()));
  }
  SR_RETURN_IF_ERROR(ValidateTables(req_.tables));
  if (!req_.memory_bytes_per_rank.empty()) {
    if (static_cast<int>(req_.memory_bytes_per_rank.size()) != world_) {
      return InvalidArgumentError(fmt::format("planner: memory budgets for {} ranks in a world of {}",
                                              req_.memory_bytes_per_rank.size(), world_));
    }
    budget_ = req_.memory_bytes_per_rank;
  } else {
    budget_.assign(static_cast<size_t>(world_), req_.topology.memory_bytes_per_rank);
  }
  std::set<std::string> names;
  for (const auto& t : req_.tables) names.insert(t.name);
  for (const auto& [name, c] : req_.constraints) {
    if (!names.count(name)) return InvalidArgumentError("planner: the constraints name table '" + name + "', which is not one of the tables");
    for (int r : c.ranks) {
      if (r >= world_) {
        return InvalidArgumentError(fmt::format("planner: table '{}' is pinned to rank {}, outside the world of {} ranks",
                                                name, r, world_));
      }
    }
  }
  return Status::Ok();
}

Status Planner::Kernels() {
  std::vector<std::string> wanted = req_.kernels;
  if (wanted.empty()) {
    for (const auto& [name, cost] : req_.topology.kernels) {
      if (registry_.Find(SR_KIND_KERNEL, name).ok()) wanted.push_back(name);
    }
  }
  for (const std::string& k : wanted) {
    auto it = req_.topology.kernels.find(k);
    if (it == req_.topology.kernels.end()) {
      notes_.push_back("kernel '" + k + "' left out: the topology (" + req_.topology.source +
                       ") has no speed for it (measure one: shardrec bench topology --kernel " + k + ")");
      continue;
    }
    kernel_names_.push_back(k);
    kernel_costs_.push_back(it->second);
  }
  if (kernel_names_.empty()) {
    return Status(SR_NOT_FOUND, "planner: no kernel to plan for: the topology (" + req_.topology.source +
                                    ") has speeds for kernels this run cannot use");
  }
  return Status::Ok();
}

Status Planner::PrepareTables() {
  SR_ASSIGN_OR_RETURN(sharders_, planner_internal::CreateSharders(registry_, req_.sharders, req_.sharder_options));
  topo_ = MakeTopology(world_, per_host_, nullptr);
  tables_.resize(req_.tables.size());
  static const TableWorkload kUniform;
  for (size_t t = 0; t < req_.tables.size(); ++t) {
    const EmbeddingTableConfig& cfg = req_.tables[t];
    TableState& st = tables_[t];
    st.desc = MakeTableDesc(cfg.name.c_str(), cfg.num_embeddings, cfg.embedding_dim, ToDLDataType(cfg.data_type),
                            req_.state_bytes_per_row ? req_.state_bytes_per_row(cfg) : 0);
    const TableWorkload& work = req_.workload.empty() ? kUniform : req_.workload[t];
    const auto c = req_.constraints.find(cfg.name);
    const TableConstraint* con = c == req_.constraints.end() ? nullptr : &c->second;
    if (con) {
      st.pinned = con->ranks;
      std::sort(st.pinned.begin(), st.pinned.end());
    }
    for (size_t k = 0; k < kernel_names_.size(); ++k) {
      if (con && !con->compute_kernels.empty() &&
          std::find(con->compute_kernels.begin(), con->compute_kernels.end(), kernel_names_[k]) == con->compute_kernels.end()) {
        st.excluded.push_back("kernel " + kernel_names_[k] + ": not in the table's compute_kernels constraint");
        continue;
      }
      st.kernels.push_back(static_cast<int>(k));
    }
    if (con) {
      for (const std::string& k : con->compute_kernels) {
        if (std::find(kernel_names_.begin(), kernel_names_.end(), k) == kernel_names_.end()) {
          st.excluded.push_back("kernel " + k + " (allowed by the constraints): not usable in this run or not in the topology");
        }
      }
    }
    OptionList call;
    if (con) call = OptionList(con->sharder_options);
    for (size_t s = 0; s < sharders_.names.size(); ++s) {
      Shape shape;
      shape.sharder = sharders_.names[s];
      shape.relocate = sharders_.relocate[s];
      if (con && !con->sharding_types.empty() &&
          std::find(con->sharding_types.begin(), con->sharding_types.end(), shape.sharder) == con->sharding_types.end()) {
        st.excluded.push_back(shape.sharder + ": not in the table's sharding_types constraint");
        continue;
      }
      auto placed = PlaceTable(sharders_.sharders[s], st.desc, topo_, call);
      if (!placed.ok()) {
        st.excluded.push_back(shape.sharder + ": the sharder refused: " + placed.status().message());
        continue;
      }
      if (!CheckQuantizedRowsWhole(cfg, placed->shards, shape.sharder).ok()) {
        st.excluded.push_back(shape.sharder + ": splits columns, and an " + DataTypeName(cfg.data_type) +
                              " table's quantized rows cannot be split");
        continue;
      }
      shape.shards = placed->shards;
      shape.replicated = placed->replicated;
      Status filled = planner_internal::FillShares(&sharders_.sharders[s], st.desc, topo_, work, req_.batch_per_rank, shape);
      if (filled.ok()) filled = planner_internal::FillBytes(&sharders_.sharders[s], st.desc, topo_, shape);
      if (!filled.ok()) return filled.WithContext("planner");
      st.shapes.push_back(std::move(shape));
    }
    if (con) {
      for (const std::string& type : con->sharding_types) {
        if (!sharders_.Find(type)) st.excluded.push_back(type + " (allowed by the constraints): no such sharder was found");
      }
    }
    if (st.shapes.empty() || st.kernels.empty()) {
      std::string why;
      for (const std::string& e : st.excluded) why += "\n  " + e;
      return InvalidArgumentError("planner: table '" + cfg.name + "' has no option left:" + why);
    }
    // Greedy order: the table's own step time under its first option.
    const TableEffect e = EffectOf(t, Candidate{0, st.kernels[0], 0});
    double cost = 0;
    model_.Visit(e, std::vector<RankLoad>(static_cast<size_t>(world_)),
                 [&](int, const RankLoad& l) { cost = std::max(cost, model_.RankSeconds(l)); });
    st.order_cost = cost;
  }
  return Status::Ok();
}

TableEffect Planner::EffectOf(size_t t, const Candidate& c) const {
  const TableState& st = tables_[t];
  const Shape& shape = st.shapes[static_cast<size_t>(c.shape)];
  const EmbeddingTableConfig& cfg = req_.tables[t];
  const double pooling = req_.workload.empty() ? static_cast<double>(std::max<size_t>(1, cfg.feature_names.size()))
                                               : req_.workload[t].pooling_factor;
  const int64_t elem = static_cast<int64_t>(DTypeSize(st.desc.weight_dtype));
  return model_.Effect(kernel_costs_[static_cast<size_t>(c.kernel)], cfg.embedding_dim, elem, pooling,
                       planner_internal::Moved(shape, c.offset, world_, per_host_), shape.share, shape.bytes,
                       shape.replicated);
}

Score Planner::ScoreOf(const TableEffect& e) const {
  Score s;
  // The sharded tables' collectives are charged from the start: otherwise
  // the first table would go data-parallel only to save their latency, and
  // every later one follow it (a step no single move can climb back down).
  const bool sharded = true, replicated = replicated_ > 0 || e.replicated;
  const double latency = model_.LatencySeconds(sharded, replicated);
  const bool shares = model_.SharesCores();
  const int per_host = model_.ranks_per_host();
  // A host's rank times, for its ranks' turns on its cores: on the stack
  // for a host of up to 64 ranks (this is scored for every option tried).
  std::array<double, 64> on_stack;  // each entry written before its host is scored
  std::vector<double> on_heap;
  if (shares && per_host > 64) on_heap.resize(static_cast<size_t>(per_host));
  const std::span<double> host = on_heap.empty() ? std::span<double>(on_stack.data(), std::min(per_host, 64))
                                                 : std::span<double>(on_heap);
  model_.Visit(e, loads_, [&](int q, const RankLoad& l) {
    const double own = model_.RankSeconds(l);
    const double sec = own + latency;
    s.makespan = std::max(s.makespan, sec);
    s.sum_sq += sec * sec;
    if (shares) {
      host[static_cast<size_t>(q % per_host)] = own;
      if ((q + 1) % per_host == 0) s.makespan = std::max(s.makespan, model_.SharedHostSeconds(host) + latency);
    }
    const int64_t b = budget_[static_cast<size_t>(q)];
    if (b > 0 && l.bytes > b && (s.fits || l.bytes - b > s.over_bytes)) {
      s.fits = false;
      s.over_rank = q;
      s.over_bytes = l.bytes - b;
    }
  });
  return s;
}

int Planner::Shifts(const Shape& shape) const {
  return shape.relocate == Relocate::kShift ? world_ : shape.relocate == Relocate::kHost ? world_ / per_host_ : 1;
}

bool Planner::PinnedAllows(const TableState& st, const Shape& shape, int off) const {
  if (st.pinned.empty()) return true;
  if (shape.replicated && static_cast<int>(st.pinned.size()) != world_) return false;
  for (const sr_shard& s : planner_internal::Moved(shape, off, world_, per_host_)) {
    if (s.num_rows > 0 && s.num_cols > 0 && !std::binary_search(st.pinned.begin(), st.pinned.end(), s.rank)) return false;
  }
  return true;
}

// For each table, over the same options Best weighs (constraints and
// pinned ranks honoured; memory budgets are not counted, so a plan held up
// by them sits further above the bound): its least total work
// (SpreadSeconds summed over the ranks) and its least busiest rank. A plan's slowest rank is at least the mean of
// all ranks (or, when ranks share cores, a host's sum over its cores), and
// at least any one table's share of it; loads add up per table, so each
// table's least is a bound whatever the others do.
std::pair<double, std::string> Planner::LowerBound() const {
  const std::vector<RankLoad> zero(static_cast<size_t>(world_));
  double spread = 0, single = 0;
  std::string single_table;
  bool must_shard = false, must_replicate = false;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const TableState& st = tables_[t];
    double least_total = std::numeric_limits<double>::infinity(), least_busiest = least_total;
    bool any_sharded = false, any_replicated = false;
    for (size_t si = 0; si < st.shapes.size(); ++si) {
      const Shape& shape = st.shapes[si];
      // Moving a placement by whole hosts only relabels the hosts, which
      // changes no rank's work: without pinned ranks, the shifts within
      // one host (a host shift: none) cover every distinct placement.
      // (1000 tables x 64 ranks on 8 hosts: 0.14 s with every shift.)
      int offsets = Shifts(shape);
      if (st.pinned.empty()) offsets = shape.relocate == Relocate::kShift ? std::min(offsets, per_host_) : 1;
      for (int k : st.kernels) {
        for (int off = 0; off < offsets; ++off) {
          if (!PinnedAllows(st, shape, off)) continue;
          (shape.replicated ? any_replicated : any_sharded) = true;
          double total = 0, busiest = 0;
          model_.Visit(EffectOf(t, Candidate{static_cast<int>(si), k, off}), zero, [&](int, const RankLoad& l) {
            total += model_.SpreadSeconds(l);
            busiest = std::max(busiest, model_.RankSeconds(l));
          });
          least_total = std::min(least_total, total);
          least_busiest = std::min(least_busiest, busiest);
        }
      }
    }
    if (!any_sharded && !any_replicated) continue;  // no option at all: Greedy refuses it
    must_shard = must_shard || !any_replicated;
    must_replicate = must_replicate || !any_sharded;
    spread += least_total;
    if (least_busiest > single) single = least_busiest, single_table = req_.tables[t].name;
  }
  // Ranks that take turns on a host's cores finish no sooner than the
  // host's summed time over them.
  const double lanes = model_.SharesCores()
                           ? static_cast<double>(model_.hosts()) * static_cast<double>(req_.topology.cores_per_host)
                           : static_cast<double>(world_);
  // Every plan pays the latency of the kinds some table must take, and at
  // least the cheaper kind's when every table may take either.
  const double latency = must_shard || must_replicate || tables_.empty()
                             ? model_.LatencySeconds(must_shard, must_replicate)
                             : std::min(model_.LatencySeconds(true, false), model_.LatencySeconds(false, true));
  const double mean = spread / lanes;
  if (single > mean) {
    return {single + latency, fmt::format("table '{}' alone: its least-loaded option still puts {} on one rank",
                                          single_table, Ms(single))};
  }
  return {mean + latency, fmt::format("every table's least work, {} in all, spread evenly over {} {}", Ms(spread),
                                      lanes, model_.SharesCores() ? "cores (the hosts' cores, which the ranks share)"
                                                                  : "ranks")};
}

std::pair<Candidate, Score> Planner::Best(size_t t, bool memory_first, std::vector<std::string>* explain) {
  TableState& st = tables_[t];
  Candidate best;
  Score best_score;
  best_score.fits = false;
  best_score.makespan = std::numeric_limits<double>::infinity();
  double best_fill = std::numeric_limits<double>::infinity();
  for (size_t si = 0; si < st.shapes.size(); ++si) {
    const Shape& shape = st.shapes[si];
    const int offsets = Shifts(shape);
    for (int k : st.kernels) {
      Candidate local;
      Score local_score;
      local_score.fits = false;
      local_score.makespan = std::numeric_limits<double>::infinity();
      bool pinned_out = true;
      for (int off = 0; off < offsets; ++off) {
        const Candidate c{static_cast<int>(si), k, off};
        if (!PinnedAllows(st, shape, off)) continue;
        pinned_out = false;
        const TableEffect e = EffectOf(t, c);
        Score sc = ScoreOf(e);
        ++evaluated_;
        if (sc.Better(local_score) || local.shape < 0) {
          local = c;
          local_score = sc;
        }
        // Memory first: the candidate that leaves the fullest rank least full.
        double fill = 0;
        if (memory_first) {
          model_.Visit(e, loads_, [&](int q, const RankLoad& l) {
            const int64_t b = budget_[static_cast<size_t>(q)];
            if (b > 0) fill = std::max(fill, static_cast<double>(l.bytes) / static_cast<double>(b));
          });
        }
        // The first candidate stands until a better one comes, so a table
        // that fits nowhere still names its least-bad option.
        const bool fits_better = sc.fits && (!best_score.fits || fill < best_fill - 1e-12 ||
                                             (std::abs(fill - best_fill) <= 1e-12 && sc.Better(best_score)));
        const bool better = best.shape < 0 || (memory_first ? fits_better : sc.Better(best_score));
        if (better) {
          best = c;
          best_score = sc;
          best_fill = fill;
        }
      }
      if (!explain) continue;
      const std::string option = fmt::format("{} on {}", shape.sharder, kernel_names_[static_cast<size_t>(k)]);
      if (pinned_out) {
        explain->push_back(option + ": no placement keeps it on its pinned ranks");
      } else if (!local_score.fits) {
        explain->push_back(fmt::format("{}: does not fit: rank {} would be {} over its budget", option,
                                       local_score.over_rank, FormatByteSize(local_score.over_bytes)));
      } else {
        explain->push_back(fmt::format("{}{}: step {}", option,
                                       shape.relocate == Relocate::kFixed ? "" : " (best at " + RankList(planner_internal::Moved(shape, local.offset, world_, per_host_)) + ")",
                                       Ms(local_score.makespan)));
      }
    }
  }
  return {best, best_score};
}

void Planner::Place(size_t t, const Candidate& c) {
  TableState& st = tables_[t];
  st.chosen = c;
  st.effect = EffectOf(t, c);
  model_.Apply(st.effect, loads_, +1);
  st.placed = true;
  (st.effect.replicated ? replicated_ : sharded_) += 1;
}

void Planner::Remove(size_t t) {
  TableState& st = tables_[t];
  model_.Apply(st.effect, loads_, -1);
  st.placed = false;
  (st.effect.replicated ? replicated_ : sharded_) -= 1;
}

std::string Planner::Describe(size_t t, const Candidate& c) const {
  const Shape& shape = tables_[t].shapes[static_cast<size_t>(c.shape)];
  return fmt::format("{} on {}, ranks {}", shape.sharder, kernel_names_[static_cast<size_t>(c.kernel)],
                     shape.replicated ? "all (replicas)" : RankList(planner_internal::Moved(shape, c.offset, world_, per_host_)));
}

Status Planner::CheckSmallestReason() const {
  // One table alone: its most compact option's biggest shard against the
  // largest budget. Then all tables together against all budgets.
  int64_t largest = 0;
  bool limited = true;
  for (int64_t b : budget_) {
    if (b <= 0) limited = false;
    largest = std::max(largest, b);
  }
  if (!limited) return Status::Ok();
  int64_t total_need = 0, total_budget = std::accumulate(budget_.begin(), budget_.end(), int64_t{0});
  for (size_t t = 0; t < tables_.size(); ++t) {
    int64_t min_peak = std::numeric_limits<int64_t>::max(), min_total = std::numeric_limits<int64_t>::max();
    std::string compact;
    for (const Shape& shape : tables_[t].shapes) {
      std::vector<int64_t> per_rank(static_cast<size_t>(world_), 0);
      int64_t total = 0;
      for (size_t i = 0; i < shape.shards.size(); ++i) {
        per_rank[static_cast<size_t>(shape.shards[i].rank)] += shape.bytes[i];
        total += shape.bytes[i];
      }
      const int64_t peak = *std::max_element(per_rank.begin(), per_rank.end());
      if (peak < min_peak) {
        min_peak = peak;
        compact = shape.sharder;
      }
      min_total = std::min(min_total, total);
    }
    if (min_peak > largest) {
      return Status(SR_RESOURCE_EXHAUSTED,
                    fmt::format("planner: table '{}' needs {} on one rank even {}; the largest rank has {}",
                                req_.tables[t].name, FormatByteSize(min_peak),
                                tables_[t].shapes.size() > 1 ? "split by " + compact + ", its most compact option"
                                                             : "as " + compact + ", its only option",
                                FormatByteSize(largest)));
    }
    total_need += min_total;
  }
  if (total_need > total_budget) {
    return Status(SR_RESOURCE_EXHAUSTED,
                  fmt::format("planner: the tables need {} in all (each in its most compact option), the {} ranks hold {}",
                              FormatByteSize(total_need), world_, FormatByteSize(total_budget)));
  }
  return Status::Ok();
}

Status Planner::Greedy(bool memory_first) {
  loads_.assign(static_cast<size_t>(world_), RankLoad{});
  sharded_ = replicated_ = 0;
  std::vector<size_t> order(tables_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (memory_first) {
      return req_.tables[a].num_embeddings * req_.tables[a].embedding_dim >
             req_.tables[b].num_embeddings * req_.tables[b].embedding_dim;
    }
    return tables_[a].order_cost > tables_[b].order_cost;
  });
  for (size_t t : order) {
    TableState& st = tables_[t];
    st.why.clear();
    std::vector<std::string> options;
    auto [c, score] = Best(t, memory_first, &options);
    const auto position = std::find(order.begin(), order.end(), t) - order.begin();
    if (c.shape < 0) {
      // Every option was pinned out: its ranks admit none of the placements.
      std::string why;
      for (const std::string& o : options) why += "\n  " + o;
      for (const std::string& e : st.excluded) why += "\n  " + e;
      return InvalidArgumentError(fmt::format("planner: table '{}' is pinned to ranks {}, where none of its options "
                                              "can go:{}", req_.tables[t].name, fmt::join(st.pinned, ","), why));
    }
    if (!score.fits) {
      const int64_t free_max = [&] {
        int64_t m = 0;
        for (int r = 0; r < world_; ++r) m = std::max(m, budget_[static_cast<size_t>(r)] - loads_[static_cast<size_t>(r)].bytes);
        return m;
      }();
      return Status(SR_RESOURCE_EXHAUSTED,
                    fmt::format("planner: table '{}' does not fit after the {} tables placed before it: its best option "
                                "({}) puts rank {} {} over its budget; the most any rank has free is {}",
                                req_.tables[t].name, position,
                                Describe(t, c), score.over_rank, FormatByteSize(score.over_bytes), FormatByteSize(free_max)));
    }
    Place(t, c);
    st.why.push_back(fmt::format("chose {}: step {} after placing it ({} in the greedy order{})", Describe(t, c),
                                 Ms(score.makespan), position + 1,
                                 memory_first ? ", by size: the order by cost did not fit" : ", by cost"));
    for (const std::string& o : options) st.why.push_back("  " + o);
    for (const std::string& e : st.excluded) st.why.push_back("  " + e);
  }
  return Status::Ok();
}

void Planner::Improve() {
  // Bounded by a count, not a clock, so every rank plans the same.
  // and by scoring work: at most three times the greedy pass's options.
  const int max_rounds = 2 * static_cast<int>(tables_.size()) + 16;
  const int64_t budget = 3 * static_cast<int64_t>(evaluated_) + 1000;
  const int64_t start = evaluated_;
  for (int round = 0; round < max_rounds && evaluated_ - start < budget; ++round) {
    const double latency = model_.LatencySeconds(sharded_ > 0, replicated_ > 0);
    int slowest = 0;
    for (int q = 1; q < world_; ++q) {
      if (model_.RankSeconds(loads_[static_cast<size_t>(q)]) > model_.RankSeconds(loads_[static_cast<size_t>(slowest)])) slowest = q;
    }
    const double now = model_.StepSeconds(loads_, latency);
    // The tables on the slowest rank, heaviest there first.
    std::vector<std::pair<double, size_t>> on;
    for (size_t t = 0; t < tables_.size(); ++t) {
      const TableEffect& e = tables_[t].effect;
      double there = e.replicated ? e.replica.compute_s : 0;
      for (const ShardTerm& s : e.shards) {
        if (s.rank == slowest) there += s.compute_s;
      }
      if (there > 0) on.emplace_back(there, t);
    }
    std::stable_sort(on.begin(), on.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    bool moved = false;
    for (const auto& [there, t] : on) {
      const Candidate old = tables_[t].chosen;
      Remove(t);
      auto [c, score] = Best(t, false, nullptr);
      if (score.fits && score.makespan < now * (1 - 1e-6)) {
        Place(t, c);
        tables_[t].why.insert(tables_[t].why.begin() + 1,
                              fmt::format("  moved by local improvement from {}: step {} -> {}", Describe(t, old),
                                          Ms(now), Ms(score.makespan)));
        ++moves_;
        moved = true;
        break;
      }
      Place(t, old);
    }
    if (!moved) moved = TrySwap(slowest, on, now);
    if (!moved) break;
  }
}

bool Planner::TrySwap(int slowest, const std::vector<std::pair<double, size_t>>& on, double now) {
  // No single move helps: re-place a pair, one table of the slowest rank and
  // one of the fastest, both afresh (the costlier first).
  int fastest = 0;
  for (int q = 1; q < world_; ++q) {
    if (model_.RankSeconds(loads_[static_cast<size_t>(q)]) < model_.RankSeconds(loads_[static_cast<size_t>(fastest)])) fastest = q;
  }
  if (fastest == slowest) return false;
  std::vector<size_t> there;
  for (size_t t = 0; t < tables_.size(); ++t) {
    const TableEffect& e = tables_[t].effect;
    if (e.replicated) continue;
    for (const ShardTerm& s : e.shards) {
      if (s.rank == fastest) {
        there.push_back(t);
        break;
      }
    }
  }
  const int64_t limit = evaluated_ + 2 * static_cast<int64_t>(world_) * 64;
  for (const auto& [w, a] : on) {
    if (tables_[a].effect.replicated) continue;
    for (size_t b : there) {
      if (evaluated_ > limit) return false;
      if (a == b) continue;
      const Candidate old_a = tables_[a].chosen, old_b = tables_[b].chosen;
      Remove(a);
      Remove(b);
      const size_t first = tables_[a].order_cost >= tables_[b].order_cost ? a : b, second = first == a ? b : a;
      auto [c1, s1] = Best(first, false, nullptr);
      if (s1.fits) {
        Place(first, c1);
        auto [c2, s2] = Best(second, false, nullptr);
        if (s2.fits && s2.makespan < now * (1 - 1e-6)) {
          Place(second, c2);
          for (size_t t : {a, b}) {
            tables_[t].why.insert(tables_[t].why.begin() + 1,
                                  fmt::format("  swapped by local improvement (with table '{}'): step {} -> {}",
                                              req_.tables[t == a ? b : a].name, Ms(now), Ms(s2.makespan)));
          }
          ++moves_;
          return true;
        }
        Remove(first);
      }
      Place(a, old_a);
      Place(b, old_b);
    }
  }
  return false;
}

double Planner::Makespan() const {
  return model_.StepSeconds(loads_, model_.LatencySeconds(sharded_ > 0, replicated_ > 0));
}

void Planner::TrySeeds() {
  // Greedy placement is myopic: a table placed early cannot see that the
  // tables after it would all do better split the same way. So each sharder
  // for every table, placed as MakePlan places one sharder alone (largest
  // first, a movable placement onto the rank or host holding the fewest
  // bytes), is a start too; so is each movable sharder for every table
  // spread by cost (the costliest table first, each onto the rank or host
  // whose estimated time is lowest: the longest-processing-time rule, which
  // balances a few hot tables and many small ones where the greedy pass
  // splits a hot table instead). One better than the greedy plan gets the
  // same local improvement, and the best plan wins. The result is then
  // never worse, under the model, than the balanced default or any one
  // sharder for every table.
  struct Kept {
    std::vector<Candidate> chosen;
    std::vector<std::vector<std::string>> why;
  };
  auto keep = [&] {
    Kept k;
    for (const TableState& st : tables_) {
      k.chosen.push_back(st.chosen);
      k.why.push_back(st.why);
    }
    return k;
  };
  auto restore = [&](const Kept& k) {
    for (size_t t = 0; t < tables_.size(); ++t) {
      if (tables_[t].placed) Remove(t);
    }
    for (size_t t = 0; t < tables_.size(); ++t) {
      Place(t, k.chosen[t]);
      tables_[t].why = k.why[t];
    }
  };
  const Kept greedy = keep();
  Kept best = greedy;
  double best_step = Makespan();
  const double greedy_step = best_step;
  std::string best_name;
  std::vector<size_t> order(tables_.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return req_.tables[a].num_embeddings * req_.tables[a].embedding_dim >
           req_.tables[b].num_embeddings * req_.tables[b].embedding_dim;
  });
  // Each sharder as placed where it lands by itself, and, when it can
  // move, spread by bytes (as MakePlan spreads table_wise) and by cost.
  enum class Spread { kOwn, kBytes, kCost };
  std::vector<std::pair<std::string, Spread>> seeds;
  for (size_t s = 0; s < sharders_.names.size(); ++s) {
    seeds.emplace_back(sharders_.names[s], Spread::kOwn);
    if (sharders_.relocate[s] != Relocate::kFixed) {
      seeds.emplace_back(sharders_.names[s], Spread::kBytes);
      seeds.emplace_back(sharders_.names[s], Spread::kCost);
    }
  }
  // A table's whole estimated time under one shape, wherever it lands.
  auto cost_of = [&](size_t t, const Shape& shape) {
    const TableState& st = tables_[t];
    const Candidate c{static_cast<int>(&shape - st.shapes.data()), st.kernels[0], 0};
    const TableEffect e = EffectOf(t, c);
    double sum = e.replicated ? e.replica.compute_s * world_ : e.every_rank_s * world_;
    for (const ShardTerm& term : e.shards) sum += term.compute_s;
    return sum;
  };
  std::vector<size_t> by_cost;
  for (const auto& seed : seeds) {
    // Named copies, not a structured binding: clang 14 cannot capture one.
    const std::string& name = seed.first;
    const Spread spread = seed.second;
    auto shape_of = [&](size_t t) {
      const TableState& st = tables_[t];
      return std::find_if(st.shapes.begin(), st.shapes.end(), [&](const Shape& sh) { return sh.sharder == name; });
    };
    const std::vector<size_t>* sequence = &order;
    if (spread == Spread::kCost) {
      std::vector<double> cost(tables_.size(), 0);
      for (size_t t = 0; t < tables_.size(); ++t) {
        if (const auto shape = shape_of(t); shape != tables_[t].shapes.end()) cost[t] = cost_of(t, *shape);
      }
      by_cost = order;
      std::stable_sort(by_cost.begin(), by_cost.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
      sequence = &by_cost;
    }
    for (size_t t = 0; t < tables_.size(); ++t) {
      if (tables_[t].placed) Remove(t);
    }
    bool valid = true;
    for (size_t t : *sequence) {
      TableState& st = tables_[t];
      const auto shape = shape_of(t);
      if (shape == st.shapes.end()) {
        valid = false;  // excluded for this table (constraints, or the sharder refused it)
        break;
      }
      int lightest = 0;
      if (spread == Spread::kBytes) {
        for (int q = 1; q < world_; ++q) {
          if (loads_[static_cast<size_t>(q)].bytes < loads_[static_cast<size_t>(lightest)].bytes) lightest = q;
        }
      } else if (spread == Spread::kCost) {
        // The rank whose estimated time is lowest, or the first rank of the
        // host whose summed time is.
        const int group = shape->relocate == Relocate::kHost ? per_host_ : 1;
        double least = 0;
        for (int first = 0; first < world_; first += group) {
          double sum = 0;
          for (int q = first; q < first + group; ++q) sum += model_.RankSeconds(loads_[static_cast<size_t>(q)]);
          if (first == 0 || sum < least) {
            least = sum;
            lightest = first;
          }
        }
      }
      // Moved() takes the first shard's rank (or host): unspread, the
      // sharder's own choice.
      const int own = shape->shards.empty() ? 0 : shape->shards[0].rank;
      const int target = spread != Spread::kOwn ? lightest : own;
      const int offset = shape->relocate == Relocate::kShift  ? target
                         : shape->relocate == Relocate::kHost ? target / per_host_
                                                              : 0;
      const Candidate c{static_cast<int>(shape - st.shapes.begin()), st.kernels[0], offset};
      if (!PinnedAllows(st, *shape, offset)) {
        valid = false;
        break;
      }
      Place(t, c);
      ++evaluated_;
    }
    for (int q = 0; valid && q < world_; ++q) {
      const int64_t b = budget_[static_cast<size_t>(q)];
      if (b > 0 && loads_[static_cast<size_t>(q)].bytes > b) valid = false;
    }
    const double start = Makespan();
    if (!valid) continue;
    if (start >= best_step * (1 - 1e-9)) continue;
    const char* how = spread == Spread::kBytes ? " (spread by bytes)" : spread == Spread::kCost ? " (spread by cost)" : "";
    for (size_t t = 0; t < tables_.size(); ++t) {
      std::vector<std::string> why = {fmt::format("chose {}: {} for every table{} was a better start than the greedy "
                                                  "placement (step {} against {}), then local improvement",
                                                  Describe(t, tables_[t].chosen), name, how, Ms(start),
                                                  Ms(greedy_step))};
      for (size_t i = 1; i < greedy.why[t].size(); ++i) {
        const std::string& line = greedy.why[t][i];
        if (line.rfind("  moved by", 0) != 0 && line.rfind("  swapped by", 0) != 0) why.push_back(line);
      }
      tables_[t].why = std::move(why);
    }
    Improve();
    if (Makespan() < best_step * (1 - 1e-9)) {
      best_step = Makespan();
      best = keep();
      best_name = name + how;
    }
  }
  restore(best);
  if (!best_name.empty()) {
    notes_.push_back(fmt::format("started from {} for every table: improved, step {}, against {} from the greedy start",
                                 best_name, Ms(best_step), Ms(greedy_step)));
  }
}

PlannerResult Planner::Result() const {
  PlannerResult r;
  r.improvement_moves = moves_;
  r.options_evaluated = evaluated_;
  r.notes = notes_;
  const double latency = model_.LatencySeconds(sharded_ > 0, replicated_ > 0);
  for (int q = 0; q < world_; ++q) {
    const RankLoad& l = loads_[static_cast<size_t>(q)];
    RankEstimate e;
    e.compute_s = l.compute_s;
    e.comm_s = model_.RankSeconds(l) - l.compute_s;
    e.latency_s = latency;
    e.bytes = l.bytes;
    e.budget = budget_[static_cast<size_t>(q)];
    r.ranks.push_back(e);
  }
  r.step_seconds = model_.StepSeconds(loads_, latency);
  if (model_.SharesCores()) {
    r.notes.push_back(fmt::format("{} ranks per host share {} cores: a host's ranks take turns on them (evenly among "
                                  "the ranks still working, at most a core each), and the step ends with its last rank",
                                  per_host_, req_.topology.cores_per_host));
  }
  const std::vector<RankLoad> zero(static_cast<size_t>(world_));
  for (size_t t = 0; t < tables_.size(); ++t) {
    const TableState& st = tables_[t];
    TableChoice choice;
    const Shape& shape = st.shapes[static_cast<size_t>(st.chosen.shape)];
    ParameterSharding& p = choice.sharding;
    p.sharding_type = shape.sharder;
    p.compute_kernel = kernel_names_[static_cast<size_t>(st.chosen.kernel)];
    const auto c = req_.constraints.find(req_.tables[t].name);
    if (c != req_.constraints.end()) p.sharder_options = c->second.sharder_options;
    const std::vector<sr_shard> shards = planner_internal::Moved(shape, st.chosen.offset, world_, per_host_);
    if (!shape.replicated) p.shards = shards;
    if (shape.relocate == Relocate::kHost && !shards.empty()) {
      p.ranks = {shards[0].rank / per_host_ * per_host_};
    } else {
      for (const sr_shard& s : shards) p.ranks.push_back(s.rank);
    }
    choice.seconds_per_rank.assign(static_cast<size_t>(world_), 0);
    choice.bytes_per_rank.assign(static_cast<size_t>(world_), 0);
    model_.Visit(st.effect, zero, [&](int q, const RankLoad& l) {
      choice.seconds_per_rank[static_cast<size_t>(q)] = model_.RankSeconds(l);
      choice.bytes_per_rank[static_cast<size_t>(q)] = l.bytes;
      choice.seconds = std::max(choice.seconds, model_.RankSeconds(l));
    });
    choice.why = st.why;
    r.spec[req_.tables[t].name] = p;
    r.tables.push_back(std::move(choice));
  }
  return r;
}

StatusOr<PlannerResult> Planner::Run() {
  const auto start = std::chrono::steady_clock::now();
  SR_RETURN_IF_ERROR(Validate());
  SR_RETURN_IF_ERROR(Kernels());
  SR_RETURN_IF_ERROR(PrepareTables());
  SR_RETURN_IF_ERROR(CheckSmallestReason());
  Status greedy = Greedy(false);
  if (!greedy.ok() && greedy.code() == SR_RESOURCE_EXHAUSTED) {
    notes_.push_back("the order by cost did not fit (" + greedy.message() + "); placed by size instead");
    SR_RETURN_IF_ERROR(Greedy(true));
  } else if (!greedy.ok()) {
    return greedy;
  }
  Improve();
  TrySeeds();
  notes_.insert(notes_.begin(), "topology: " + req_.topology.source);
  PlannerResult r = Result();
  std::tie(r.bound_seconds, r.bound_reason) = LowerBound();
  r.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

StatusOr<PlannerResult> Planner::Estimate(const ShardingPlan& plan) {
  SR_RETURN_IF_ERROR(Validate());
  if (plan.world_size != world_) {
    return InvalidArgumentError(fmt::format("estimate: the plan is for {} ranks, the request for {}", plan.world_size, world_));
  }
  std::set<std::string> used;
  for (const ShardedTable& t : plan.tables) used.insert(t.sharding.sharding_type);
  SR_ASSIGN_OR_RETURN(sharders_, planner_internal::CreateSharders(registry_, std::vector<std::string>(used.begin(), used.end()),
                                                                  req_.sharder_options));
  topo_ = MakeTopology(world_, per_host_, nullptr);
  loads_.assign(static_cast<size_t>(world_), RankLoad{});
  tables_.assign(req_.tables.size(), TableState{});
  static const TableWorkload kUniform;
  for (size_t t = 0; t < req_.tables.size(); ++t) {
    const EmbeddingTableConfig& cfg = req_.tables[t];
    auto it = std::find_if(plan.tables.begin(), plan.tables.end(), [&](const ShardedTable& s) { return s.config.name == cfg.name; });
    if (it == plan.tables.end()) return InvalidArgumentError("estimate: the plan has no table '" + cfg.name + "'");
    TableState& st = tables_[t];
    st.desc = MakeTableDesc(cfg.name.c_str(), cfg.num_embeddings, cfg.embedding_dim, ToDLDataType(cfg.data_type),
                            req_.state_bytes_per_row ? req_.state_bytes_per_row(cfg) : 0);
    Shape shape;
    shape.sharder = it->sharding.sharding_type;
    shape.shards = it->placement.shards;
    shape.replicated = it->placement.replicated;
    const Sharder* sharder = sharders_.Find(shape.sharder);
    SR_RETURN_IF_ERROR(planner_internal::FillShares(sharder, st.desc, topo_, req_.workload.empty() ? kUniform : req_.workload[t],
                                                    req_.batch_per_rank, shape));
    SR_RETURN_IF_ERROR(planner_internal::FillBytes(sharder, st.desc, topo_, shape));
    st.shapes.push_back(std::move(shape));
    const std::string& kernel = it->sharding.compute_kernel;
    auto k = std::find(kernel_names_.begin(), kernel_names_.end(), kernel);
    if (k == kernel_names_.end()) {
      auto cost = req_.topology.kernels.find(kernel);
      if (cost == req_.topology.kernels.end()) {
        return Status(SR_NOT_FOUND, "estimate: table '" + cfg.name + "' runs on kernel '" + kernel +
                                        "', which the topology (" + req_.topology.source + ") has no speed for");
      }
      kernel_names_.push_back(kernel);
      kernel_costs_.push_back(cost->second);
      k = kernel_names_.end() - 1;
    }
    Place(t, Candidate{0, static_cast<int>(k - kernel_names_.begin()), 0});
  }
  notes_.insert(notes_.begin(), "topology: " + req_.topology.source);
  return Result();
}

}  // namespace

StatusOr<PlannerResult> RunPlanner(const PluginRegistry& registry, const PlannerRequest& request) {
  Planner p(registry, request);
  return p.Run();
}

StatusOr<PlannerResult> EstimatePlan(const PluginRegistry& registry, const PlannerRequest& request,
                                     const ShardingPlan& plan) {
  Planner p(registry, request);
  return p.Estimate(plan);
}

}  // namespace shardrec
