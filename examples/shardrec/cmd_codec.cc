// `shardrec codec NAME INPUT.npy`: one quantized comm codec (a codec
// plugin, docs/comm.md) on a float32 array, as the output dist runs it on
// each block it sends: the encoded bytes, the decoded values, the size
// ratio and the round trip's error. --from-encoded decodes an encoded file
// instead (what another tool encoded), so both halves can be checked
// against a reference implementation.
#include <cmath>
#include <cstring>
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "commands.h"
#include "shardrec/core/plugin_objects.h"
#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/core/tensor/npy.h"
#include "shardrec/sdk/dtype.hpp"

namespace shardrec::cli {
namespace {

// .npy has no bfloat16: its bits go as uint16.
DLDataType NpyDtype(DLDataType quantized) {
  return quantized.code == kDLBfloat ? DLDataType{kDLUInt, 16, 1} : quantized;
}

StatusOr<std::pair<int64_t, int64_t>> ParseShape(const std::string& text) {
  const size_t comma = text.find(',');
  try {
    if (comma == std::string::npos) throw std::invalid_argument("no comma");
    size_t used = 0;
    const int64_t rows = std::stoll(text.substr(0, comma), &used);
    if (used != comma) throw std::invalid_argument("rows");
    const std::string c = text.substr(comma + 1);
    const int64_t cols = std::stoll(c, &used);
    if (used != c.size() || rows < 0 || cols <= 0 || rows > (int64_t{1} << 40) / cols) throw std::invalid_argument("cols");
    return std::make_pair(rows, cols);
  } catch (const std::exception&) {
    return InvalidArgumentError("--shape '" + text + "': expected ROWS,COLS (ROWS >= 0, COLS > 0)");
  }
}

}  // namespace

int RunCodec(const std::vector<std::string>& args) {
  GlobalOptions g;
  std::string name, input, encoded_out, decoded_out, from_encoded, shape;
  po::options_description desc("codec options");
  AddGlobalOptions(desc, &g);
  desc.add_options()("codec", po::value(&name), "the codec: fp16, bf16, int8, fp8 or a codec plugin's (positional)")(
      "input", po::value(&input), "float32 .npy, 2-D [rows, cols] (1-D: one row), to encode (positional)")(
      "encoded", po::value(&encoded_out), "write the encoded elements here (.npy, 1-D; bfloat16 as uint16 bits)")(
      "decoded", po::value(&decoded_out), "write the decoded float32 values here (.npy, the input's shape)")(
      "from-encoded", po::value(&from_encoded),
      "decode this .npy of encoded elements instead of encoding an input (needs --shape)")(
      "shape", po::value(&shape), "ROWS,COLS of the block --from-encoded holds");
  po::positional_options_description pos;
  pos.add("codec", 1).add("input", 1);
  po::variables_map vm;
  int code = kExitOk;
  if (!Parse("codec", args, desc, &pos, &vm, &code,
             " NAME [INPUT.npy]\n\nRuns one quantized comm codec as the output dist does on each block it sends "
             "(encode, then\ndecode) and prints the bytes before and after and the round trip's error.\n\n"
             "examples:\n  shardrec codec int8 embeddings.npy --encoded q.npy --decoded back.npy\n"
             "  shardrec codec fp8 --from-encoded q.npy --shape 512,64 --decoded back.npy\n"
             "  shardrec plugins list                  # the codecs there are (kind codec)")) {
    return code;
  }
  auto fail = [](const std::string& m, int exit_code) {
    std::cerr << "shardrec codec: " << m << "\n";
    return exit_code;
  };
  if (name.empty()) return fail("name a codec (see --help)", kExitUsage);
  if (input.empty() == from_encoded.empty()) return fail("give an INPUT.npy to encode, or --from-encoded", kExitUsage);
  if (!from_encoded.empty() && shape.empty()) return fail("--from-encoded needs --shape ROWS,COLS", kExitUsage);
  HostSession session;
  if (!OpenSession("codec", g, {SR_KIND_CODEC}, &session)) return kExitUsage;
  auto ref = session.registry.Find(SR_KIND_CODEC, name);
  if (!ref.ok()) return fail(ref.status().message(), kExitUsage);
  auto made = Codec::Create(ref.value(), session.plugin_options.For("codec", name));
  if (!made.ok()) return fail(made.status().message(), kExitFailure);
  const Codec& codec = made.value();
  const size_t es = codec.quantized_element_bytes();

  int64_t rows = 0, cols = 0;
  Tensor values, encoded;
  if (!from_encoded.empty()) {
    auto s = ParseShape(shape);
    if (!s.ok()) return fail(s.status().message(), kExitUsage);
    std::tie(rows, cols) = s.value();
    auto read = ReadNpy(from_encoded);
    if (!read.ok()) return fail(read.status().message(), kExitFailure);
    auto want = codec.QuantizedSize(rows, cols);
    if (!want.ok()) return fail(want.status().message(), kExitFailure);
    if (read->nbytes() != static_cast<size_t>(want.value()) * es) {
      return fail(fmt::format("{}: {} bytes, but a {} x {} block encodes to {} elements of {} ({} bytes)", from_encoded,
                              read->nbytes(), rows, cols, want.value(), sdk::DTypeName(codec.quantized_dtype()),
                              static_cast<size_t>(want.value()) * es),
                  kExitFailure);
    }
    encoded = std::move(read).value();
  } else {
    auto read = ReadNpy(input);
    if (!read.ok()) return fail(read.status().message(), kExitFailure);
    if (read->ndim() < 1 || read->ndim() > 2) {
      return fail(input + ": expected a 1-D or 2-D array, got shape " + ShapeString(read->shape()), kExitFailure);
    }
    auto f32 = ToFloat32(read.value(), input);
    if (!f32.ok()) return fail(f32.status().message(), kExitFailure);
    values = std::move(f32).value();
    rows = values.ndim() == 2 ? values.size(0) : 1;
    cols = values.ndim() == 2 ? values.size(1) : values.size(0);
    auto n = codec.QuantizedSize(rows, cols);
    if (!n.ok()) return fail(n.status().message(), kExitFailure);
    encoded = Tensor::Empty(NpyDtype(codec.quantized_dtype()), {n.value()});
    if (Status s = codec.Encode(values.data<float>(), rows, cols, encoded.raw_data()); !s.ok()) {
      return fail(s.message(), kExitFailure);
    }
  }
  Tensor decoded = Tensor::Empty(dtype::kFloat32, {rows, cols});
  if (Status s = codec.Decode(encoded.raw_data(), rows, cols, decoded.data<float>()); !s.ok()) {
    return fail(s.message(), kExitFailure);
  }
  if (!encoded_out.empty()) {
    if (Status s = WriteNpy(encoded_out, encoded); !s.ok()) return fail(s.message(), kExitFailure);
  }
  if (!decoded_out.empty()) {
    if (Status s = WriteNpy(decoded_out, decoded); !s.ok()) return fail(s.message(), kExitFailure);
  }
  const double before = static_cast<double>(rows * cols) * 4.0, after = static_cast<double>(encoded.nbytes());
  double worst = 0, worst_rel = 0;
  if (values.numel() > 0) {
    const float* a = values.data<float>();
    const float* b = decoded.data<float>();
    for (int64_t i = 0; i < values.numel(); ++i) {
      const double e = std::fabs(static_cast<double>(a[i]) - b[i]);
      worst = std::max(worst, e);
      worst_rel = std::max(worst_rel, e / std::max(1.0, std::fabs(static_cast<double>(a[i]))));
    }
  }
  if (g.json) {
    nlohmann::json j = {{"codec", name}, {"quantized_dtype", sdk::DTypeName(codec.quantized_dtype())},
                        {"rows", rows}, {"cols", cols}, {"bytes_float32", before}, {"bytes_encoded", after},
                        {"ratio", before > 0 ? after / before : 0.0}};
    if (values.numel() > 0) {
      j["max_abs_error"] = worst;
      j["max_scaled_error"] = worst_rel;
    }
    std::cout << j.dump() << "\n";
  } else {
    std::cout << fmt::format("codec {} ({}): {} x {} float32, {} bytes -> {} bytes ({:.1f}%)", name,
                             sdk::DTypeName(codec.quantized_dtype()), rows, cols, before, after,
                             before > 0 ? 100.0 * after / before : 0.0);
    if (values.numel() > 0) {
      std::cout << fmt::format("; round trip: max |error| {:.3g}, relative to max(1, |value|) {:.3g}", worst,
                               worst_rel);
    }
    std::cout << "\n";
  }
  return kExitOk;
}

}  // namespace shardrec::cli
