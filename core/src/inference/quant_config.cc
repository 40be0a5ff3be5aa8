// Per-table serving types and the quantization error (see quant_config.h).
#include "shardrec/core/inference/quant_config.h"

#include <cmath>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace shardrec {

DataType QuantConfig::For(const std::string& table) const {
  auto it = per_table.find(table);
  return it == per_table.end() ? default_type : it->second;
}

StatusOr<QuantConfig> QuantConfig::Parse(const std::string& default_type, const std::string& per_table) {
  QuantConfig c;
  SR_ASSIGN_OR_RETURN(c.default_type, ParseDataType(default_type));
  size_t start = 0;
  while (start < per_table.size()) {
    size_t end = per_table.find(',', start);
    if (end == std::string::npos) end = per_table.size();
    const std::string item = per_table.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      return InvalidArgumentError("per-table types: '" + item + "' is not TABLE=TYPE (e.g. t0=int4)");
    }
    const std::string table = item.substr(0, eq);
    SR_ASSIGN_OR_RETURN(DataType t, ParseDataType(item.substr(eq + 1)));
    if (!c.per_table.emplace(table, t).second) {
      return InvalidArgumentError("per-table types: table '" + table + "' is named twice");
    }
  }
  return c;
}

Status QuantConfig::CheckTables(const std::vector<EmbeddingTableConfig>& tables) const {
  std::set<std::string> names;
  for (const auto& t : tables) names.insert(t.name);
  for (const auto& [name, type] : per_table) {
    if (!names.count(name)) {
      return InvalidArgumentError(fmt::format("per-table types: no table '{}' (tables: {})", name, fmt::join(names, ", ")));
    }
  }
  return Status::Ok();
}

std::vector<EmbeddingTableConfig> QuantConfig::Apply(std::vector<EmbeddingTableConfig> tables) const {
  for (auto& t : tables) t.data_type = For(t.name);
  return tables;
}

StatusOr<QuantizationError> MeasureQuantizationError(const Tensor& trained, const Tensor& served) {
  if (!SameDType(trained.dtype(), dtype::kFloat32) || !SameDType(served.dtype(), dtype::kFloat32) ||
      trained.shape() != served.shape()) {
    return InternalError("quantization error: the tables differ in dtype or shape");
  }
  QuantizationError e;
  e.values = trained.numel();
  const float* a = trained.data<float>();
  const float* b = served.data<float>();
  double sum = 0;
  for (int64_t i = 0; i < e.values; ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    sum += d;
    e.max_abs = std::max(e.max_abs, d);
  }
  e.mean_abs = e.values > 0 ? sum / static_cast<double>(e.values) : 0.0;
  return e;
}

}  // namespace shardrec
