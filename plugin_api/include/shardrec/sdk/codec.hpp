// shardrec plugin SDK — quantized comm codecs (ABI 1.2, SR_KIND_CODEC).
//
//   class MyCodec {
//    public:
//     explicit MyCodec(sdk::Options& o);
//     DLDataType QuantizedDtype() const;                 // e.g. {kDLUInt, 8, 1}
//     int64_t QuantizedSize(int64_t rows, int64_t cols) const;
//     void Encode(const float* in, int64_t rows, int64_t cols, void* out) const;
//     void Decode(const void* in, int64_t rows, int64_t cols, float* out) const;
//   };
//   static const sr_component kComponents[] = {
//       sdk::Component(SR_KIND_CODEC, "mine", "1.0", "my codec", &sdk::CodecVtable<MyCodec>())};
//   SHARDREC_DEFINE_PLUGIN("mine", "1.0", kComponents)
//
// The adapter checks every block's tensors (CPU, contiguous, the dtypes and
// element counts the codec declares) before the class sees raw pointers, and
// turns exceptions into statuses. Encode and Decode must be const and
// thread-safe: the host calls them for several blocks at once.
#ifndef SHARDREC_SDK_CODEC_HPP_
#define SHARDREC_SDK_CODEC_HPP_

#include <cstdint>
#include <string>

#include "shardrec/abi/codec.h"
#include "shardrec/sdk/dtype.hpp"
#include "shardrec/sdk/options.hpp"
#include "shardrec/sdk/status.hpp"
#include "shardrec/sdk/tensor.hpp"

namespace shardrec::sdk {

namespace codec_detail {
inline int64_t Numel(const DLTensor& t) {
  int64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= t.shape[d];
  return n;
}
// A block's tensor: on the CPU, contiguous, of `dtype`, with `count` elements.
inline void* CheckBlock(const DLTensor* t, const char* what, DLDataType dtype, int64_t count) {
  if (t == nullptr) throw InvalidArgument(std::string(what) + ": tensor is NULL");
  if (t->device.device_type != kDLCPU && t->device.device_type != kDLCUDAHost) {
    throw InvalidArgument(std::string(what) + ": expected a CPU tensor");
  }
  if (!SameDType(t->dtype, dtype)) {
    throw InvalidArgument(std::string(what) + ": expected dtype " + DTypeName(dtype) + ", got " + DTypeName(t->dtype));
  }
  if (Numel(*t) != count) {
    throw InvalidArgument(std::string(what) + ": expected " + std::to_string(count) + " elements, got shape " +
                          ShapeString(*t));
  }
  if (t->strides != nullptr) {
    int64_t c = 1;
    for (int d = t->ndim - 1; d >= 0; --d) {
      if (t->shape[d] != 1 && t->strides[d] != c) throw InvalidArgument(std::string(what) + ": not contiguous");
      c *= t->shape[d];
    }
  }
  if (t->data == nullptr && count > 0) throw InvalidArgument(std::string(what) + ": data is NULL");
  return static_cast<char*>(t->data) + t->byte_offset;
}
inline void CheckExtent(int64_t rows, int64_t cols) {
  if (rows < 0 || cols < 0) {
    throw InvalidArgument("block of " + std::to_string(rows) + " x " + std::to_string(cols) + ": negative extent");
  }
}
}  // namespace codec_detail

template <class T>
const sr_codec_vtable& CodecVtable() {
  static const sr_codec_vtable vt = [] {
    sr_codec_vtable v{};
    v.struct_size = SR_STRUCT_SIZE(sr_codec_vtable, decode);
    v.create = [](const sr_codec_create_args* a, sr_codec** out) {
      return Guard([&] {
        if (a == nullptr || out == nullptr) throw InvalidArgument("create: NULL args or out");
        Options opts(a->options, "codec");
        T* c = new T(opts);
        try {
          opts.Finish();
        } catch (...) {
          delete c;
          throw;
        }
        *out = reinterpret_cast<sr_codec*>(c);
      });
    };
    v.destroy = [](sr_codec* c) { delete reinterpret_cast<T*>(c); };
    v.quantized_dtype = [](const sr_codec* c, DLDataType* out) {
      return Guard([&] {
        if (c == nullptr || out == nullptr) throw InvalidArgument("quantized_dtype: NULL codec or out");
        *out = reinterpret_cast<const T*>(c)->QuantizedDtype();
      });
    };
    v.quantized_size = [](const sr_codec* c, int64_t rows, int64_t cols, int64_t* out) {
      return Guard([&] {
        if (c == nullptr || out == nullptr) throw InvalidArgument("quantized_size: NULL codec or out");
        codec_detail::CheckExtent(rows, cols);
        *out = reinterpret_cast<const T*>(c)->QuantizedSize(rows, cols);
      });
    };
    v.encode = [](const sr_codec* c, const sr_codec_block_args* a) {
      return Guard([&] {
        if (c == nullptr || a == nullptr) throw InvalidArgument("encode: NULL codec or args");
        const T& codec = *reinterpret_cast<const T*>(c);
        codec_detail::CheckExtent(a->rows, a->cols);
        const void* in = codec_detail::CheckBlock(a->input, "encode input", DTypeOf<float>(), a->rows * a->cols);
        void* out = codec_detail::CheckBlock(a->output, "encode output", codec.QuantizedDtype(),
                                             codec.QuantizedSize(a->rows, a->cols));
        codec.Encode(static_cast<const float*>(in), a->rows, a->cols, out);
      });
    };
    v.decode = [](const sr_codec* c, const sr_codec_block_args* a) {
      return Guard([&] {
        if (c == nullptr || a == nullptr) throw InvalidArgument("decode: NULL codec or args");
        const T& codec = *reinterpret_cast<const T*>(c);
        codec_detail::CheckExtent(a->rows, a->cols);
        const void* in = codec_detail::CheckBlock(a->input, "decode input", codec.QuantizedDtype(),
                                                  codec.QuantizedSize(a->rows, a->cols));
        void* out = codec_detail::CheckBlock(a->output, "decode output", DTypeOf<float>(), a->rows * a->cols);
        codec.Decode(in, a->rows, a->cols, static_cast<float*>(out));
      });
    };
    return v;
  }();
  return vt;
}

}  // namespace shardrec::sdk

#endif  // SHARDREC_SDK_CODEC_HPP_
