// A run's checkpoint directory (directory.h).
#include "shardrec/core/checkpoint/directory.h"

#include <algorithm>

#include <fmt/format.h>

#include "shardrec/core/io/leftovers.h"

namespace shardrec {

namespace fs = std::filesystem;

namespace {
// "step-" then digits only: the step, else -1.
int64_t StepOf(const std::string& name, size_t start) {
  if (name.compare(start, 5, "step-") != 0 || name.size() == start + 5 || name.size() > start + 5 + 18) return -1;
  int64_t step = 0;
  for (size_t i = start + 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}
}  // namespace

std::string CheckpointName(int64_t step) { return fmt::format("step-{:08d}", step); }

std::vector<CheckpointEntry> ListCheckpoints(const fs::path& root) {
  std::vector<CheckpointEntry> published, other;
  std::error_code ec;
  for (fs::directory_iterator it(root, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    CheckpointEntry e;
    e.name = name;
    e.path = it->path();
    if (name.rfind(kPartialCheckpointPrefix, 0) == 0) {
      // .partial.PID-step-N: a save that has not published (yet).
      const size_t dash = name.find('-', sizeof kPartialCheckpointPrefix - 1);
      const std::string pid = name.substr(sizeof kPartialCheckpointPrefix - 1,
                                          dash == std::string::npos ? std::string::npos : dash - (sizeof kPartialCheckpointPrefix - 1));
      if (dash != std::string::npos) e.step = StepOf(name, dash + 1);
      long writer = 0;
      try {
        writer = std::stol(pid);
      } catch (...) {
      }
      e.note = writer > 0 && ProcessIsGone(static_cast<pid_t>(writer))
                   ? fmt::format("not a checkpoint: a save that never finished (its writer, PID {}, is gone); the next "
                                 "save here removes it", writer)
                   : fmt::format("not a checkpoint (yet): a save in progress by PID {}", pid);
      other.push_back(std::move(e));
      continue;
    }
    e.step = StepOf(name, 0);
    if (e.step < 0) continue;  // not ours
    if (!it->is_directory(ec)) {
      e.note = "not a checkpoint: not a directory";
    } else if (!fs::exists(it->path() / "manifest.json", ec)) {
      e.note = "not a checkpoint: no manifest.json";
    } else {
      e.published = true;
    }
    (e.published ? published : other).push_back(std::move(e));
  }
  auto by_step = [](const CheckpointEntry& a, const CheckpointEntry& b) {
    return a.step != b.step ? a.step < b.step : a.name < b.name;
  };
  std::sort(published.begin(), published.end(), by_step);
  std::sort(other.begin(), other.end(), by_step);
  published.insert(published.end(), other.begin(), other.end());
  return published;
}

StatusOr<fs::path> ResolveCheckpoint(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return Status(SR_NOT_FOUND, dir.string() + ": no such directory");
  if (fs::exists(dir / "manifest.json", ec)) return dir;
  fs::path newest;
  std::string skipped;
  for (const CheckpointEntry& e : ListCheckpoints(dir)) {
    if (e.published) newest = e.path;
    else skipped += "\n  " + e.name + ": " + e.note;
  }
  if (!newest.empty()) return newest;
  return Status(SR_NOT_FOUND, dir.string() + ": neither a checkpoint (no manifest.json) nor a directory of published "
                                             "checkpoints (step-NNNNNNNN/manifest.json)" + skipped);
}

Status PruneCheckpoints(const fs::path& root, int keep, std::vector<std::string>* removed) {
  if (keep <= 0) return Status::Ok();
  std::vector<CheckpointEntry> published;
  for (auto& e : ListCheckpoints(root)) {
    if (e.published) published.push_back(std::move(e));
  }
  for (size_t i = 0; i + static_cast<size_t>(keep) < published.size(); ++i) {
    // The manifest goes first, so a removal cut short leaves a directory
    // that is no longer a checkpoint rather than one with files missing.
    std::error_code ec;
    fs::remove(published[i].path / "manifest.json", ec);
    if (!ec) fs::remove_all(published[i].path, ec);
    if (ec) return InternalError(published[i].path.string() + ": cannot remove (--keep-last): " + ec.message());
    if (removed) removed->push_back(published[i].name);
  }
  return Status::Ok();
}

}  // namespace shardrec
