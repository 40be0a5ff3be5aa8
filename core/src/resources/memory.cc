#include "shardrec/core/resources/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string_view>

#include "shardrec/core/text/byte_size.h"

namespace shardrec {

namespace {
// A "Key:   N kB" line of /proc/self/status, in KiB (0 when absent).
// Several such lines from one reading of the file, in the keys' order.
template <size_t N>
std::array<int64_t, N> StatusKiBs(const std::array<std::string_view, N>& keys) {
  std::array<int64_t, N> out{};
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    for (size_t k = 0; k < N; ++k) {
      if (line.rfind(keys[k], 0) == 0) out[k] = std::atoll(line.c_str() + keys[k].size());
    }
  }
  return out;
}
int64_t StatusKiB(std::string_view key) { return StatusKiBs<1>({key})[0]; }
}  // namespace

namespace {

// The first integer of a one-line file, or -1 ("max" and unreadable files).
int64_t ReadInteger(const std::string& path) {
  std::ifstream in(path);
  int64_t v = -1;
  if (!(in >> v)) return -1;
  return v;
}

// This process's cgroup v2 directory, from /proc/self/cgroup's "0::/PATH".
std::string CgroupDir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("0::", 0) == 0) return "/sys/fs/cgroup" + line.substr(3);
  }
  return "";
}

}  // namespace

StatusOr<AvailableMemory> ReadAvailableMemory() {
  AvailableMemory out;
  out.bytes = -1;
  std::ifstream meminfo("/proc/meminfo");
  std::string line;
  while (std::getline(meminfo, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    int64_t kib = 0;
    if (fields >> key >> kib >> unit && key == "MemAvailable:" && kib >= 0 && kib < (int64_t{1} << 50)) {
      out.bytes = kib * 1024;
      out.source = "MemAvailable in /proc/meminfo";
    }
  }
  if (const std::string dir = CgroupDir(); !dir.empty()) {
    const int64_t max = ReadInteger(dir + "/memory.max");
    const int64_t current = ReadInteger(dir + "/memory.current");
    if (max > 0 && current >= 0) {
      const int64_t headroom = max > current ? max - current : 0;
      if (out.bytes < 0 || headroom < out.bytes) {
        out.bytes = headroom;
        out.source = fmt::format("the cgroup limit ({} memory.max, {} in use)", FormatByteSize(max),
                                 FormatByteSize(current));
      }
    }
  }
  if (out.bytes < 0) return UnavailableError("cannot read the available memory (no /proc/meminfo MemAvailable)");
  return out;
}

MemoryLimit MemoryLimitFor(int64_t max_memory, const std::string& flag) {
  if (max_memory > 0) return MemoryLimit{max_memory, flag};
  auto available = ReadAvailableMemory();
  if (!available.ok()) return MemoryLimit{};
  return MemoryLimit{available->bytes, available->source};
}

Status CheckMemory(int64_t need, const MemoryLimit& limit, const std::string& what, const std::string& flag) {
  if (limit.bytes <= 0 || need <= limit.bytes) return Status::Ok();
  if (limit.source == flag) {
    return Status(SR_RESOURCE_EXHAUSTED,
                  fmt::format("{} need {} ({} bytes), more than {} {}; nothing was allocated", what,
                              FormatByteSize(need), need, flag, FormatByteSize(limit.bytes)));
  }
  return Status(SR_RESOURCE_EXHAUSTED,
                fmt::format("{} need {} ({} bytes), more than the {} available here ({}); nothing was allocated. "
                            "Use smaller tables or more machines, or set the limit yourself with {} SIZE",
                            what, FormatByteSize(need), need, FormatByteSize(limit.bytes), limit.source, flag));
}

int64_t CurrentRssBytes() { return StatusKiB("VmRSS:") * 1024; }
RssSample CurrentRssSample() {
  const auto [rss, file, shmem] = StatusKiBs<3>({"VmRSS:", "RssFile:", "RssShmem:"});
  return {rss * 1024, std::min(file + shmem, rss) * 1024};
}
int64_t PeakRssBytes() { return StatusKiB("VmHWM:") * 1024; }

bool ResetPeakRss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

}  // namespace shardrec
