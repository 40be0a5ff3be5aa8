// A run's checkpoint directory: published checkpoints "step-NNNNNNNN"
// (8 or more digits, so names sort by step) and the hidden ".partial.PID-
// step-NNNNNNNN" directories of saves in progress or interrupted. Only a
// published directory holding manifest.json is a checkpoint; everything
// else is ignored by loading and reported by `shardrec checkpoint inspect`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "shardrec/core/status.h"

namespace shardrec {

std::string CheckpointName(int64_t step);  // "step-00000100"
inline constexpr char kPartialCheckpointPrefix[] = ".partial.";

struct CheckpointEntry {
  std::string name;
  std::filesystem::path path;
  int64_t step = -1;
  bool published = false;  // a step-N directory with a manifest.json
  std::string note;        // why it is not a checkpoint, for people
};

// Every step-N and .partial.* entry of `root`, published ones by step, then the rest.
std::vector<CheckpointEntry> ListCheckpoints(const std::filesystem::path& root);

// `dir` itself when it holds manifest.json, else the newest published
// checkpoint in it. NOT_FOUND says what was there instead.
StatusOr<std::filesystem::path> ResolveCheckpoint(const std::filesystem::path& dir);

// Removes all but the newest `keep` published checkpoints of `root`; the
// removed names go to *removed.
Status PruneCheckpoints(const std::filesystem::path& root, int keep, std::vector<std::string>* removed);

}  // namespace shardrec
