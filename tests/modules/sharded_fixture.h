// Shared pieces of the sharded-module tests: a registry with the comm
// backend under test (the test parameter, "local" or "gloo"), the CPU
// kernel, the built-in sharders and the self-routing row_cyclic fixture; synthetic per-rank batches whose
// concatenation in rank order is the unsharded run's global batch; and a
// gradient that is a function of (global sample, column), so each rank
// computes its own rows of the global gradient.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <random>

#include "../dist/ranks_fixture.h"
#include "shardrec/core/sharding/sharding_plan.h"
#include "shardrec/core/modules/embedding_tables.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"
#include "shardrec/core/tensor/dtype_convert.h"

namespace shardrec {

class ShardedTest : public RanksTest {
 protected:
  void SetUp() override {
    RanksTest::SetUp();
    if (IsSkipped()) return;
    for (const char* lib : {"libshardrec_sharder_builtin.so", "libshardrec_kernel_cpu.so", "libshardrec_eviction_builtin.so"}) {
      ASSERT_TRUE(registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / lib).ok()) << lib;
    }
    // row_cyclic: a sharder that routes ids itself (tests/fixtures/cyclic_sharder.cc).
    const auto cyclic = std::filesystem::path(SHARDREC_FIXTURE_DIR) / "cyclic" / "libshardrec_sharder_cyclic.so";
    ASSERT_TRUE(registry_.LoadLibrary(cyclic).ok()) << cyclic;
  }

  static EmbeddingTableConfig Table(std::string name, int64_t rows, int64_t dim, std::vector<std::string> features,
                                    PoolingType pooling, bool weighted) {
    EmbeddingTableConfig t;
    t.name = std::move(name);
    t.num_embeddings = rows;
    t.embedding_dim = dim;
    t.feature_names = std::move(features);
    t.pooling = pooling;
    t.is_weighted = weighted;
    return t;
  }

  // Rank `rank`'s batch at `step`: `batch` samples per feature, 0-3 ids
  // each (empty bags included), ids uniform in the table, weights in [0.5, 1.5).
  static KeyedJaggedTensor LocalBatch(const std::vector<EmbeddingTableConfig>& tables, int rank, int step,
                                      int64_t batch) {
    std::mt19937_64 rng(static_cast<uint64_t>(rank) * 1000003u + static_cast<uint64_t>(step) * 7919u + 17u);
    std::vector<std::string> keys;
    std::vector<int64_t> values, lengths;
    std::vector<float> weights;
    for (const auto& t : tables) {
      for (const auto& f : t.feature_names) {
        keys.push_back(f);
        for (int64_t b = 0; b < batch; ++b) {
          const int64_t n = static_cast<int64_t>(rng() % 4);
          lengths.push_back(n);
          for (int64_t i = 0; i < n; ++i) {
            values.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(t.num_embeddings)));
            weights.push_back(0.5f + static_cast<float>(rng() % 1000) / 1000.0f);
          }
        }
      }
    }
    return KeyedJaggedTensor::FromLengths(keys, values, lengths, weights).value();
  }

  // Every rank's batch, samples concatenated in rank order, per feature.
  static KeyedJaggedTensor GlobalBatch(const std::vector<KeyedJaggedTensor>& per_rank) {
    return KeyedJaggedTensor::ConcatSamples(per_rank).value();
  }

  static float GradAt(int64_t global_sample, int64_t col, int step) {
    return static_cast<float>(std::sin(0.37 * static_cast<double>(global_sample) + 0.11 * static_cast<double>(col) +
                                       static_cast<double>(step)));
  }
  // Rows [first, first + rows) of the global pooled gradient.
  static Tensor PooledGrad(int64_t first, int64_t rows, int64_t width, int step) {
    Tensor g = Tensor::Empty(dtype::kFloat32, {rows, width});
    for (int64_t b = 0; b < rows; ++b) {
      for (int64_t c = 0; c < width; ++c) g.data<float>()[b * width + c] = GradAt(first + b, c, step);
    }
    return g;
  }

  static float MaxAbsDiff(const Tensor& a, const Tensor& b) {
    EXPECT_EQ(a.shape(), b.shape());
    if (a.shape() != b.shape()) return INFINITY;
    float m = 0;
    for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.data<float>()[i] - b.data<float>()[i]));
    return m;
  }
  // Data-parallel table -> every rank's copy of its weights.
  using Replicas = std::map<std::string, std::vector<Tensor>>;

  // Every table read back from a sharded module (ReadTable) against the
  // unsharded reference's weights and optimizer state, within `tol`; the
  // weights of data-parallel tables are collected into `replicas` (under `mu`).
  template <class Sharded>
  static void ExpectTablesMatch(const Sharded& sharded, const EmbeddingTables& ref,
                                const std::vector<EmbeddingTableConfig>& tables, const ShardingPlan& plan, int me,
                                float tol, std::mutex& mu, Replicas& replicas) {
    for (size_t t = 0; t < tables.size(); ++t) {
      auto got = sharded.ReadTable(tables[t].name);
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      const auto want_w = ToFloat32(ref.ReadWeights(static_cast<int32_t>(t)).value(), "w").value();
      const auto want_s = ref.ReadState(static_cast<int32_t>(t)).value();
      EXPECT_LE(MaxAbsDiff(got->weights, want_w), tol) << "weights of " << tables[t].name << ", rank " << me;
      EXPECT_LE(MaxAbsDiff(got->state, want_s), tol) << "optimizer state of " << tables[t].name << ", rank " << me;
      if (plan.tables[t].placement.replicated) {
        std::lock_guard<std::mutex> lock(mu);
        replicas[tables[t].name].push_back(got->weights.Clone());
      }
    }
  }
  static void ExpectIdenticalReplicas(const Replicas& replicas) {
    for (const auto& [name, copies] : replicas) {
      for (const auto& copy : copies) {
        EXPECT_EQ(MaxAbsDiff(copy, copies[0]), 0.0f) << "data-parallel replicas of " << name << " differ";
      }
    }
  }

  // Rows [first, first + rows) of a 2-D float tensor.
  static Tensor Rows(const Tensor& t, int64_t first, int64_t rows) {
    Tensor out = Tensor::Empty(dtype::kFloat32, {rows, t.size(1)});
    std::copy(t.data<float>() + first * t.size(1), t.data<float>() + (first + rows) * t.size(1), out.data<float>());
    return out;
  }
};

}  // namespace shardrec
