// Eviction policies named on the command line of the managed-collision
// commands (`replay-evictions`, `bench mc`): a component name ("lru") or a
// third party's library by path ("path/lib.so", "path/lib.so:NAME").
#pragma once

#include <string>
#include <vector>

#include "cli.h"

namespace shardrec::cli {

// Splits "lru, lfu,path/lib.so" at commas, trimming blanks.
std::vector<std::string> SplitPolicies(const std::string& list);

// The library files among `policies` that exist, to be loaded with the
// session's plugins (GlobalOptions::plugins): then --plugin-opt
// eviction.NAME.KEY=VALUE may name their components, which OpenSession
// checks before any policy is resolved. Missing files are left to
// ResolvePolicy, which says so.
std::vector<std::string> PolicyLibraries(const std::vector<std::string>& policies);

struct ResolvedPolicy {
  std::string given;    // as on the command line
  std::string name;     // the eviction component
  std::string library;  // the file it comes from
  OptionList options;   // its --plugin-opt eviction.NAME.* values
};

// On error prints "shardrec COMMAND: WHY" and sets *exit_code: kExitUsage
// for an unknown name or a missing file (the error lists what exists),
// kExitFailure for a library that cannot be used.
bool ResolvePolicy(const std::string& command, HostSession& session, const std::string& given, ResolvedPolicy* out,
                   int* exit_code);

}  // namespace shardrec::cli
