// Saving and loading checkpoints (docs/checkpoints.md). A checkpoint does
// not depend on the plan or world size that wrote it: it loads under any
// plan, any world size and any sharder, self-routing plugins included.
//
// Saving is collective and bounded: every rank streams the rows it owns
// (data-parallel replicas once, by one rank) to .npy files in pieces of
// at most `chunk_bytes` (and 1 MiB), hashing as it writes, and fsyncs them; rank 0 then writes
// the manifest and publishes the directory with one rename. Until that
// rename the checkpoint is a hidden ".partial.PID-step-N" directory that
// nothing loads; a crash at any moment leaves the previous checkpoints as
// they were.
//
// Loading is collective too: the ranks first check every file they will
// read (size, header, XXH3 checksum: the files are shared out so each is
// read once) and agree, so a bad checkpoint is refused before any table
// changes; then each rank reads only the rows and columns its shards need,
// in chunks, with pread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardrec/core/checkpoint/manifest.h"
#include "shardrec/core/dense/dense_optimizer.h"
#include "shardrec/core/managed_collision/managed_collision_collection.h"
#include "shardrec/core/modules/embedding_tables.h"
#include "shardrec/core/modules/sharded_tables.h"

namespace shardrec {

// Rows are saved and loaded in pieces of at most this many bytes per rank,
// whatever chunk_bytes says: larger pieces leave the CPU cache between the
// kernel's copy, the hash and the file, and are slower. A smaller
// chunk_bytes bounds a save's or load's extra memory further.
inline constexpr int64_t kCheckpointPieceBytes = int64_t{1} << 20;
inline constexpr int64_t kDefaultCheckpointChunkBytes = kCheckpointPieceBytes;

// A model's dense parameters and their optimizer, replicated on every rank:
// saved once, by rank 0; loaded by every rank (docs/checkpoints.md).
struct DenseCheckpointState {
  std::vector<dense::Parameter*> params;
  dense::DenseOptimizer* optimizer = nullptr;
};

struct CheckpointSaveRequest {
  std::filesystem::path root;     // the run's checkpoint directory; the checkpoint is root/step-NNNNNNNN
  int64_t step = 0;
  int64_t optimizer_iteration = 0;
  nlohmann::json extra = nlohmann::json::object();  // more top-level manifest keys (managed collision, ...)
  int keep_last = 0;              // > 0: afterwards remove all but the newest keep_last published checkpoints
  int64_t chunk_bytes = kDefaultCheckpointChunkBytes;
  const DenseCheckpointState* dense = nullptr;  // a model's dense half too
};

struct SavedCheckpoint {
  std::filesystem::path dir;
  int64_t bytes = 0;          // every rank's files together
  int64_t bytes_here = 0;     // this rank's
  std::vector<std::string> removed;  // by keep_last
};

// Collective over the tables' group. With `mc`, the managed-collision
// state of its tables too (slot maps, eviction metadata, the window,
// the round schedule, the counters), so that remapping resumes exactly.
StatusOr<SavedCheckpoint> SaveCheckpoint(const ShardedTables& tables, const CheckpointSaveRequest& request,
                                         const ShardedManagedCollisionCollection* mc = nullptr);

struct CheckpointLoadRequest {
  std::filesystem::path dir;  // a checkpoint, or a run's directory (its newest published checkpoint)
  // Load the weights only, leaving the optimizer state as it is, even when
  // the checkpoint's optimizer differs from the tables'.
  bool reset_optimizer = false;
  bool verify_checksums = true;
  // true: every file is hashed before any table changes, so a damaged
  // checkpoint leaves the tables as they were (two reads of every byte).
  // false, for tables the caller throws away when the load fails (a fresh
  // process resuming): sizes and headers are still checked first, but a
  // file one rank reads whole and in order is hashed as it is read, and only
  // the others get a pass of their own, after loading (one read of every
  // byte). A damaged file is named either way; here the tables then hold a
  // mix of loaded and earlier rows.
  bool verify_before_loading = true;
  int64_t chunk_bytes = kDefaultCheckpointChunkBytes;
  // Tables of the checkpoint these tables lack are skipped rather than
  // refused (a caller loading its pooled and sequence tables separately).
  bool allow_extra_tables = false;
  // A model's dense half too: the checkpoint must hold the same parameters
  // (checked with the rest, before anything changes).
  const DenseCheckpointState* dense = nullptr;
};

struct LoadedCheckpoint {
  std::filesystem::path dir;  // the checkpoint loaded
  CheckpointManifest manifest;
  bool optimizer_state_loaded = false;
  int64_t bytes_read_here = 0;   // payload this rank read for its tables
  int64_t bytes_checked_here = 0;  // bytes this rank hashed
};

// Collective over the tables' group. With `mc`, its managed-collision
// state too (the checkpoint must hold it, for the same configs), under
// any world size: the state is kept per bucket.
StatusOr<LoadedCheckpoint> LoadCheckpoint(const ShardedTables& tables, const CheckpointLoadRequest& request,
                                          ShardedManagedCollisionCollection* mc = nullptr);
// Unsharded tables, in this process alone (and an unsharded collection).
StatusOr<LoadedCheckpoint> LoadCheckpoint(const EmbeddingTables& tables, const CheckpointLoadRequest& request,
                                          ManagedCollisionCollection* mc = nullptr);

// The tables a run would load `manifest` into must be the checkpoint's:
// the same names, rows, dim and dtype (errors name the table and what
// differs).
Status CheckTablesMatch(const CheckpointManifest& manifest, const std::vector<EmbeddingTableConfig>& tables,
                        const std::string& source, bool allow_extra_tables = false);

// Checks one file of a checkpoint against its manifest entry: its size,
// its .npy header, and (with `checksum`) its XXH3, and the same for its
// row-ids file; bytes hashed are added to *hashed. Errors name the file.
Status VerifyCheckpointFile(const std::filesystem::path& dir, const CheckpointFile& file, bool checksum,
                            int64_t* hashed = nullptr);

}  // namespace shardrec
