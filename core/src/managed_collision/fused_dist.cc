// Fused managed collision (fused_dist.h): placing buckets on the plan's
// row blocks, and remapping the ids that the embedding's input dist
// delivered to the rank that manages their buckets.
#include "fused_dist.h"

#include <fmt/format.h>

#include "shardrec/core/managed_collision/managed_collision_collection.h"

namespace shardrec {
namespace mc {

BucketPlacement PlaceBuckets(const ShardLayout& layout, int32_t t, const ManagedCollisionConfig& config) {
  const ShardedTable& table = layout.plan().tables[static_cast<size_t>(t)];
  const TableRouting& routing = layout.routing(t);
  const std::string& type = table.sharding.sharding_type;
  if (table.placement.replicated) return {{}, fmt::format("{}: every rank holds the whole table", type)};
  if (routing.router != nullptr) return {{}, fmt::format("{}: the sharder routes ids itself", type)};
  const auto blocks = static_cast<int32_t>(routing.block_rows.size());
  std::vector<int> block_rank(static_cast<size_t>(blocks), -1);
  std::vector<int> blocks_on_rank(static_cast<size_t>(layout.world_size()), 0);
  for (int32_t b = 0; b < blocks; ++b) {
    const auto& shards = routing.block_shards[static_cast<size_t>(b)];
    if (shards.size() != 1) return {{}, fmt::format("{}: a row block is split into column shards", type)};
    const sr_shard& s = table.placement.shards[static_cast<size_t>(shards[0])];
    block_rank[static_cast<size_t>(b)] = s.rank;
    if (++blocks_on_rank[static_cast<size_t>(s.rank)] > 1) {
      return {{}, fmt::format("{}: rank {} holds more than one row block", type, s.rank)};
    }
  }
  auto block_of = [&](int64_t first, int64_t end) -> int32_t {  // the block holding rows [first, end), or -1
    for (int32_t b = 0; b < blocks; ++b) {
      const int64_t lo = routing.block_row_offset[static_cast<size_t>(b)];
      if (first >= lo && end <= lo + routing.block_rows[static_cast<size_t>(b)]) return b;
    }
    return -1;
  };
  const int64_t n = config.buckets, zch = config.zch_size, mch = config.mch_size;
  BucketPlacement out;
  out.bucket_block.resize(static_cast<size_t>(n));
  for (int64_t b = 0; b < n; ++b) {
    const int64_t first = b * zch / n, end = (b + 1) * zch / n;
    const int64_t mch_first = zch + b * mch / n, mch_end = zch + (b + 1) * mch / n;
    const int32_t blk = block_of(first, end);
    if (blk < 0 || (mch_end > mch_first && block_of(mch_first, mch_end) != blk)) {
      return {{},
              fmt::format("{}: bucket {}'s rows [{}, {}){} cross row blocks (fusing needs each bucket's rows on one "
                          "rank: with row_wise, mch_size=0 and zch_size and buckets multiples of the world size)",
                          type, b, first, end,
                          mch_end > mch_first ? fmt::format(" and [{}, {})", mch_first, mch_end) : "")};
    }
    out.bucket_block[static_cast<size_t>(b)] = blk;
  }
  return out;
}

Status StageTogether(const std::vector<MchManagedCollisionModule*>& modules,
                     const std::vector<std::vector<int64_t>>& ids, bool training, const ProcessGroup& group,
                     bool* due) {
  *due = false;
  Status failed = Status::Ok();
  size_t staged = 0;
  for (size_t m = 0; m < modules.size(); ++m) {
    MchManagedCollisionModule& module = *modules[m];
    // Every table's due flag, even after a failure: the other ranks count them all.
    *due = *due || (training && module.iteration() + 1 - module.last_round() == module.config().eviction_interval);
    if (failed.ok()) {
      failed = module.Stage(ids[m], training);
      if (failed.ok()) staged = m + 1;
    }
  }
  if (*due) {
    Tensor flag = Tensor::FromVector(std::vector<int64_t>{failed.ok() ? 0 : group.rank() + 1});
    Tensor worst = Tensor::Empty(dtype::kInt64, {1});
    if (Status reduced = group.AllReduce(flag, &worst, SR_REDUCE_MAX); !reduced.ok()) {
      for (size_t m = 0; m < staged; ++m) modules[m]->Discard();  // unstaged, or the next step would abort
      return reduced;
    }
    const int64_t bad = worst.data<int64_t>()[0];
    if (bad != 0 && failed.ok()) {
      failed = InternalError(fmt::format(
          "managed collision: an eviction round failed on rank {} (see its error); nothing was applied", bad - 1));
    }
  }
  if (!failed.ok()) {
    for (size_t m = 0; m < staged; ++m) modules[m]->Discard();
  }
  return failed;
}

}  // namespace mc

Status ShardedManagedCollisionCollection::RemapReceived(DistributedInput& in, bool training, const ProcessGroup* via) {
  if (fused_.empty()) return Status::Ok();
  SR_ASSIGN_OR_RETURN(const ProcessGroup* group, GroupFor(via));
  if (!in.rows_pending) {
    return FailedPreconditionError("managed collision: the input was distributed without the collection's routes, or "
                                   "was remapped already");
  }
  KeyedJaggedTensor& received = in.received;
  const auto offsets = received.offset_per_key();
  const auto lengths = received.length_per_key();
  // Each fused table's ids (its slots in order, every source rank's in rank order).
  std::vector<std::vector<int64_t>> ids(fused_.size());
  for (size_t m = 0; m < fused_.size(); ++m) {
    for (size_t k : fused_[m].keys) {
      if (k >= offsets.size()) return InternalError("managed collision: the received input lacks a fused table's key");
      const auto begin = received.values().begin() + offsets[k];
      ids[m].insert(ids[m].end(), begin, begin + lengths[k]);
    }
  }
  std::vector<MchManagedCollisionModule*> modules;
  for (const Fused& f : fused_) modules.push_back(&modules_[f.module]);
  bool due = false;
  SR_RETURN_IF_ERROR(mc::StageTogether(modules, ids, training, *group, &due));
  // Every staged module is applied before any result is checked: a module
  // left staged would abort the next step.
  std::vector<std::vector<int64_t>> rows_of(fused_.size());
  for (size_t m = 0; m < fused_.size(); ++m) {
    rows_of[m].resize(ids[m].size());
    modules_[fused_[m].module].Apply(ids[m], rows_of[m]);
  }
  std::vector<int64_t> values = received.values().ToVector();
  for (size_t m = 0; m < fused_.size(); ++m) {
    const Fused& f = fused_[m];
    const std::vector<int64_t>& rows = rows_of[m];
    size_t at = 0;
    for (size_t k : f.keys) {
      for (int64_t i = 0; i < lengths[k]; ++i, ++at) {
        const int64_t local = rows[at] - f.first_row;
        if (local < 0 || local >= f.num_rows) {
          return InternalError(fmt::format("managed collision: table {} remapped an id to row {}, outside this rank's "
                                           "rows [{}, {})",
                                           modules_[f.module].table(), rows[at], f.first_row,
                                           f.first_row + f.num_rows));
        }
        values[static_cast<size_t>(offsets[k] + i)] = local;
      }
    }
  }
  SR_RETURN_IF_ERROR(received.ReplaceValues(std::move(values)));
  in.rows_pending = false;
  return Status::Ok();
}

}  // namespace shardrec
