// RouteToShards (shard_input_dist.h). Each feature's ids are routed once;
// each row block then collects its ids, local rows, weights and origins,
// and every slot on every destination copies its block's lists. A table of
// one row block needs no routing: its features' lists are the input's own
// runs, copied whole (when every id is in range, or a route rewrites them).
#include "shardrec/core/dist/shard_input_dist.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "shardrec/abi/kernel.h"

namespace shardrec {

namespace {
struct BlockLists {
  std::vector<int64_t> lengths, rows, origin;
  std::vector<float> weights;
};
}  // namespace

StatusOr<ShardedInput> RouteToShards(const ShardLayout& layout, const KeyedJaggedTensor& input, int32_t bounds_check,
                                     bool with_weights, const IdRoutes* routes) {
  const auto& features = layout.features();
  if (static_cast<size_t>(input.num_keys()) != features.size()) {
    return InternalError("input dist: the input does not hold the layout's features");
  }
  const auto& values = input.values();
  const auto& lengths = input.lengths();
  const float* in_weights = input.has_weights() ? input.weights()->data() : nullptr;

  // Per feature, per row block of its table: the ids it sends there.
  std::vector<std::vector<BlockLists>> lists(features.size());
  ShardedInput out;
  std::vector<int32_t> block;
  std::vector<int64_t> local;
  for (size_t f = 0; f < features.size(); ++f) {
    const int32_t t = features[f].table;
    if (layout.replicated(t)) continue;
    const auto& config = layout.plan().tables[static_cast<size_t>(t)].config;
    const int64_t rows = config.num_embeddings;
    const int64_t first_bag = input.BagOffset(static_cast<int>(f));
    const int64_t batch = input.stride_per_key()[f];
    const int64_t begin = input.offsets()[static_cast<size_t>(first_bag)];
    const int64_t end = input.offsets()[static_cast<size_t>(first_bag + batch)];
    const IdRoute* route = routes != nullptr && static_cast<size_t>(t) < routes->size() &&
                                   (*routes)[static_cast<size_t>(t)]
                               ? &(*routes)[static_cast<size_t>(t)]
                               : nullptr;
    const TableRouting& routing = layout.routing(t);
    std::vector<int64_t> ids(values.begin() + begin, values.begin() + end);
    block.resize(ids.size());
    if (route != nullptr) {
      // Sent as the route makes them: the receiving rank makes them rows.
      (*route)(ids, block.data());
      const auto blocks = static_cast<int32_t>(routing.block_rows.size());
      for (int32_t blk : block) {
        if (blk < 0 || blk >= blocks) {
          return InternalError(fmt::format("input dist: table '{}' routed an id to row block {} of {}", config.name,
                                           blk, blocks));
        }
      }
    }
    // One row block (a table-wise table, a column block): the feature's ids
    // go there in one run, as the route made them or as they came when all
    // are in range.
    if (routing.router == nullptr && routing.block_rows.size() == 1 &&
        (route != nullptr || std::all_of(ids.begin(), ids.end(), [&](int64_t id) { return id >= 0 && id < rows; }))) {
      BlockLists& l = lists[f].emplace_back();
      const auto at = [](int64_t i) { return static_cast<std::ptrdiff_t>(i); };
      l.lengths.assign(lengths.begin() + at(first_bag), lengths.begin() + at(first_bag + batch));
      l.rows = std::move(ids);
      const int64_t start = routing.sorted_starts.empty() ? 0 : routing.sorted_starts[0];
      if (route == nullptr && start != 0) {
        for (int64_t& r : l.rows) r -= start;
      }
      l.origin.resize(l.rows.size());
      std::iota(l.origin.begin(), l.origin.end(), begin);
      if (with_weights) {
        if (in_weights != nullptr) {
          l.weights.assign(in_weights + begin, in_weights + end);
        } else {
          l.weights.assign(l.rows.size(), 1.0f);
        }
      }
      continue;
    }
    std::vector<bool> valid(ids.size(), true);
    local.resize(ids.size());
    if (route != nullptr) local = ids;
    // Out-of-range ids first (the router needs in-range ids).
    int64_t b = 0;
    for (size_t i = 0; i < ids.size() && route == nullptr; ++i) {
      if (ids[i] >= 0 && ids[i] < rows) continue;
      if (bounds_check == SR_BOUNDS_CHECK_FATAL) {
        while (input.offsets()[static_cast<size_t>(first_bag + b + 1)] <= begin + static_cast<int64_t>(i)) ++b;
        return Status(SR_OUT_OF_RANGE, fmt::format("feature '{}', sample {}: id {} is outside table '{}' ({} rows)",
                                           features[f].name, b, ids[i], config.name, rows));
      }
      valid[i] = false;
      ids[i] = 0;
      ++out.invalid;
    }
    if (route == nullptr) SR_RETURN_IF_ERROR(layout.Route(t, ids, block.data(), local.data()));
    auto& mine = lists[f];
    mine.resize(routing.block_rows.size());
    for (auto& l : mine) l.lengths.assign(static_cast<size_t>(batch), 0);
    for (int64_t s = 0; s < batch; ++s) {
      const int64_t lo = input.offsets()[static_cast<size_t>(first_bag + s)] - begin;
      const int64_t hi = lo + lengths[static_cast<size_t>(first_bag + s)];
      for (int64_t i = lo; i < hi; ++i) {
        if (!valid[static_cast<size_t>(i)]) continue;
        BlockLists& l = mine[static_cast<size_t>(block[static_cast<size_t>(i)])];
        ++l.lengths[static_cast<size_t>(s)];
        l.rows.push_back(local[static_cast<size_t>(i)]);
        l.origin.push_back(begin + i);
        if (with_weights) l.weights.push_back(in_weights != nullptr ? in_weights[begin + i] : 1.0f);
      }
    }
  }

  std::vector<std::string> keys;
  std::vector<int64_t> out_values, out_lengths, strides;
  std::vector<float> out_weights;
  size_t total_ids = 0, total_bags = 0;
  for (int r = 0; r < layout.world_size(); ++r) {
    for (const ShardSlot& slot : layout.slots(r)) {
      const BlockLists& l = lists[static_cast<size_t>(slot.feature)][static_cast<size_t>(
          layout.BlockOfShard(slot.table, slot.shard))];
      total_ids += l.rows.size();
      total_bags += l.lengths.size();
    }
  }
  out_values.reserve(total_ids);
  out.origin.reserve(total_ids);
  out_lengths.reserve(total_bags);
  if (with_weights) out_weights.reserve(total_ids);
  for (int r = 0; r < layout.world_size(); ++r) {
    for (const ShardSlot& slot : layout.slots(r)) {
      const BlockLists& l = lists[static_cast<size_t>(slot.feature)][static_cast<size_t>(
          layout.BlockOfShard(slot.table, slot.shard))];
      keys.push_back(slot.key);
      strides.push_back(static_cast<int64_t>(l.lengths.size()));
      out_lengths.insert(out_lengths.end(), l.lengths.begin(), l.lengths.end());
      out_values.insert(out_values.end(), l.rows.begin(), l.rows.end());
      out.origin.insert(out.origin.end(), l.origin.begin(), l.origin.end());
      if (with_weights) out_weights.insert(out_weights.end(), l.weights.begin(), l.weights.end());
    }
  }
  out.splits = layout.slot_counts();
  std::optional<std::vector<float>> w;
  if (with_weights) w = std::move(out_weights);
  SR_ASSIGN_OR_RETURN(out.kjt, KeyedJaggedTensor::FromLengths(std::move(keys), std::move(out_values),
                                                              std::move(out_lengths), std::move(w),
                                                              std::move(strides)));
  return out;
}

}  // namespace shardrec
