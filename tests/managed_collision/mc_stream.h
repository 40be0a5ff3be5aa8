// The managed-collision tests' stream, shared by the module tests and the
// pipeline tests: three tables (t0 and t1 managed, t0 with a residual
// range, t2 not), small zero-collision spaces that evict every round or
// two, and raw ids from a range far larger than the tables, skewed so low
// ids come back often and slots are contested.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "shardrec/core/managed_collision/managed_collision_collection.h"
#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"

namespace shardrec::mc_stream {

inline std::vector<EmbeddingTableConfig> Tables(PoolingType pooling) {
  auto table = [&](std::string name, int64_t rows, int64_t dim, std::vector<std::string> features) {
    EmbeddingTableConfig t;
    t.name = std::move(name);
    t.num_embeddings = rows;
    t.embedding_dim = dim;
    t.feature_names = std::move(features);
    t.pooling = pooling;
    return t;
  };
  return {table("t0", 16, 6, {"f0", "f1"}), table("t1", 10, 4, {"f2"}), table("t2", 7, 3, {"f3"})};
}

inline ManagedCollisionConfigs Managed() {
  ManagedCollisionConfigs m;
  m["t0"] = ParseManagedCollision("t0", "zch_size=12,mch_size=4,buckets=4,policy=lfu,eviction_interval=2").value();
  m["t1"] = ParseManagedCollision("t1", "zch_size=10,buckets=2,policy=distance_lfu,eviction_interval=1").value();
  return m;
}

inline int64_t BatchOf(int rank) { return 3 + rank % 2; }

inline KeyedJaggedTensor RawBatch(const std::vector<EmbeddingTableConfig>& tables, int rank, int step) {
  std::mt19937_64 rng(static_cast<uint64_t>(rank) * 1000003u + static_cast<uint64_t>(step) * 7919u + 3u);
  std::vector<std::string> keys;
  std::vector<int64_t> values, lengths;
  for (const auto& t : tables) {
    const uint64_t range = t.name == "t2" ? static_cast<uint64_t>(t.num_embeddings) : 40;
    for (const auto& f : t.feature_names) {
      keys.push_back(f);
      for (int64_t b = 0; b < BatchOf(rank); ++b) {
        const int64_t n = static_cast<int64_t>(rng() % 4);
        lengths.push_back(n);
        for (int64_t i = 0; i < n; ++i) {
          const uint64_t a = rng() % range, b2 = rng() % range;
          values.push_back(static_cast<int64_t>(std::min(a, b2)) * (t.name == "t2" ? 1 : 1000003));
        }
      }
    }
  }
  return KeyedJaggedTensor::FromLengths(keys, values, lengths).value();
}

}  // namespace shardrec::mc_stream
