// A minimal host command for testing SpawnStandaloneRanks (examples/shardrec/
// standalone.h) without a comm backend:
//   standalone_probe probe OUT_DIR WORLD_SIZE
// re-runs itself as WORLD_SIZE ranks when no launcher started it; each rank
// (or the single in-process run) writes OUT_DIR/rank.<RANK> with
// "RANK WORLD_SIZE SOURCE RDZV RUN_ID" and exits 0, or 4 when
// PROBE_FAIL_RANK names its rank.
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "shardrec/core/launch/dist_env.h"
#include "standalone.h"

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() != 3 || args[0] != "probe") {
    std::cerr << "usage: standalone_probe probe OUT_DIR WORLD_SIZE\n";
    return 2;
  }
  const int world_size = std::atoi(args[2].c_str());
  if (std::optional<int> code = shardrec::cli::SpawnStandaloneRanks("probe", {args[1], args[2]}, world_size)) {
    return *code;
  }
  shardrec::StatusOr<shardrec::DistEnv> env = shardrec::ReadDistEnv();
  if (!env.ok()) {
    std::cerr << env.status().ToString() << "\n";
    return 3;
  }
  std::ofstream(args[1] + "/rank." + std::to_string(env->rank))
      << env->rank << " " << env->world_size << " " << (env->launched() ? env->source : "none") << " " << env->rdzv
      << " " << env->run_id << "\n";
  const char* fail = std::getenv("PROBE_FAIL_RANK");
  return fail != nullptr && std::atoi(fail) == env->rank ? 4 : 0;
}
