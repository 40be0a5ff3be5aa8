// A main() for the fuzz targets in ordinary builds (GCC, the sanitizer
// build): runs every file of the given corpus directories (or files)
// through LLVMFuzzerTestOneInput once, so the seed corpus and every input
// that once crashed are a regression test in CTest. Under SHARDREC_FUZZ the
// same targets link libFuzzer instead (scripts/fuzz.sh).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "fuzz_input.h"

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path p = argv[i];
    if (fs::is_directory(p)) {
      for (const auto& e : fs::recursive_directory_iterator(p)) {
        if (e.is_regular_file()) inputs.push_back(e.path());
      }
    } else {
      inputs.push_back(p);
    }
  }
  for (const fs::path& p : inputs) {
    std::ifstream in(p, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
  // Reaching here means no input crashed (a crash aborts under the sanitizers).
  std::printf("fuzz replay: %zu passed, 0 failed\n", inputs.size());
  return inputs.empty() ? 1 : 0;
}
