// Quantized collectives (quantized_collectives.h).
#include "shardrec/core/qcomm/quantized_collectives.h"

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

namespace shardrec {
namespace {

// An untyped buffer of `elements` of the codec's dtype, as a Tensor the
// collective can carry.
Tensor QuantizedBuffer(const Codec& codec, int64_t elements) {
  return Tensor::Empty(codec.quantized_dtype(), {elements});
}

// The elements each block of `parts` encodes to, rank after rank (asked of
// the codec once per block), and each rank's total.
struct PartSizes {
  std::vector<std::vector<int64_t>> block;
  std::vector<int64_t> per_rank;
  int64_t total = 0;
};
StatusOr<PartSizes> SizesOf(const Codec& codec, const BlockParts& parts) {
  PartSizes sizes;
  for (const auto& rank_parts : parts) {
    sizes.block.emplace_back();
    int64_t n = 0;
    for (const FloatBlock& b : rank_parts) {
      SR_ASSIGN_OR_RETURN(int64_t q, codec.QuantizedSize(b.rows, b.cols));
      sizes.block.back().push_back(q);
      n += q;
    }
    sizes.per_rank.push_back(n);
    sizes.total += n;
  }
  return sizes;
}

// Encodes every rank's parts into one buffer, rank after rank.
StatusOr<Tensor> EncodeParts(const Codec& codec, const float* src, const BlockParts& parts, const PartSizes& sizes) {
  Tensor out = QuantizedBuffer(codec, sizes.total);
  char* dst = static_cast<char*>(out.raw_data());
  const size_t es = codec.quantized_element_bytes();
  for (size_t r = 0; r < parts.size(); ++r) {
    for (size_t i = 0; i < parts[r].size(); ++i) {
      const FloatBlock& b = parts[r][i];
      SR_RETURN_IF_ERROR(codec.Encode(src, b.rows, b.cols, dst));
      src += b.numel();
      dst += static_cast<size_t>(sizes.block[r][i]) * es;
    }
  }
  return out;
}

Status DecodeParts(const Codec& codec, const Tensor& encoded, const BlockParts& parts, const PartSizes& sizes,
                   float* dst) {
  const char* src = static_cast<const char*>(encoded.raw_data());
  const size_t es = codec.quantized_element_bytes();
  for (size_t r = 0; r < parts.size(); ++r) {
    for (size_t i = 0; i < parts[r].size(); ++i) {
      const FloatBlock& b = parts[r][i];
      SR_RETURN_IF_ERROR(codec.Decode(src, b.rows, b.cols, dst));
      src += static_cast<size_t>(sizes.block[r][i]) * es;
      dst += b.numel();
    }
  }
  return Status::Ok();
}

int64_t BytesToOthers(const std::vector<int64_t>& counts, size_t element_bytes, int me) {
  int64_t bytes = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    if (static_cast<int>(r) != me) bytes += counts[r] * static_cast<int64_t>(element_bytes);
  }
  return bytes;
}

BlockParts OnePart(const std::vector<FloatBlock>& blocks) {
  BlockParts parts;
  for (const FloatBlock& b : blocks) parts.push_back({b});
  return parts;
}

Status CheckParts(const ProcessGroup& group, const BlockParts& send, const BlockParts& recv, const char* what,
                  const Tensor& send_t, const Tensor& recv_t) {
  if (send.size() != static_cast<size_t>(group.world_size()) || recv.size() != send.size()) {
    return InternalError(fmt::format("{}: {} send and {} receive blocks for a world of {}", what, send.size(),
                                     recv.size(), group.world_size()));
  }
  int64_t s = 0, r = 0;
  for (const auto& p : send) {
    for (const auto& b : p) s += b.numel();
  }
  for (const auto& p : recv) {
    for (const auto& b : p) r += b.numel();
  }
  if (s != send_t.numel() || r != recv_t.numel() || send_t.dtype().code != kDLFloat || send_t.dtype().bits != 32 ||
      recv_t.dtype().code != kDLFloat || recv_t.dtype().bits != 32) {
    return InternalError(fmt::format("{}: blocks of {} and {} floats for tensors of {} and {} elements", what, s, r,
                                     send_t.numel(), recv_t.numel()));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<int64_t> QuantizedAllToAll(const ProcessGroup& group, const Codec* codec, const Tensor& send,
                                    const std::vector<FloatBlock>& send_blocks, Tensor* recv,
                                    const std::vector<FloatBlock>& recv_blocks, const char* what) {
  return QuantizedAllToAll(group, codec, send, OnePart(send_blocks), recv, OnePart(recv_blocks), what);
}

StatusOr<int64_t> QuantizedAllToAll(const ProcessGroup& group, const Codec* codec, const Tensor& send,
                                    const BlockParts& send_parts, Tensor* recv, const BlockParts& recv_parts,
                                    const char* what) {
  SR_RETURN_IF_ERROR(CheckParts(group, send_parts, recv_parts, what, send, *recv));
  const int me = group.rank();
  std::vector<int64_t> send_counts, recv_counts;
  if (codec == nullptr) {
    for (size_t r = 0; r < send_parts.size(); ++r) {
      int64_t s = 0, v = 0;
      for (const auto& b : send_parts[r]) s += b.numel();
      for (const auto& b : recv_parts[r]) v += b.numel();
      send_counts.push_back(s);
      recv_counts.push_back(v);
    }
    SR_RETURN_IF_ERROR(group.AllToAllV(send, send_counts, recv, recv_counts).WithContext(what));
    return BytesToOthers(send_counts, sizeof(float), me);
  }
  SR_ASSIGN_OR_RETURN(PartSizes sent, SizesOf(*codec, send_parts));
  SR_ASSIGN_OR_RETURN(PartSizes got, SizesOf(*codec, recv_parts));
  SR_ASSIGN_OR_RETURN(Tensor encoded, EncodeParts(*codec, send.data<float>(), send_parts, sent));
  send_counts = sent.per_rank;
  Tensor received = QuantizedBuffer(*codec, got.total);
  SR_RETURN_IF_ERROR(group.AllToAllV(encoded, send_counts, &received, got.per_rank)
                         .WithContext(fmt::format("{} ({})", what, codec->Describe())));
  SR_RETURN_IF_ERROR(DecodeParts(*codec, received, recv_parts, got, recv->data<float>()));
  return BytesToOthers(send_counts, codec->quantized_element_bytes(), me);
}

StatusOr<int64_t> QuantizedReduceScatter(const ProcessGroup& group, const Codec* codec, const Tensor& send,
                                         const std::vector<int64_t>& rows_per_rank, Tensor* recv, const char* what) {
  const int world = group.world_size(), me = group.rank();
  const int64_t cols = send.size(1);
  if (codec == nullptr) {
    std::vector<int64_t> counts;
    for (int64_t rows : rows_per_rank) counts.push_back(rows * cols);
    SR_RETURN_IF_ERROR(group.ReduceScatterV(send, recv, counts).WithContext(what));
    // What a ring or a pairwise exchange moves: every other rank's slice once.
    int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    return (total - counts[static_cast<size_t>(me)]) * static_cast<int64_t>(sizeof(float));
  }
  std::vector<FloatBlock> send_blocks, recv_blocks;
  for (int r = 0; r < world; ++r) {
    send_blocks.push_back({rows_per_rank[static_cast<size_t>(r)], cols});
    recv_blocks.push_back({rows_per_rank[static_cast<size_t>(me)], cols});
  }
  const int64_t mine = rows_per_rank[static_cast<size_t>(me)] * cols;
  Tensor slices = Tensor::Empty(dtype::kFloat32, {mine * world});
  SR_ASSIGN_OR_RETURN(int64_t bytes, QuantizedAllToAll(group, codec, send, send_blocks, &slices, recv_blocks, what));
  // Sum the decoded slices in rank order, as the plain reduce-scatter does.
  float* out = recv->data<float>();
  const float* all = slices.data<float>();
  std::copy(all, all + mine, out);
  for (int r = 1; r < world; ++r) {
    const float* s = all + static_cast<size_t>(r) * static_cast<size_t>(mine);
    for (int64_t i = 0; i < mine; ++i) out[i] += s[i];
  }
  return bytes;
}

StatusOr<int64_t> QuantizedAllGather(const ProcessGroup& group, const Codec* codec, const Tensor& mine,
                                     const std::vector<int64_t>& rows_per_rank, Tensor* out, const char* what) {
  const int world = group.world_size(), me = group.rank();
  const int64_t cols = mine.size(1);
  if (codec == nullptr) {
    std::vector<int64_t> counts;
    for (int64_t rows : rows_per_rank) counts.push_back(rows * cols);
    SR_RETURN_IF_ERROR(group.AllGatherV(mine, out, counts).WithContext(what));
    return counts[static_cast<size_t>(me)] * static_cast<int64_t>(sizeof(float)) * (world - 1);
  }
  const BlockParts mine_part = {{FloatBlock{rows_per_rank[static_cast<size_t>(me)], cols}}};
  SR_ASSIGN_OR_RETURN(PartSizes sent, SizesOf(*codec, mine_part));
  SR_ASSIGN_OR_RETURN(Tensor encoded, EncodeParts(*codec, mine.data<float>(), mine_part, sent));
  BlockParts blocks;
  for (int64_t rows : rows_per_rank) blocks.push_back({FloatBlock{rows, cols}});
  SR_ASSIGN_OR_RETURN(PartSizes all, SizesOf(*codec, blocks));
  Tensor gathered = QuantizedBuffer(*codec, all.total);
  SR_RETURN_IF_ERROR(group.AllGatherV(encoded, &gathered, all.per_rank)
                         .WithContext(fmt::format("{} ({})", what, codec->Describe())));
  SR_RETURN_IF_ERROR(DecodeParts(*codec, gathered, blocks, all, out->data<float>()));
  return sent.total * static_cast<int64_t>(codec->quantized_element_bytes()) * (world - 1);
}

}  // namespace shardrec
