#include "shardrec/core/managed_collision/mch_module.h"

#include <algorithm>
#include <cstring>

#include <spdlog/spdlog.h>

#include "shardrec/core/managed_collision/id_hash.h"
#include "mch_bucket.h"
#include "fast_sort.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec {

ManagedCollisionStats& ManagedCollisionStats::operator+=(const ManagedCollisionStats& o) {
  lookups += o.lookups;
  hits += o.hits;
  defaulted += o.defaulted;
  residual += o.residual;
  admissions += o.admissions;
  refusals += o.refusals;
  evictions += o.evictions;
  rounds += o.rounds;
  occupied += o.occupied;
  capacity += o.capacity;
  return *this;
}

MchManagedCollisionModule::MchManagedCollisionModule(std::string table, ManagedCollisionConfig config,
                                                     BucketRange range, EvictionPolicy policy,
                                                     int64_t metadata_columns, bool policy_incremental)
    : table_(std::move(table)),
      config_(std::move(config)),
      range_(range),
      policy_(std::move(policy)),
      // A policy's own select decides over every entry: the exact round.
      incremental_(config_.eviction_mode == EvictionMode::kFast && policy_incremental && metadata_columns == 0 &&
                   !policy_.HasSelect()) {
  const int64_t b_all = config_.buckets, zch = config_.zch_size, mch = config_.mch_size;
  for (int64_t b = range_.first; b < range_.last; ++b) {
    const int64_t first = b * zch / b_all, end = (b + 1) * zch / b_all;
    const int64_t mch_first = zch + b * mch / b_all, mch_end = zch + (b + 1) * mch / b_all;
    buckets_.push_back(
        std::make_unique<mc::MchBucket>(first, end - first, mch_first, mch_end - mch_first, metadata_columns,
                                        incremental_));
  }
}

MchManagedCollisionModule::MchManagedCollisionModule(MchManagedCollisionModule&&) noexcept = default;
MchManagedCollisionModule& MchManagedCollisionModule::operator=(MchManagedCollisionModule&&) noexcept = default;
MchManagedCollisionModule::~MchManagedCollisionModule() = default;

StatusOr<MchManagedCollisionModule> MchManagedCollisionModule::Create(const PluginRegistry& registry, std::string table,
                                                                      ManagedCollisionConfig config,
                                                                      BucketRange buckets) {
  if (Status st = ValidateManagedCollision(table, config); !st.ok()) return st;
  if (buckets.last < 0) buckets.last = config.buckets;
  if (buckets.first < 0 || buckets.first > buckets.last || buckets.last > config.buckets) {
    return Status(SR_INVALID_ARGUMENT, "table " + table + ": bucket range [" + std::to_string(buckets.first) + ", " +
                                           std::to_string(buckets.last) + ") is outside its " +
                                           std::to_string(config.buckets) + " buckets");
  }
  auto ref = registry.Find(SR_KIND_EVICTION, config.policy);
  if (!ref.ok()) {
    return Status(ref.status().code(), "table " + table + ": eviction policy: " + ref.status().message());
  }
  auto policy = EvictionPolicy::Create(ref.value(), config.policy_options);
  if (!policy.ok()) {
    return Status(policy.status().code(), "table " + table + ": " + policy.status().message());
  }
  const int64_t columns = ref->Int64Attribute("metadata_columns").value_or(0);
  if (columns < 0 || columns > 64) {
    return Status(SR_INVALID_ARGUMENT, "table " + table + ": eviction policy " + config.policy +
                                           " declares metadata_columns = " + std::to_string(columns) +
                                           " (0 to 64 supported)");
  }
  bool incremental = ref->BoolAttribute("incremental").value_or(false);
  if (incremental && config.eviction_mode == EvictionMode::kFast && columns == 0) {
    // The promise holds for the policy's scores; its keys at the fixed time
    // must keep it too, or the incremental round would admit wrongly.
    if (Status keys = mc::CheckKeysKeepOrder(policy.value()); !keys.ok()) {
      spdlog::warn("table {}: {}; it runs the exact round", table, keys.message());
      incremental = false;
    }
  }
  return MchManagedCollisionModule(std::move(table), std::move(config), buckets, std::move(policy.value()), columns,
                                   incremental);
}

