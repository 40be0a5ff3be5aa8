// The manifest of a checkpoint (docs/checkpoints.md): what a checkpoint
// directory holds, independent of the world size and plan that wrote it.
// A manifest names the step, the tables' configs, the optimizer, and every
// data file with the table, the kind of values it holds, the row and column
// range of the table it covers, its dtype, shape, size and checksum.
//
// Parsing checks everything a loader relies on before any table changes:
// the format and its version, every file's fields, ranges inside their
// table, shapes that match the ranges, paths that stay inside the
// checkpoint, and that the files of each (table, kind) tile the table
// exactly once. Errors name the manifest and the entry.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/status.h"

namespace shardrec {

// The version this build writes, and the highest it reads. A writer raises
// it whenever an older reader would misread a checkpoint; additions an older
// reader may safely ignore (a new top-level key, a kind of file it does not
// restore) keep it.
inline constexpr int64_t kCheckpointFormatVersion = 1;

// One data file: rows [row_begin, row_end) and columns [col_begin, col_end)
// of `kind` of `table`, an .npy of `dtype` ("<f4", "<i8", ...) and `shape`.
struct CheckpointFile {
  std::string path;  // relative to the checkpoint directory, '/'-separated
  std::string table;
  std::string kind;  // "weights", "adagrad.sum", "rowwise_adagrad.sum", "adam.m", "adam.v", "mc.*"
  int64_t row_begin = 0, row_end = 0;
  int64_t col_begin = 0, col_end = 0;
  std::string dtype;
  std::vector<int64_t> shape;
  int64_t bytes = 0;       // the whole .npy file
  std::string xxh3_64;     // 16 lowercase hex digits of XXH3-64 over the whole file
  // Set when the file holds not every row of [row_begin, row_end) but the
  // shape[0] rows listed, strictly ascending, in an "<i8" .npy of shape
  // [shape[0]]: what a sharder that places rows itself (a cyclic one)
  // writes. Several files (a piece's weights and state) may share one.
  struct RowIds {
    std::string path;
    int64_t bytes = 0;
    std::string xxh3_64;
  };
  std::optional<RowIds> row_ids;
};

struct CheckpointManifest {
  int64_t format_version = kCheckpointFormatVersion;
  std::string shardrec_version;
  int64_t step = 0;
  std::vector<EmbeddingTableConfig> tables;
  std::string optimizer;        // OptimizerSpec::ToString(), "none" for inference tables
  int64_t optimizer_iteration = 0;
  nlohmann::json plan;          // the plan it was written under: information only
  std::vector<CheckpointFile> files;
  nlohmann::json extra = nlohmann::json::object();  // top-level keys this build does not know, kept
};

// The columns a kind of file covers per table column: 1 for all kinds,
// except "rowwise_adagrad.sum" (one value per row and column block, so its
// files have one column and their column range names the block).
bool KindIsPerColumn(const std::string& kind);

// A kind of file whose rows are a quantized table's raw row bytes: the
// weights of an int8/int4/int2 table. Such a file covers whole rows
// (columns [0, dim)) and is [rows, table.WeightColumns()] of "|u1".
bool KindIsPackedRows(const EmbeddingTableConfig& table, const std::string& kind);

// The values per row a file of `kind` holds for table columns [c0, c1):
// the packed row's bytes, one (row-wise Adagrad), or c1 - c0.
int64_t FileWidth(const EmbeddingTableConfig& table, const std::string& kind, int64_t c0, int64_t c1);

// The kinds of files a table trained with `optimizer` (SR_OPTIMIZER_*)
// needs: "weights" and the optimizer's state kinds.
std::vector<std::string> CheckpointKinds(int32_t optimizer);

// The .npy dtype a kind of file of `table` is stored in: "<f4" for
// optimizer state; weights in the table's type ("<u2" holds bfloat16's
// bits, "|u1" a quantized table's row bytes).
std::string CheckpointDtype(const EmbeddingTableConfig& table, const std::string& kind);

nlohmann::json CheckpointFileToJson(const CheckpointFile& file);

StatusOr<CheckpointManifest> ParseCheckpointManifest(const std::string& json_text, const std::string& source);
StatusOr<CheckpointManifest> LoadCheckpointManifest(const std::filesystem::path& dir);
std::string CheckpointManifestToJson(const CheckpointManifest& manifest);

}  // namespace shardrec
