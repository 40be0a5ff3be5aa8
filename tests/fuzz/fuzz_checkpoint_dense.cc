// Fuzz target: the "dense" entry of a checkpoint manifest (a --model run's
// dense parameters and optimizer state). The input is the manifest's extra
// JSON; the files it may name are a real small model's, saved once into a
// temporary directory. Whatever the entry says, checking it must not crash,
// read outside the checkpoint's dense/ directory or accept files of the
// wrong shape; an entry that passes the check must load.
#include <unistd.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "checkpoint/dense_state.h"
#include "fuzz_input.h"
#include "shardrec/core/dense/dense_optimizer.h"

namespace {

struct Saved {
  std::filesystem::path dir;
  std::vector<shardrec::dense::Parameter> params;
  shardrec::dense::DenseOptimizer optimizer{shardrec::dense::DenseOptimizerSpec::Parse("adam").value()};

  Saved() {
    dir = std::filesystem::temp_directory_path() / ("shardrec_fuzz_dense_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir);
    params.push_back(shardrec::dense::MakeParameter("a.weight", {3, 2}));
    params.push_back(shardrec::dense::MakeParameter("a.bias", {3}));
    int64_t bytes = 0;
    auto entry = shardrec::checkpoint::SaveDense(State(), dir, &bytes);
    if (!entry.ok()) __builtin_trap();
  }
  ~Saved() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
  shardrec::DenseCheckpointState State() { return {{&params[0], &params[1]}, &optimizer}; }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Saved saved;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json extra = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (extra.is_discarded()) return 0;
  for (bool reset : {false, true}) {
    const auto state = saved.State();
    if (!shardrec::checkpoint::CheckDense(state, extra, saved.dir, reset, "fuzz/manifest.json").ok()) continue;
    if (!shardrec::checkpoint::LoadDense(state, extra, saved.dir, reset).ok()) __builtin_trap();
    for (const auto* p : state.params) {
      if (p->value.shape() != (p->name == "a.weight" ? std::vector<int64_t>{3, 2} : std::vector<int64_t>{3})) {
        __builtin_trap();
      }
    }
  }
  return 0;
}
