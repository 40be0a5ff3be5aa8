// Fuzz target: a --config file, read exactly as the host reads one
// (cli::Parse: Boost.Program_options' config-file parser, then store and
// notify), against the global options and one option of every value type
// the commands declare (integers signed and unsigned, a double, strings,
// a repeatable string, a switch). A bad file must come back as a refusal
// (Parse returns false); any exception that escapes, or a crash, is a bug.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "cli.h"
#include "fuzz_input.h"

namespace po = boost::program_options;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  shardrec::fuzz::MemFile file(data, size);
  if (!file.ok()) return 0;
  po::options_description desc("fuzz");
  shardrec::cli::GlobalOptions g;
  shardrec::cli::AddGlobalOptions(desc, &g);
  int64_t steps = 1;
  int world_size = 0;
  uint64_t seed = 0;
  double tolerance = 1e-5;
  std::string tables, sharder;
  std::vector<std::string> managed;
  bool verify = false;
  desc.add_options()
      ("steps", po::value(&steps)->default_value(steps), "")
      ("world-size", po::value(&world_size)->default_value(world_size), "")
      ("seed", po::value(&seed)->default_value(seed), "")
      ("tolerance", shardrec::cli::DoubleValue(&tolerance), "")
      ("tables", po::value(&tables), "")
      ("sharder", po::value(&sharder), "")
      ("managed-collision", po::value(&managed)->composing(), "")
      ("verify", po::bool_switch(&verify), "");
  // Refusals and help go to the streams; keep the fuzzer's output readable.
  std::ostringstream sink;
  auto* out = std::cout.rdbuf(sink.rdbuf());
  auto* err = std::cerr.rdbuf(sink.rdbuf());
  po::variables_map vm;
  int code = 0;
  const bool parsed =
      shardrec::cli::Parse("fuzz", {"--config", file.path().string()}, desc, nullptr, &vm, &code);
  std::cout.rdbuf(out);
  std::cerr.rdbuf(err);
  if (!parsed && code != shardrec::cli::kExitUsage && code != shardrec::cli::kExitOk) __builtin_trap();
  return 0;
}
