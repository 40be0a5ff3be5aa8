// KjtAllToAll (kjt_all_to_all.h). The input's lengths and ids for one
// destination are contiguous (keys are grouped by destination), so they are
// sent in the KJT's own order (one copy into a tensor); only the receiver
// reorders.
#include "shardrec/core/dist/kjt_all_to_all.h"

#include <algorithm>
#include <numeric>

namespace shardrec {


StatusOr<KeyedJaggedTensor> KjtAllToAll(const ProcessGroup& group, const KeyedJaggedTensor& input,
                                        const std::vector<int64_t>& splits) {
  const int world = group.world_size(), me = group.rank();
  const int num_keys = input.num_keys();
  if (static_cast<int>(splits.size()) != world) {
    return InvalidArgumentError("KJT all-to-all: " + std::to_string(splits.size()) + " splits for a world of " +
                                std::to_string(world));
  }
  std::vector<int64_t> first_key(world + 1, 0);
  for (int r = 0; r < world; ++r) {
    if (splits[r] < 0) return InvalidArgumentError("KJT all-to-all: negative split for rank " + std::to_string(r));
    first_key[r + 1] = first_key[r] + splits[r];
  }
  if (first_key[world] != num_keys) {
    return InvalidArgumentError("KJT all-to-all: splits sum to " + std::to_string(first_key[world]) + ", the KJT has " +
                                std::to_string(num_keys) + " keys");
  }
  const std::vector<int64_t> ids_per_key = input.length_per_key();
  const int64_t weighted = input.has_weights() ? 1 : 0;

  // Phase 1: per destination, per key: (samples, ids, weighted).
  constexpr int kMeta = 3;
  std::vector<int64_t> meta_send, meta_send_counts(world), meta_recv_counts(world, kMeta * splits[me]);
  for (int r = 0; r < world; ++r) {
    for (int64_t k = first_key[r]; k < first_key[r + 1]; ++k) {
      meta_send.insert(meta_send.end(), {input.stride_per_key()[k], ids_per_key[k], weighted});
    }
    meta_send_counts[r] = kMeta * splits[r];
  }
  Tensor meta_recv = Tensor::Empty(dtype::kInt64, {kMeta * splits[me] * world});
  SR_RETURN_IF_ERROR(group.AllToAllV(Tensor::FromVector(meta_send), meta_send_counts, &meta_recv, meta_recv_counts)
                         .WithContext("KJT all-to-all, sizes"));
  const int64_t mine = splits[me];
  const int64_t* meta = meta_recv.data<int64_t>();
  auto samples = [&](int s, int64_t k) { return meta[(s * mine + k) * kMeta]; };
  auto ids = [&](int s, int64_t k) { return meta[(s * mine + k) * kMeta + 1]; };
  for (int s = 0; s < world && mine > 0; ++s) {
    if (meta[s * mine * kMeta + 2] != weighted) {
      return InvalidArgumentError("KJT all-to-all: rank " + std::to_string(s) + (weighted ? " sends no" : " sends") +
                                  " weights, rank " + std::to_string(me) + (weighted ? " has them" : " has none"));
    }
  }

  // Phase 2: lengths, ids and weights, rank-major.
  std::vector<int64_t> len_send(world), len_recv(world, 0), ids_send(world), ids_recv(world, 0);
  for (int r = 0; r < world; ++r) {
    len_send[r] = input.BagOffset(static_cast<int>(first_key[r + 1])) - input.BagOffset(static_cast<int>(first_key[r]));
    ids_send[r] = std::accumulate(ids_per_key.begin() + first_key[r], ids_per_key.begin() + first_key[r + 1], int64_t{0});
    for (int64_t k = 0; k < mine; ++k) {
      len_recv[r] += samples(r, k);
      ids_recv[r] += ids(r, k);
    }
  }
  const int64_t total_len = std::accumulate(len_recv.begin(), len_recv.end(), int64_t{0});
  const int64_t total_ids = std::accumulate(ids_recv.begin(), ids_recv.end(), int64_t{0});
  Tensor lengths_in = Tensor::FromVector(input.lengths()), ids_in = Tensor::FromVector(input.values().ToVector());
  Tensor lengths_out = Tensor::Empty(dtype::kInt64, {total_len}), ids_out = Tensor::Empty(dtype::kInt64, {total_ids});
  SR_ASSIGN_OR_RETURN(CommRequest r1, group.PostAllToAllV(lengths_in, len_send, &lengths_out, len_recv));
  SR_ASSIGN_OR_RETURN(CommRequest r2, group.PostAllToAllV(ids_in, ids_send, &ids_out, ids_recv));
  Tensor weights_in, weights_out;
  std::optional<CommRequest> r3;
  if (weighted) {
    weights_in = Tensor::FromVector(input.weights()->ToVector());
    weights_out = Tensor::Empty(dtype::kFloat32, {total_ids});
    SR_ASSIGN_OR_RETURN(CommRequest r, group.PostAllToAllV(weights_in, ids_send, &weights_out, ids_recv));
    r3.emplace(std::move(r));
  }
  SR_RETURN_IF_ERROR(r1.Wait(group.timeout_ms()).WithContext("KJT all-to-all, lengths"));
  SR_RETURN_IF_ERROR(r2.Wait(group.timeout_ms()).WithContext("KJT all-to-all, ids"));
  if (r3) SR_RETURN_IF_ERROR(r3->Wait(group.timeout_ms()).WithContext("KJT all-to-all, weights"));

  // Recat: [source][key] blocks to [key][source]. Each source's blocks are
  // read in key order, so one cursor per source walks its block once.
  std::vector<int64_t> len_cur(world, 0), ids_cur(world, 0);  // where each source's next key starts
  for (int s = 1; s < world; ++s) {
    len_cur[s] = len_cur[s - 1] + len_recv[s - 1];
    ids_cur[s] = ids_cur[s - 1] + ids_recv[s - 1];
  }
  std::vector<int64_t> out_lengths, out_ids, stride_per_key(mine, 0);
  std::vector<float> out_weights;
  out_lengths.reserve(total_len);
  out_ids.reserve(total_ids);
  const int64_t* L = lengths_out.data<int64_t>();
  const int64_t* V = ids_out.data<int64_t>();
  const float* W = weighted ? weights_out.data<float>() : nullptr;
  for (int64_t k = 0; k < mine; ++k) {
    for (int s = 0; s < world; ++s) {
      const int64_t n_len = samples(s, k), n_ids = ids(s, k);
      out_lengths.insert(out_lengths.end(), L + len_cur[s], L + len_cur[s] + n_len);
      out_ids.insert(out_ids.end(), V + ids_cur[s], V + ids_cur[s] + n_ids);
      if (W) out_weights.insert(out_weights.end(), W + ids_cur[s], W + ids_cur[s] + n_ids);
      len_cur[s] += n_len;
      ids_cur[s] += n_ids;
      stride_per_key[k] += n_len;
    }
  }
  std::vector<std::string> keys(input.keys().begin() + first_key[me], input.keys().begin() + first_key[me + 1]);
  std::optional<std::vector<float>> weights;
  if (weighted) weights = std::move(out_weights);
  // Equal strides make a regular KJT (what TorchRec returns without
  // variable batch); unequal ones a variable-stride one.
  const bool uniform = std::all_of(stride_per_key.begin(), stride_per_key.end(),
                                   [&](int64_t s) { return s == stride_per_key.front(); });
  if (uniform) stride_per_key.clear();
  return KeyedJaggedTensor::FromLengths(std::move(keys), std::move(out_ids), std::move(out_lengths),
                                        std::move(weights), std::move(stride_per_key));
}

}  // namespace shardrec
