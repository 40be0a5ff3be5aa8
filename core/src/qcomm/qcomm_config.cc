// QCommConfig (qcomm_config.h): the --qcomm flag and the plan file's
// "qcomm_codecs", both checked before any codec is looked up.
#include "shardrec/core/qcomm/qcomm_config.h"

#include <regex>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace shardrec {
namespace {

StatusOr<std::vector<CommOp>> OpsNamed(const std::string& name, const std::string& where) {
  if (name == "all") return std::vector<CommOp>(kCommOps.begin(), kCommOps.end());
  for (CommOp op : kCommOps) {
    if (name == CommOpName(op)) return std::vector<CommOp>{op};
  }
  return InvalidArgumentError(fmt::format("{}: unknown comm op '{}' (expected pooled_embeddings_all_to_all, "
                                          "pooled_embeddings_reduce_scatter, sequence_embeddings_all_to_all or all)",
                                          where, name));
}

Status CheckCodecName(const std::string& name, const std::string& where) {
  static const std::regex kName("[a-z0-9_]+");
  if (!std::regex_match(name, kName)) {
    return InvalidArgumentError(fmt::format("{}: codec name '{}' must be [a-z0-9_]+ (fp32, fp16, bf16, int8, fp8 or "
                                            "a codec plugin's)",
                                            where, name));
  }
  return Status::Ok();
}

std::string Canonical(const std::string& name) { return IsNoOpCodec(name) ? "fp32" : name; }

}  // namespace

const char* CommOpName(CommOp op) {
  switch (op) {
    case CommOp::kPooledAllToAll: return "pooled_embeddings_all_to_all";
    case CommOp::kPooledReduceScatter: return "pooled_embeddings_reduce_scatter";
    case CommOp::kSequenceAllToAll: return "sequence_embeddings_all_to_all";
  }
  return "?";
}

bool IsNoOpCodec(const std::string& name) { return name == "fp32" || name == "none"; }

bool QCommConfig::empty() const {
  for (const auto& [op, c] : ops) {
    if (!IsNoOpCodec(c.forward) || !IsNoOpCodec(c.backward)) return false;
  }
  return true;
}

void QCommConfig::Merge(const QCommConfig& other) {
  for (const auto& [op, c] : other.ops) ops[op] = c;
}

std::string QCommConfig::ToString() const {
  std::string out;
  for (const auto& [op, c] : ops) {
    if (IsNoOpCodec(c.forward) && IsNoOpCodec(c.backward)) continue;
    if (!out.empty()) out += ",";
    out += fmt::format("{}={}:{}", CommOpName(op), c.forward, c.backward);
  }
  return out.empty() ? "fp32" : out;
}

StatusOr<QCommConfig> ParseQCommFlag(const std::string& text) {
  QCommConfig config;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t end = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, end - start);
    start = end + 1;
    if (entry.empty()) {
      if (end == text.size() && !config.ops.empty()) break;
      return InvalidArgumentError("--qcomm: an empty entry (expected OP=CODEC or OP=FORWARD:BACKWARD, comma-separated)");
    }
    const size_t eq = entry.find('=');
    if (eq == std::string::npos) {
      return InvalidArgumentError(fmt::format("--qcomm: '{}' is not OP=CODEC or OP=FORWARD:BACKWARD", entry));
    }
    const std::string where = fmt::format("--qcomm '{}'", entry);
    SR_ASSIGN_OR_RETURN(auto ops, OpsNamed(entry.substr(0, eq), where));
    const std::string codecs = entry.substr(eq + 1);
    const size_t colon = codecs.find(':');
    CodecNames names;
    names.forward = codecs.substr(0, colon);
    names.backward = colon == std::string::npos ? names.forward : codecs.substr(colon + 1);
    SR_RETURN_IF_ERROR(CheckCodecName(names.forward, where));
    SR_RETURN_IF_ERROR(CheckCodecName(names.backward, where));
    names.forward = Canonical(names.forward);
    names.backward = Canonical(names.backward);
    for (CommOp op : ops) config.ops[op] = names;
  }
  return config;
}

StatusOr<QCommConfig> QCommFromJson(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) return InvalidArgumentError(source + ": \"qcomm_codecs\" must be an object of comm ops");
  QCommConfig config;
  for (const auto& [key, value] : j.items()) {
    const std::string where = fmt::format("{}: qcomm_codecs.{}", source, key);
    SR_ASSIGN_OR_RETURN(auto ops, OpsNamed(key, where));
    if (!value.is_object()) return InvalidArgumentError(where + " must be {\"forward\": CODEC, \"backward\": CODEC}");
    CodecNames names;
    for (const auto& [field, v] : value.items()) {
      if (field != "forward" && field != "backward") {
        return InvalidArgumentError(fmt::format("{}: unknown key '{}' (expected forward, backward)", where, field));
      }
      if (!v.is_string()) return InvalidArgumentError(fmt::format("{}.{} must be a string", where, field));
      const std::string name = v.get<std::string>();
      SR_RETURN_IF_ERROR(CheckCodecName(name, where + "." + field));
      (field == "forward" ? names.forward : names.backward) = Canonical(name);
    }
    for (CommOp op : ops) config.ops[op] = names;
  }
  return config;
}

nlohmann::json QCommToJson(const QCommConfig& config) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [op, c] : config.ops) {
    if (IsNoOpCodec(c.forward) && IsNoOpCodec(c.backward)) continue;
    j[CommOpName(op)] = {{"forward", c.forward}, {"backward", c.backward}};
  }
  return j;
}

}  // namespace shardrec
