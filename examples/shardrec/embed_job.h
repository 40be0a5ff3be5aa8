// What `shardrec embed` computes, however it computes it (unsharded in
// this process, or sharded across ranks), and how it is written: the
// pooled KeyedTensor, the sequence features, and after --grad every table
// and its optimizer state. Both paths hand the same EmbedOutputs to
// WriteEmbedOutputs, so a sharded run writes exactly the files of an
// unsharded one.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cli.h"
#include "comm_job.h"
#include "shardrec/core/checkpoint/checkpoint.h"
#include "shardrec/core/modules/embedding_tables.h"
#include "shardrec/core/resources/memory.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"
#include "shardrec/core/sparse/keyed_tensor.h"

namespace shardrec::cli {

struct EmbedFlags {
  std::string tables, weights, state, batch, out, grad, optimizer, kernel = "cpu", bounds = "fatal";
  uint64_t init_seed = 0;
  int64_t iteration = 1;
  std::string plan, sharder;  // sharded runs
  std::optional<PlanSpec> planned;  // --planner's plan, made before the ranks start
  std::string max_memory;     // --max-memory as given
  std::string from_checkpoint;
  bool reset_optimizer = false;
  MemoryLimit memory_limit;   // from it, or the memory available; read once before ranks start
};

// --from-checkpoint as a load request (both embed paths).
CheckpointLoadRequest CheckpointRequestFor(const EmbedFlags& f);

struct TableFiles {
  std::string name;
  Tensor weights;  // float32
  Tensor state;    // float32 [rows, state_dim], may have 0 columns
};

struct EmbedOutputs {
  std::optional<KeyedTensor> pooled;
  std::map<std::string, JaggedTensor> sequence;
  std::vector<TableFiles> updated;  // after --grad
  int64_t invalid = 0;
};

// Writes OUT/... and prints the summary (or --json). `start` is when the
// command began. Returns the exit code.
int WriteEmbedOutputs(const EmbedOutputs& r, const EmbedFlags& f, const GlobalOptions& g, const KeyedJaggedTensor& kjt,
                      const EmbeddingModuleOptions& options, double seconds, const std::string& how);

// The sharded run: `kjt` split into contiguous sample ranges, one per rank;
// rank 0 gathers the results and writes them.
int RunShardedEmbed(const std::vector<std::string>& args, const EmbedFlags& f, const GlobalOptions& g,
                    const CommFlags& comm, const HostSession& session, const std::vector<EmbeddingTableConfig>& tables,
                    const EmbeddingModuleOptions& options, const KeyedJaggedTensor& kjt, bool has_grad);

// Reading --weights / --state files: DIR/NAME.npy [rows, dim] (float32, or
// float16 for fp16 tables) as float32, and DIR/NAME.state.npy if present.
StatusOr<Tensor> ReadWeightsFile(const std::filesystem::path& dir, const EmbeddingTableConfig& config);
StatusOr<std::optional<Tensor>> ReadStateFile(const std::filesystem::path& dir, const EmbeddingTableConfig& config);

}  // namespace shardrec::cli
