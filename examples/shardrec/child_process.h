// This program run again as a child with other words ("train --json ..."),
// for benches that measure whole commands side by side.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec::cli {

// Runs this program (/proc/self/exe) with `words`: its output (stdout and
// stderr together) and its exit status as pclose() returns it. Every word is
// quoted for the shell, the program's path too.
std::pair<std::string, int> RunChild(const std::vector<std::string>& words);

// The last line of `out` that starts a JSON object ("{"), or "" when none:
// what a child run with --json printed last.
std::string LastJsonLine(const std::string& out);

// The last 400 characters of `out`, for an error message.
std::string OutputTail(const std::string& out);

// `shardrec train ... --json` run as a child (`words` start with "train"):
// its steady rate, the median of the per-step samples/s after the first
// fifth of the steps (all of them when 5 or fewer; the job's figure when it
// printed none). An error carries the exit status and the output's tail.
StatusOr<double> TrainChildSamplesPerSecond(const std::vector<std::string>& words);

}  // namespace shardrec::cli
