// Checking a job's memory before allocating it: a table of 2^31 rows asks
// for 32 GiB at once, and a machine without it swaps or is killed by the OOM
// killer long after the mistake could have been named. Commands compute what
// their tables and optimizer state need and ask CheckMemory first.
#pragma once

#include <cstdint>
#include <string>

#include "shardrec/core/status.h"

namespace shardrec {

// What this process may still allocate, and where the figure comes from:
// /proc/meminfo's MemAvailable, lowered to the cgroup v2 limit's headroom
// (memory.max - memory.current) when one is set. UNAVAILABLE when neither
// can be read.
struct AvailableMemory {
  int64_t bytes = 0;
  std::string source;  // "MemAvailable in /proc/meminfo" or "the cgroup limit (...)"
};
StatusOr<AvailableMemory> ReadAvailableMemory();

// The most a job may allocate on this machine, and where the figure comes
// from. Read once per process, before ranks start, so that ranks running as
// threads all judge against the same figure.
struct MemoryLimit {
  int64_t bytes = 0;   // 0: unknown, nothing is refused
  std::string source;  // "--max-memory", "MemAvailable in /proc/meminfo", ...
};
// `max_memory` > 0 (a flag's value) is the limit, named `flag`; otherwise
// what ReadAvailableMemory() says (unknown when it cannot be read).
MemoryLimit MemoryLimitFor(int64_t max_memory, const std::string& flag);

// OK when `need` bytes fit in `limit`. RESOURCE_EXHAUSTED otherwise, naming
// `what` ("the tables and their optimizer state"), both figures and where
// the limit came from, and `flag` as the way to set it.
Status CheckMemory(int64_t need, const MemoryLimit& limit, const std::string& what, const std::string& flag);

// This process's resident memory now, and its peak since start or the last
// ResetPeakRss (which writes 5 to /proc/self/clear_refs; false when the
// kernel refuses, and the peak then counts from the start).
int64_t CurrentRssBytes();
// Resident memory now and the part of it that maps files (RssFile, and
// RssShmem for files on a tmpfs: the binary, its libraries, and any file
// mapped, such as a row file moved by io mmap; pages the kernel may drop
// and read again rather than swap), from one reading, so files <= total.
struct RssSample {
  int64_t total = 0, files = 0;
};
RssSample CurrentRssSample();
int64_t PeakRssBytes();
bool ResetPeakRss();

}  // namespace shardrec
