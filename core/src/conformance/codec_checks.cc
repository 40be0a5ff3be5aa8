// Conformance checks for quantized comm codecs (ABI 1.2): creation and
// option validation; quantized_size for empty and growing blocks; encode
// writes exactly its elements and nothing past them; deterministic bytes;
// decode of an encoded block gives finite values close to the input (the
// error is reported, not judged: a codec chooses its precision); the same
// bytes from two threads at once (the ABI lets the host encode blocks in
// parallel); zero-row blocks.
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "recorder.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/sdk/dtype.hpp"

namespace shardrec::conformance {
namespace {

constexpr unsigned char kGuardByte = 0xA5;

std::vector<float> Block(int64_t rows, int64_t cols) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(std::sin(0.7 * static_cast<double>(i)) * (1 + i % 5));
  return v;
}

// Encodes into a buffer with guard bytes after the codec's elements.
Status EncodeGuarded(const Codec& codec, const std::vector<float>& in, int64_t rows, int64_t cols,
                     std::vector<unsigned char>& out, size_t* bytes) {
  SR_ASSIGN_OR_RETURN(int64_t n, codec.QuantizedSize(rows, cols));
  *bytes = static_cast<size_t>(n) * codec.quantized_element_bytes();
  out.assign(*bytes + 64, kGuardByte);
  return codec.Encode(in.data(), rows, cols, out.data());
}

}  // namespace

void CheckCodec(const ComponentRef& ref, const OptionList& options, Recorder& rec) {
  auto bad = Codec::Create(ref, UnknownOption());
  rec.ExpectError(bad.status(), SR_INVALID_ARGUMENT, "create refuses an unknown option");
  auto created = Codec::Create(ref, options);
  if (!rec.ExpectOk(created.status(), "create with the given options")) return;
  const Codec& codec = created.value();
  rec.Pass("quantized_dtype is one a collective carries (" + sdk::DTypeName(codec.quantized_dtype()) + ")");

  auto zero = codec.QuantizedSize(0, 16);
  rec.Expect(zero.ok() && zero.value() == 0, "a block of zero rows encodes to zero elements",
             zero.ok() ? fmt::format("quantized_size(0, 16) = {}", zero.value()) : zero.status().ToString());
  auto small = codec.QuantizedSize(3, 16), large = codec.QuantizedSize(6, 16);
  rec.Expect(small.ok() && large.ok() && small.value() > 0 && large.value() >= small.value(),
             "quantized_size grows with the rows", small.ok() && large.ok()
                                                      ? fmt::format("3 rows: {}, 6 rows: {}", small.value(), large.value())
                                                      : "quantized_size failed");

  const int64_t rows = 7, cols = 24;
  const std::vector<float> in = Block(rows, cols);
  std::vector<unsigned char> first, second;
  size_t bytes = 0;
  Status st = EncodeGuarded(codec, in, rows, cols, first, &bytes);
  if (!rec.ExpectOk(st, "encode a 7 x 24 block")) return;
  bool guard = true;
  for (size_t i = bytes; i < first.size(); ++i) guard = guard && first[i] == kGuardByte;
  rec.Expect(guard, "encode writes nothing past its quantized_size elements", "a guard byte after the block changed");
  st = EncodeGuarded(codec, in, rows, cols, second, &bytes);
  rec.Expect(st.ok() && std::memcmp(first.data(), second.data(), bytes) == 0, "deterministic: equal blocks encode to "
             "equal bytes", st.ok() ? "two encodes differ" : st.ToString());

  std::vector<float> out(in.size() + 4, 12345.0f);
  st = codec.Decode(first.data(), rows, cols, out.data());
  if (!rec.ExpectOk(st, "decode the encoded block")) return;
  double worst = 0, scale = 0;
  bool finite = true;
  for (size_t i = 0; i < in.size(); ++i) {
    finite = finite && std::isfinite(out[i]);
    worst = std::max(worst, std::fabs(static_cast<double>(out[i]) - in[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(in[i])));
  }
  rec.Expect(finite && out[in.size()] == 12345.0f, "decode writes rows x cols finite values and nothing more",
             finite ? "wrote past the end" : "a decoded value is not finite");
  rec.Expect(worst <= scale, fmt::format("round trip keeps the values' magnitude (max |error| {:.3g} for values up to "
                                         "{:.3g})", worst, scale),
             fmt::format("max |error| {:.3g} exceeds the largest |value| {:.3g}", worst, scale));

  // Two threads encoding the same block at once give the same bytes.
  std::vector<unsigned char> a, b;
  size_t na = 0, nb = 0;
  Status sa = Status::Ok(), sb = Status::Ok();
  std::thread ta([&] { sa = EncodeGuarded(codec, in, rows, cols, a, &na); });
  std::thread tb([&] { sb = EncodeGuarded(codec, in, rows, cols, b, &nb); });
  ta.join();
  tb.join();
  rec.Expect(sa.ok() && sb.ok() && std::memcmp(a.data(), first.data(), bytes) == 0 &&
                 std::memcmp(b.data(), first.data(), bytes) == 0,
             "encode from two threads at once gives the same bytes", "concurrent encodes differ or failed");

  std::vector<float> none;
  unsigned char sink[8] = {};
  st = codec.Encode(none.data(), 0, cols, sink);
  rec.ExpectOk(st, "encode accepts a block of zero rows");
}

}  // namespace shardrec::conformance
