// Running several ranks on this host without a rendezvous from the user:
// a throwaway file rendezvous, a fresh run id, and re-running a command as
// N local ranks (what `torchrun --standalone` does). Used by `shardrec
// launch` on one node and by commands given `--world-size N` outside any
// launcher.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec::cli {

// A fresh directory under $TMPDIR (or /tmp) for a file rendezvous,
// shardrec-rdzv-PID-XXXXXX, removed with everything in it when this object
// goes. Create() first removes those whose PID is gone (a killed launcher's).
// Not copyable.
class TempRendezvousDir {
 public:
  static StatusOr<TempRendezvousDir> Create();
  TempRendezvousDir(TempRendezvousDir&& other) noexcept : dir_(std::move(other.dir_)) { other.dir_.clear(); }
  TempRendezvousDir& operator=(TempRendezvousDir&&) = delete;
  ~TempRendezvousDir();

  const std::string& dir() const { return dir_; }
  std::string rdzv() const { return "file:" + dir_; }

 private:
  explicit TempRendezvousDir(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

// "run-<pid>-<16 random hex digits>": unique enough that two jobs sharing a
// rendezvous never meet by accident.
std::string NewRunId();

// A host command given `--comm gloo --world-size N` outside any launcher
// (ReadDistEnv() says not launched) re-runs itself as N local ranks with a
// file rendezvous in a fresh temp directory, the way `torchrun --standalone`
// does: this program (/proc/self/exe) with `command_words` ("bench comm")
// split at spaces, then `command_args`, through LaunchLocalRanks.
// Returns the exit code the command must return when it spawned (the ranks'
// outcome, or kExitUsage after printing the error of a malformed launcher
// environment), std::nullopt when the caller should run in-process
// (world_size <= 1, or already one rank of a launched job).
std::optional<int> SpawnStandaloneRanks(const std::string& command_words, const std::vector<std::string>& command_args,
                                        int world_size);

}  // namespace shardrec::cli
