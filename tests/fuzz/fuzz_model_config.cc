// Fuzz target: a model config file (`train --model FILE.json`). An accepted
// config must print back to JSON that parses to the same config; one small
// enough to build must build and run a forward pass on a tiny batch (or
// refuse with an error), and its position weights must expand over a fixed
// feature list or be refused by name.
#include <string>

#include <nlohmann/json.hpp>

#include "fuzz_input.h"
#include "shardrec/core/models/rec_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return 0;
  auto c = shardrec::ModelConfig::FromJson(j, "fuzz/model.json");
  if (!c.ok()) return 0;
  const nlohmann::json printed = c->ToJson();
  auto again = shardrec::ModelConfig::FromJson(printed, "fuzz/printed.json");
  if (!again.ok() || again->ToJson() != printed) __builtin_trap();
  (void)c->PositionWeightedFeatures({"f0", "f1", "f2"});
  // Build and run only what stays small (sizes are capped, but a fuzzer's
  // 16384-wide layers would only time out).
  bool small = c->dense_in_features <= 64 && c->dcn_low_rank_dim <= 64 && c->deepfm_hidden_layer_size <= 64 &&
               c->deep_fm_dimension <= 64 && c->dcn_num_layers <= 4;
  for (int64_t s : c->dense_arch_layer_sizes) small &= s <= 64;
  for (int64_t s : c->over_arch_layer_sizes) small &= s <= 64;
  if (!small) return 0;
  const int64_t dim = c->model == "deepfm" ? 4 : c->dense_arch_layer_sizes.back();
  if (!c->Check(3, dim).ok()) return 0;
  auto model = shardrec::CreateRecModel(c.value(), 3, dim, shardrec::dense::DenseInit(1));
  if (!model.ok()) return 0;
  const shardrec::Tensor dense = shardrec::Tensor::Zeros(shardrec::dtype::kFloat32, {2, c->dense_in_features});
  const shardrec::Tensor pooled = shardrec::Tensor::Zeros(shardrec::dtype::kFloat32, {2, 3 * dim});
  auto logits = (*model)->Forward(dense, pooled);
  if (!logits.ok() || logits->numel() != 2) __builtin_trap();
  return 0;
}
