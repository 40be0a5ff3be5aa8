// This program run again as a child with other words ("train --json ..."),
// for benches that measure whole commands side by side.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace shardrec::cli {

// Runs this program (/proc/self/exe) with `words`: its output (stdout and
// stderr together) and its exit status as pclose() returns it. Every word is
// quoted for the shell, the program's path too.
std::pair<std::string, int> RunChild(const std::vector<std::string>& words);

// The last line of `out` that starts a JSON object ("{"), or "" when none:
// what a child run with --json printed last.
std::string LastJsonLine(const std::string& out);

}  // namespace shardrec::cli
