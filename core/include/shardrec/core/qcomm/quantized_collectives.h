// The output dist's collectives with a quantized comm codec (the seeds'
// WE-19 contract: encode, collective, decode). Each block of float32 rows
// is encoded on its own (per-row codecs keep their scales in the block),
// the collective carries the codec's elements, and every received block is
// decoded. Without a codec the floats go as they are, through exactly the
// collective the module used before codecs existed (same numbers, bit for
// bit). Each returns the bytes this rank put on the wire for other ranks.
#pragma once

#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/plugin_objects.h"

namespace shardrec {

// rows x cols float32 values, row-major, contiguous.
struct FloatBlock {
  int64_t rows = 0, cols = 0;
  int64_t numel() const { return rows * cols; }
};

// send, recv: float32 tensors of the blocks' elements (any shape).
// send: world blocks packed in rank order (block r goes to rank r); recv:
// world blocks packed in rank order (block s came from rank s). `what`
// names the exchange in errors.
StatusOr<int64_t> QuantizedAllToAll(const ProcessGroup& group, const Codec* codec, const Tensor& send,
                                    const std::vector<FloatBlock>& send_blocks, Tensor* recv,
                                    const std::vector<FloatBlock>& recv_blocks, const char* what);
// The same where what goes to (comes from) one rank is several blocks of
// different widths, packed one after another: parts[r] lists rank r's.
using BlockParts = std::vector<std::vector<FloatBlock>>;
StatusOr<int64_t> QuantizedAllToAll(const ProcessGroup& group, const Codec* codec, const Tensor& send,
                                    const BlockParts& send_parts, Tensor* recv, const BlockParts& recv_parts,
                                    const char* what);

// send: [sum of rows_per_rank, cols], rank r's slice first-to-last in rank
// order; recv: [rows_per_rank[me], cols], the slices summed in rank order.
// With a codec the slices are exchanged encoded and summed in float32 after
// decoding (every codec works, integer ones included).
StatusOr<int64_t> QuantizedReduceScatter(const ProcessGroup& group, const Codec* codec, const Tensor& send,
                                         const std::vector<int64_t>& rows_per_rank, Tensor* recv, const char* what);

// mine: [rows_per_rank[me], cols]; out: every rank's rows in rank order.
StatusOr<int64_t> QuantizedAllGather(const ProcessGroup& group, const Codec* codec, const Tensor& mine,
                                     const std::vector<int64_t>& rows_per_rank, Tensor* out, const char* what);

}  // namespace shardrec