void PreprocessIds(const ManagedCollisionConfig& config, std::span<int64_t> ids) {
  if (config.input_hash == IdHash::kNone) return;
  const auto size = static_cast<uint64_t>(config.input_hash_size);
  for (int64_t& id : ids) id = static_cast<int64_t>(mc::Fmix64(static_cast<uint64_t>(id)) % size);
}

int64_t BucketOfId(const ManagedCollisionConfig& config, int64_t id) {
  if (config.buckets == 1) return 0;
  return static_cast<int64_t>(
      mc::ScaleToRange(mc::Fmix64(static_cast<uint64_t>(id)), static_cast<uint64_t>(config.buckets)));
}

void MchManagedCollisionModule::Preprocess(std::span<int64_t> ids) const { PreprocessIds(config_, ids); }

int64_t MchManagedCollisionModule::BucketOf(int64_t id) const { return BucketOfId(config_, id); }

Status MchManagedCollisionModule::Partition(std::span<const int64_t> ids) {
  const size_t nb = buckets_.size();
  bucket_begin_.assign(nb + 1, 0);
  if (nb == 1 && config_.buckets == 1) {
    bucket_begin_[1] = static_cast<int64_t>(ids.size());
    return Status::Ok();
  }
  bucket_of_.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t b = BucketOf(ids[i]) - range_.first;
    if (b < 0 || b >= static_cast<int64_t>(nb)) {
      return Status(SR_INVALID_ARGUMENT, "table " + table_ + ": id " + std::to_string(ids[i]) + " belongs to bucket " +
                                             std::to_string(b + range_.first) + ", not to the buckets managed here [" +
                                             std::to_string(range_.first) + ", " + std::to_string(range_.last) + ")");
    }
    bucket_of_[i] = b;
    ++bucket_begin_[static_cast<size_t>(b) + 1];
  }
  for (size_t b = 0; b < nb; ++b) bucket_begin_[b + 1] += bucket_begin_[b];
  // A stable counting sort: order_[k] is the input position of grouped id k.
  std::vector<int64_t> next(bucket_begin_.begin(), bucket_begin_.end() - 1);
  order_.resize(ids.size());
  sorted_ids_.resize(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto k = static_cast<size_t>(next[static_cast<size_t>(bucket_of_[i])]++);
    order_[k] = static_cast<int64_t>(i);
    sorted_ids_[k] = ids[i];
  }
  return Status::Ok();
}

const int64_t* MchManagedCollisionModule::Grouped(std::span<const int64_t> ids) const {
  return config_.buckets == 1 ? ids.data() : sorted_ids_.data();
}

void MchManagedCollisionModule::FindSlots(std::span<const int64_t> ids) {
  const int64_t* grouped = Grouped(ids);
  found_.resize(ids.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto begin = static_cast<size_t>(bucket_begin_[b]), end = static_cast<size_t>(bucket_begin_[b + 1]);
    buckets_[b]->FindSlots({grouped + begin, end - begin}, found_.data() + begin);
  }
}

Status MchManagedCollisionModule::Stage(std::span<const int64_t> ids, bool training) {
  if (staged_) AbortOnMisuse("MchManagedCollisionModule::Stage: the previous Stage was neither applied nor discarded");
  if (Status st = Partition(ids); !st.ok()) return st;
  staged_ = true;
  staged_training_ = training;
  staged_round_ = false;
  staged_plans_.clear();
  if (!training) {
    FindSlots(ids);
    return Status::Ok();
  }
  ++iteration_;
  const bool due = iteration_ - last_round_ == config_.eviction_interval;
  const int64_t* grouped = Grouped(ids);
  found_.resize(ids.size());
  candidate_of_.resize(ids.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto begin = static_cast<size_t>(bucket_begin_[b]), end = static_cast<size_t>(bucket_begin_[b + 1]);
    // Every training step keeps its undo, a round due or not: a step
    // staged beside another table whose round fails is discarded too.
    buckets_[b]->MarkWindow();
    buckets_[b]->FindAndRecord({grouped + begin, end - begin}, found_.data() + begin, iteration_,
                               candidate_of_.data() + begin);
  }
  if (!due) return Status::Ok();
  staged_round_ = true;
  for (auto& bucket : buckets_) {
    auto plan = bucket->PlanRound(policy_, config_, iteration_);
    if (!plan.ok()) {
      Discard();
      return Status(plan.status().code(), "table " + table_ + ": eviction round at step " +
                                              std::to_string(iteration_) + ": " + plan.status().message() +
                                              " (nothing was applied)");
    }
    staged_plans_.push_back(std::move(plan.value()));
  }
  return Status::Ok();
}

