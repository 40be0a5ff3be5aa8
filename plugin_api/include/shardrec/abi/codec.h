/*
 * shardrec plugin ABI v1.2 — quantized comm codecs (SR_KIND_CODEC).
 *
 * A codec shrinks the float32 embeddings and gradients the output dist
 * sends (TorchRec's QuantizedCommCodec): the host encodes each block it
 * sends to one rank, runs the collective on the encoded elements, and
 * decodes each block it receives. A block is `rows` rows of `cols` float32
 * values, row-major and contiguous; a codec may keep per-row parameters
 * (INT8 row-wise keeps a scale and a bias) inside the encoded block.
 *
 * Codecs are stateless between calls: encode and decode may be called from
 * several threads at once on one codec, for different buffers. Every entry
 * must be deterministic: equal inputs give equal bytes on every rank.
 *
 * Added in ABI 1.2. A 1.0 or 1.1 host does not know this kind and refuses
 * a library that offers it (docs/abi.md: ship codecs in a library of their
 * own); a 1.2 host loads every 1.0 and 1.1 plugin as before.
 */
#ifndef SHARDREC_ABI_CODEC_H_
#define SHARDREC_ABI_CODEC_H_

#include "shardrec/abi/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sr_codec sr_codec; /* opaque, plugin-created */

typedef struct sr_codec_create_args {
  size_t struct_size;
  sr_extension* ext;
  /* --plugin-opt codec.NAME.KEY=VALUE, as strings. */
  sr_named_value_list options;
} sr_codec_create_args;

/* One block: `input` float32 [rows, cols] and `output` of the codec's
 * quantized dtype with quantized_size(rows, cols) elements (encode), or
 * the reverse (decode). Both contiguous CPU tensors; the host allocates
 * them. A block may have zero rows. */
typedef struct sr_codec_block_args {
  size_t struct_size;
  sr_extension* ext;
  int64_t rows;
  int64_t cols;
  const DLTensor* input;
  DLTensor* output;
} sr_codec_block_args;

typedef struct sr_codec_vtable {
  size_t struct_size;
  sr_extension* ext;
  /* Required. */
  sr_status* (*create)(const sr_codec_create_args* args, sr_codec** out);
  void (*destroy)(sr_codec* codec);
  /* Required. The element type encode writes (TorchRec's quantized_dtype):
   * float16, bfloat16, or uint8 for codecs that pack bytes. */
  sr_status* (*quantized_dtype)(const sr_codec* codec, DLDataType* out);
  /* Required. Elements of the quantized dtype that encoding a block of
   * rows x cols float32 values takes (TorchRec's calc_quantized_size). */
  sr_status* (*quantized_size)(const sr_codec* codec, int64_t rows,
                               int64_t cols, int64_t* out);
  /* Required. float32 block -> encoded block. */
  sr_status* (*encode)(const sr_codec* codec, const sr_codec_block_args* args);
  /* Required. encoded block -> float32 block. */
  sr_status* (*decode)(const sr_codec* codec, const sr_codec_block_args* args);
} sr_codec_vtable;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHARDREC_ABI_CODEC_H_ */
