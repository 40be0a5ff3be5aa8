// Managed-collision state in a checkpoint (docs/checkpoints.md): per
// managed table, the rows of its buckets' slots ("mc.slots", int64
// [rows, width]) and the window's candidates ("mc.window", int64 [n, 4]:
// bucket, id, count, last access), each file covering the consecutive rows
// of the buckets one rank managed; and in the manifest's
// "managed_collision" key, per table: the config, the width, the round
// schedule and the counters summed over ranks. Kept per bucket, the state
// loads under any world size. Internal to core/src/checkpoint.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardrec/core/checkpoint/manifest.h"
#include "shardrec/core/managed_collision/mch_module.h"

namespace shardrec::checkpoint {

inline constexpr char kMcSlots[] = "mc.slots";
inline constexpr char kMcWindow[] = "mc.window";

// This rank's modules to files under `staging` (entries to *files, bytes
// to *bytes); returns the per-table summary this rank reports.
StatusOr<nlohmann::json> SaveManagedCollision(const std::vector<MchManagedCollisionModule>& modules,
                                              const std::filesystem::path& staging, std::vector<CheckpointFile>* files,
                                              int64_t* bytes);
// Rank 0: the manifest's "managed_collision" value from every rank's summary.
nlohmann::json MergeManagedCollision(const std::vector<nlohmann::json>& summaries);

// Checks that the checkpoint holds state for exactly these modules' tables,
// with the same configs; then reads each module's rows and candidates and
// imports them. The counters, summed over ranks when saved, go to the
// module holding bucket 0 of each table.
Status LoadManagedCollision(std::vector<MchManagedCollisionModule>& modules, const std::filesystem::path& dir,
                            const CheckpointManifest& manifest);
// The same checks alone, before any table changes.
Status CheckManagedCollision(const std::vector<MchManagedCollisionModule>& modules, const CheckpointManifest& manifest,
                             const std::string& source);

}  // namespace shardrec::checkpoint
