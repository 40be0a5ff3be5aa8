// Fuzz target: a checkpoint's manifest.json parser. An accepted manifest
// must print back as one that parses to the same text, and its files must
// stay inside their tables.
#include <string>

#include "fuzz_input.h"
#include "shardrec/core/checkpoint/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto m = shardrec::ParseCheckpointManifest(text, "fuzz/manifest.json");
  if (!m.ok()) return 0;
  for (const auto& f : m->files) {
    if (f.row_begin < 0 || f.row_begin >= f.row_end || f.col_begin < 0 || f.col_begin >= f.col_end) __builtin_trap();
    if (f.path.empty() || f.path[0] == '/' || f.path.find("..") == 0) __builtin_trap();
  }
  const std::string printed = shardrec::CheckpointManifestToJson(m.value());
  auto again = shardrec::ParseCheckpointManifest(printed, "fuzz/printed.json");
  if (!again.ok() || shardrec::CheckpointManifestToJson(again.value()) != printed) __builtin_trap();
  return 0;
}
