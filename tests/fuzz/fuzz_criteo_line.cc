// Fuzz target: Criteo click-log text (issue 19). The bytes are parsed as
// one line (an accepted row must print back as a line that parses to the
// same row) and read as a whole TSV file through ClickLogReader, stopping
// at bad lines and skipping them: no crash, every batch well formed, ids
// inside their tables.
#include <string>

#include <fmt/format.h>

#include "fuzz_input.h"
#include "shardrec/core/data/click_log_reader.h"
#include "shardrec/core/data/planted_click_log.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardrec::data;
  const std::string text(reinterpret_cast<const char*>(data), size);
  CriteoRow row;
  if (ParseCriteoLine(text, &row).ok()) {
    CriteoRow again;
    const std::string printed = PlantedClickModel::Line(row, std::array<bool, kCriteoFields>{});
    if (!ParseCriteoLine(printed, &again).ok() || again.label != row.label || again.dense != row.dense ||
        again.sparse != row.sparse) {
      __builtin_trap();
    }
  }
  shardrec::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  auto spec = ClickLogSpec::Parse("criteo:" + file.path().string());
  if (!spec.ok()) return 0;
  for (bool skip : {false, true}) {
    ClickLogOptions o;
    o.batch = 2;
    o.skip_bad_lines = skip;
    o.prefetch = 0;
    o.threads = 1;
    for (int f = 0; f < kCriteoSparse; ++f) {
      o.features.push_back(fmt::format("f{}", f));
      o.num_embeddings.push_back(7 + f);
    }
    auto reader = ClickLogReader::Open(spec.value(), o);
    if (!reader.ok()) continue;
    for (int guard = 0; guard < 1000; ++guard) {
      auto b = (*reader)->Next();
      if (!b.ok() || !b->has_value()) break;
      const ClickBatch& batch = **b;
      if (batch.dense.size(0) != batch.labels.numel() || batch.dense.size(0) + batch.bad_lines != 2) __builtin_trap();
      for (size_t i = 0; i < batch.sparse.values().size(); ++i) {
        const int64_t rows = 7 + static_cast<int64_t>(i) / batch.dense.size(0);
        if (batch.sparse.values()[i] < 0 || batch.sparse.values()[i] >= rows) __builtin_trap();
      }
    }
  }
  return 0;
}
