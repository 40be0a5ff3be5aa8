// Files and directories a killed process leaves behind (a temporary being
// written, a staging directory, a rendezvous directory) carry its PID in
// their names, so that the next run can tell a dead writer's leftovers from
// a live writer's work in progress and remove only the former.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace shardrec {

// True when no process `pid` exists (kill(pid, 0) fails with ESRCH).
bool ProcessIsGone(pid_t pid);

// Removes, with everything in them, the entries of `dir` named
// `prefix` + PID, optionally followed by `-` and anything, whose PID is
// gone and which this user owns. Returns how many it removed. Errors
// (an unreadable directory, a busy file) are ignored: this is tidying,
// never a reason to fail.
int RemoveLeftoversOfDeadProcesses(const std::filesystem::path& dir, const std::string& prefix);

}  // namespace shardrec
