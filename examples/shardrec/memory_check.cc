#include "memory_check.h"

#include <limits>
#include <numeric>

#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/sdk/optimizer.hpp"

namespace shardrec::cli {

namespace {
// Sums and products that stop at INT64_MAX: hostile sizes must read as
// "too much", never wrap to something small.
int64_t SaturatingAdd(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
int64_t SaturatingMul(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? std::numeric_limits<int64_t>::max() : r;
}
}  // namespace

int64_t UnshardedTableBytes(const std::vector<EmbeddingTableConfig>& tables, int32_t optimizer) {
  int64_t total = 0;
  for (const EmbeddingTableConfig& t : tables) {
    const int64_t weight = t.embedding_dim * static_cast<int64_t>(DTypeSize(ToDLDataType(t.data_type)));
    const int64_t state = sdk::StateDim(optimizer, t.embedding_dim) * static_cast<int64_t>(sizeof(float));
    total = SaturatingAdd(total, SaturatingMul(t.num_embeddings, SaturatingAdd(weight, state)));
  }
  return total;
}

int64_t PlanBytesInThisProcess(const ShardingPlan& plan, const ProcessGroup& group) {
  if (group.backend() == "local") {
    return std::accumulate(plan.bytes_per_rank.begin(), plan.bytes_per_rank.end(), int64_t{0}, SaturatingAdd);
  }
  const auto rank = static_cast<size_t>(group.rank());
  return rank < plan.bytes_per_rank.size() ? plan.bytes_per_rank[rank] : 0;
}

}  // namespace shardrec::cli
