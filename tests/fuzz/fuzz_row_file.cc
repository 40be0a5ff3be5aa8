// Fuzz target: a row file (core/include/shardrec/core/cache/row_file.h), the
// on-disk tier of a cached table, which a later run opens. The input is the
// whole file. Whatever it holds, Open must not crash or read past it, and a
// file it accepts must read every row it says is written, take a write and
// sync.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "shardrec/core/cache/row_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("shardrec_fuzz_row_file_" + std::to_string(getpid()));
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  }
  const shardrec::RowFileSpec spec{64, 16, "fuzz: 4 x float32", 2};
  auto f = shardrec::RowFile::Open(path, spec);
  if (f.ok()) {
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < spec.rows; ++r) {
      if (f->Written(r)) rows.push_back(r);
    }
    std::vector<std::byte> buf(rows.size() * 16 + 16);
    if (!f->Read(rows, buf.data()).ok()) __builtin_trap();  // written rows exist in an accepted file
    const std::vector<int64_t> one = {63};
    if (!f->Write(one, buf.data()).ok() || !f->Sync().ok()) __builtin_trap();
  }
  std::error_code ec;
  std::filesystem::remove(path, ec);
  return 0;
}
