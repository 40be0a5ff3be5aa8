// Local ranks without a user-given rendezvous (see standalone.h).
#include "standalone.h"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>

#include "cli.h"
#include "shardrec/core/io/leftovers.h"
#include "shardrec/core/launch/dist_env.h"
#include "shardrec/core/launch/process_launcher.h"

namespace shardrec::cli {

StatusOr<TempRendezvousDir> TempRendezvousDir::Create() {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string root = tmpdir != nullptr && *tmpdir ? tmpdir : "/tmp";
  // The PID in the name lets the next run remove the directory of a
  // launcher that was killed (SIGKILL leaves it no chance to).
  RemoveLeftoversOfDeadProcesses(root, "shardrec-rdzv-");
  std::string pattern = root + "/shardrec-rdzv-" + std::to_string(getpid()) + "-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) {
    return InternalError("cannot make a rendezvous directory '" + pattern + "': " + std::strerror(errno));
  }
  return TempRendezvousDir(pattern);
}

TempRendezvousDir::~TempRendezvousDir() {
  if (dir_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::string NewRunId() {
  std::random_device rd;
  const uint64_t bits = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(bits));
  return "run-" + std::to_string(getpid()) + "-" + hex;
}

std::optional<int> SpawnStandaloneRanks(const std::string& command_words, const std::vector<std::string>& command_args,
                                        int world_size) {
  if (world_size <= 1) return std::nullopt;
  const std::string who = "shardrec " + command_words;
  StatusOr<DistEnv> env = ReadDistEnv();
  if (!env.ok()) {
    std::cerr << who << ": " << env.status().message() << "\n";
    return kExitUsage;
  }
  if (env->launched()) return std::nullopt;

  std::error_code ec;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  LaunchSpec spec;
  spec.command.push_back(ec ? "/proc/self/exe" : self.string());
  for (size_t start = 0, end; start < command_words.size(); start = end + 1) {
    end = command_words.find(' ', start);
    if (end == std::string::npos) end = command_words.size();
    if (end > start) spec.command.push_back(command_words.substr(start, end - start));
  }
  spec.command.insert(spec.command.end(), command_args.begin(), command_args.end());
  spec.nproc_per_node = world_size;
  StatusOr<TempRendezvousDir> rdzv = TempRendezvousDir::Create();
  if (!rdzv.ok()) {
    std::cerr << who << ": " << rdzv.status().message() << "\n";
    return kExitFailure;
  }
  spec.rdzv = rdzv->rdzv();
  spec.run_id = NewRunId();
  spec.log = [&who](const std::string& line) { std::cerr << who << ": " << line << std::endl; };
  StatusOr<LaunchResult> result = LaunchLocalRanks(spec);
  if (!result.ok()) {
    std::cerr << who << ": " << result.status().message() << "\n";
    return kExitFailure;
  }
  return result->exit_code;
}

}  // namespace shardrec::cli
