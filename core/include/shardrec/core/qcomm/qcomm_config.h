// Which quantized comm codec each comm op uses (TorchRec's
// qcomm_codecs_registry: CommOp name -> QuantizedCommCodecs(forward,
// backward)). Names only: QCommCodecs (qcomm_codecs.h) finds and creates
// the codec plugins.
//
//   --qcomm pooled_embeddings_all_to_all=fp16:bf16,pooled_embeddings_reduce_scatter=fp16
//   plan JSON: {"plan": {...}, "qcomm_codecs": {"pooled_embeddings_all_to_all":
//                                               {"forward": "fp16", "backward": "bf16"}}}
//
// OP=CODEC sets both directions; OP=FWD:BWD each; `all` names every op;
// `fp32` (or `none`) is TorchRec's NoOp codec: the float32 values as they are.
#pragma once

#include <array>
#include <map>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "shardrec/core/status.h"

namespace shardrec {

// The seeds' CommOp values.
enum class CommOp { kPooledAllToAll, kPooledReduceScatter, kSequenceAllToAll };
inline constexpr std::array<CommOp, 3> kCommOps = {CommOp::kPooledAllToAll, CommOp::kPooledReduceScatter,
                                                   CommOp::kSequenceAllToAll};
// "pooled_embeddings_all_to_all", "pooled_embeddings_reduce_scatter",
// "sequence_embeddings_all_to_all".
const char* CommOpName(CommOp op);

struct CodecNames {
  std::string forward = "fp32", backward = "fp32";  // codec component names; fp32: none
  bool operator==(const CodecNames&) const = default;
};

struct QCommConfig {
  std::map<CommOp, CodecNames> ops;  // an op not here is fp32 both ways
  bool empty() const;                // every op fp32
  // Ops of `other` replace this one's.
  void Merge(const QCommConfig& other);
  // "pooled_embeddings_all_to_all=fp16:bf16, ..." ("fp32" when empty).
  std::string ToString() const;
  bool operator==(const QCommConfig&) const = default;
};

// True for the names that mean "no codec": fp32, none.
bool IsNoOpCodec(const std::string& name);

// The --qcomm flag's value. Errors name the bad entry.
StatusOr<QCommConfig> ParseQCommFlag(const std::string& text);
// A plan file's "qcomm_codecs" object; `source` names the file in errors.
StatusOr<QCommConfig> QCommFromJson(const nlohmann::json& j, const std::string& source);
nlohmann::json QCommToJson(const QCommConfig& config);

}  // namespace shardrec
