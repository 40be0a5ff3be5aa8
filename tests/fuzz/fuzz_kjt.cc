// Fuzz target: a batch as `shardrec embed --batch DIR` reads it: keys.txt
// (the text before the first NUL) through ReadKeysFile, then lengths,
// values, optional weights and stride_per_key decoded from the rest and
// validated by KeyedJaggedTensor::FromLengths. A KJT it accepts is then
// sliced, selected and concatenated, which must not fail on valid input.
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "shardrec/core/io/batch_dir.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"

namespace {

// Little-endian int64 from the next 8 (or fewer) bytes.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool done() const { return p_ >= end_; }
  int64_t Int() {
    uint64_t v = 0;
    for (int i = 0; i < 8 && p_ < end_; ++i) v |= static_cast<uint64_t>(*p_++) << (8 * i);
    return static_cast<int64_t>(v);
  }
  uint8_t Byte() { return p_ < end_ ? *p_++ : 0; }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto* nul = static_cast<const uint8_t*>(std::memchr(data, 0, size));
  const size_t text_size = nul ? static_cast<size_t>(nul - data) : size;
  shardrec::fuzz::MemFile keys_file(data, text_size);
  if (!keys_file.ok()) return 0;
  auto keys = shardrec::ReadKeysFile(keys_file.path());
  if (!keys.ok() || keys->empty() || keys->size() > 64) return 0;
  Reader in(data + text_size + (nul ? 1 : 0), size - text_size - (nul ? 1 : 0));
  const uint8_t flags = in.Byte();
  const size_t num_lengths = in.Byte();
  const size_t num_values = in.Byte();
  std::vector<int64_t> lengths, values, strides;
  for (size_t i = 0; i < num_lengths; ++i) lengths.push_back((flags & 8) ? in.Int() : in.Byte() % 5);
  for (size_t i = 0; i < num_values; ++i) values.push_back(in.Int());
  std::optional<std::vector<float>> weights;
  if (flags & 1) weights.emplace(values.size(), 0.5f);
  if (flags & 2) {
    for (size_t k = 0; k < keys->size(); ++k) strides.push_back((flags & 16) ? in.Int() : in.Byte() % 9);
  }
  auto kjt = shardrec::KeyedJaggedTensor::FromLengths(*keys, values, lengths, weights, strides);
  if (!kjt.ok()) return 0;
  if (!kjt->Select({keys->front()}).ok()) __builtin_trap();
  if (!shardrec::KeyedJaggedTensor::ConcatSamples({*kjt, *kjt}).ok()) __builtin_trap();
  (void)kjt->length_per_key();
  return 0;
}