void MchManagedCollisionModule::Discard() {
  if (!staged_) return;
  if (staged_training_) {
    for (auto& bucket : buckets_) bucket->RollbackWindow();
    --iteration_;
  }
  staged_plans_.clear();
  staged_ = false;
}

void MchManagedCollisionModule::Apply(std::span<const int64_t> ids, std::span<int64_t> rows) {
  if (!staged_) AbortOnMisuse("MchManagedCollisionModule::Apply without a successful Stage");
  staged_ = false;
  const int64_t* grouped = Grouped(ids);
  if (staged_round_) {
    // A module with no buckets here (a rank without a share) still keeps
    // the round schedule, so every rank agrees on when rounds run.
    for (size_t b = 0; b < buckets_.size(); ++b) {
      mc::RoundPlan& plan = staged_plans_[b];
      lookup_stats_.evictions += buckets_[b]->Commit(plan, evicted_rows_);
      // The round moved ids in and out: remap sees the new slots.
      const auto begin = static_cast<size_t>(bucket_begin_[b]), end = static_cast<size_t>(bucket_begin_[b + 1]);
      buckets_[b]->RefreshSlots({grouped + begin, end - begin}, found_.data() + begin, candidate_of_.data() + begin,
                                plan);
      lookup_stats_.admissions += static_cast<int64_t>(plan.replacements.size());
      lookup_stats_.refusals += plan.candidates - static_cast<int64_t>(plan.replacements.size());
      ++lookup_stats_.rounds;
    }
    last_round_ = iteration_;
    staged_plans_.clear();
  }
  int64_t hits = 0, residual = 0;
  const bool identity = config_.buckets == 1;
  int64_t* out = identity ? rows.data() : sorted_rows_.data();
  if (!identity) sorted_rows_.resize(ids.size()), out = sorted_rows_.data();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const auto begin = static_cast<size_t>(bucket_begin_[b]), end = static_cast<size_t>(bucket_begin_[b + 1]);
    buckets_[b]->Remap({grouped + begin, end - begin}, found_.data() + begin, out + begin, &hits, &residual);
  }
  if (!identity) {
    for (size_t k = 0; k < ids.size(); ++k) rows[static_cast<size_t>(order_[k])] = sorted_rows_[k];
  }
  const auto n = static_cast<int64_t>(ids.size());
  lookup_stats_.lookups += n;
  lookup_stats_.hits += hits;
  lookup_stats_.residual += residual;
  lookup_stats_.defaulted += n - hits - residual;
}

Status MchManagedCollisionModule::Forward(std::span<const int64_t> ids, std::span<int64_t> rows, bool training) {
  if (rows.size() != ids.size()) {
    return Status(SR_INVALID_ARGUMENT, "table " + table_ + ": " + std::to_string(ids.size()) + " ids but room for " +
                                           std::to_string(rows.size()) + " rows");
  }
  if (Status st = Stage(ids, training); !st.ok()) return st;
  Apply(ids, rows);
  return Status::Ok();
}

std::vector<int64_t> MchManagedCollisionModule::TakeEvictedRows() {
  std::vector<int64_t> rows = std::move(evicted_rows_);
  evicted_rows_.clear();
  // Evictions come from the managed rows [0, zch_size).
  rows.erase(mc::SortUnique(rows.begin(), rows.end(), 0, config_.zch_size, sort_bits_), rows.end());
  return rows;
}

ManagedCollisionStats MchManagedCollisionModule::stats() const {
  ManagedCollisionStats s = lookup_stats_;
  for (const auto& b : buckets_) {
    s.occupied += b->occupied();
    s.capacity += b->capacity();
  }
  return s;
}

std::vector<MchManagedCollisionModule::Slot> MchManagedCollisionModule::Slots() const {
  std::vector<Slot> out;
  for (const auto& b : buckets_) {
    for (int64_t s = 0; s < b->slots(); ++s) out.push_back({b->SlotRow(s), b->IdAt(s), b->Occupied(s)});
  }
  return out;
}

int64_t MchManagedCollisionModule::Bytes() const {
  int64_t bytes = 0;
  for (const auto& b : buckets_) bytes += b->Bytes();
  return bytes;
}

}  // namespace shardrec
