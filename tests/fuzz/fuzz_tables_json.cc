// Fuzz target: the tables file (JSON) parser and its validation. Tables it
// accepts must print (TablesToJson) as a file it accepts again, unchanged.
#include <string>

#include "fuzz_input.h"
#include "shardrec/core/modules/embedding_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto tables = shardrec::ParseTablesJson(text, "fuzz.json");
  if (!tables.ok()) return 0;
  const std::string again = shardrec::TablesToJson(tables.value());
  auto reparsed = shardrec::ParseTablesJson(again, "round trip");
  if (!reparsed.ok() || shardrec::TablesToJson(reparsed.value()) != again) __builtin_trap();
  return 0;
}
