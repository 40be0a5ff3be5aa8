// QuantEmbeddingBagCollection and ShardedQuantEmbeddingBagCollection (issue
// 25):
// - Quantize() of a trained collection: every table in its QuantConfig type
//   (int8, int4, int2, fp16, fp32), its rows FBGEMM's quantization of the
//   trained rows, its lookups the pooling of the dequantized rows, and the
//   reported errors |served - trained| exactly;
// - sharded for inference (table_wise, row_wise, table_row_wise,
//   data_parallel; 2 and 3 ranks; sum and mean; weighted or not; local and
//   gloo): the caller's rank, not always rank 0, gets the unsharded
//   module's pooled embeddings, the other ranks nothing; a batch the
//   caller's checks refuse is its error alone, and the next one is served;
// - refused: a plan splitting a quantized row by column (the error names
//   the table and the columns), an optimizer, an unknown per-table name.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <mutex>
#include <random>

#include "../modules/sharded_fixture.h"
#include "shardrec/core/inference/quant_embedding_bag_collection.h"
#include "shardrec/core/modules/table_weights.h"
#include "shardrec/sdk/quantized_rows.hpp"

namespace shardrec {
namespace {

class QuantEbc : public ShardedTest {
 protected:
  static std::vector<EmbeddingTableConfig> Tables(PoolingType pooling, bool weighted) {
    auto t0 = Table("t0", 40, 8, {"f0", "f1"}, pooling, weighted);
    auto t1 = Table("t1", 23, 5, {"f2"}, pooling, weighted);
    auto t2 = Table("t2", 3, 17, {"f3"}, pooling, weighted);
    auto t3 = Table("t3", 30, 6, {"f4"}, pooling, weighted);
    t0.data_type = DataType::kInt8;
    t1.data_type = DataType::kInt4;
    t2.data_type = DataType::kInt2;
    t3.data_type = DataType::kFp16;
    return {t0, t1, t2, t3};
  }
  static EmbeddingModuleOptions Options() {
    EmbeddingModuleOptions o;
    o.kernel = "cpu";
    o.init_seed = 11;
    o.kernel_options.Set("threads", "1");
    return o;
  }
};

// Float32 [rows, dim] values from a seed, in [-1, 1).
Tensor RandomTable(int64_t rows, int64_t dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  Tensor t = Tensor::Empty(dtype::kFloat32, {rows, dim});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

TEST_P(QuantEbc, QuantizeGivesFbgemmRowsTheirPoolingAndTheErrors) {
  auto trained_tables = Tables(PoolingType::kSum, /*weighted=*/true);
  for (auto& t : trained_tables) t.data_type = DataType::kFp32;
  EmbeddingModuleOptions options = Options();
  auto trained = EmbeddingBagCollection::Create(registry_, trained_tables, options);
  ASSERT_TRUE(trained.ok()) << trained.status().ToString();
  for (size_t t = 0; t < trained_tables.size(); ++t) {
    const Tensor w = RandomTable(trained_tables[t].num_embeddings, trained_tables[t].embedding_dim, 100 + t);
    ASSERT_TRUE(trained->tables().WriteWeights(static_cast<int32_t>(t), w).ok());
  }
  auto config = QuantConfig::Parse("int4", "t0=int8,t2=int2,t3=fp32");
  ASSERT_TRUE(config.ok()) << config.status().ToString();
  std::vector<QuantizationError> errors;
  auto q = QuantEmbeddingBagCollection::Quantize(registry_, trained.value(), config.value(), options, &errors);
  ASSERT_TRUE(q.ok()) << q.status().ToString();
  const std::vector<DataType> want = {DataType::kInt8, DataType::kInt4, DataType::kInt2, DataType::kFp32};
  ASSERT_EQ(errors.size(), 4u);
  std::vector<Tensor> served(4);
  for (size_t t = 0; t < 4; ++t) {
    const auto& c = q->tables().configs()[t];
    EXPECT_EQ(c.data_type, want[t]) << c.name;
    const Tensor w = trained->tables().ReadWeights(static_cast<int32_t>(t)).value();
    const Tensor stored = q->tables().ReadWeights(static_cast<int32_t>(t)).value();
    if (IsRowQuantized(c.data_type)) {
      const auto qz = static_cast<sdk::RowQuantization>(RowQuantization(c.data_type));
      ASSERT_EQ(stored.size(1), sdk::QuantRowBytes(qz, c.embedding_dim));
      std::vector<uint8_t> row(static_cast<size_t>(stored.size(1)));
      for (int64_t r = 0; r < c.num_embeddings; ++r) {
        sdk::QuantizeRow(qz, w.data<float>() + r * c.embedding_dim, c.embedding_dim, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), static_cast<const uint8_t*>(stored.raw_data()) + r * stored.size(1),
                                 row.size()))
            << c.name << " row " << r;
      }
    }
    served[t] = DecodeWeights(stored, c, c.name).value();
    double max_abs = 0, sum = 0;
    for (int64_t i = 0; i < w.numel(); ++i) {
      const double d = std::fabs(static_cast<double>(w.data<float>()[i]) - served[t].data<float>()[i]);
      max_abs = std::max(max_abs, d);
      sum += d;
    }
    EXPECT_EQ(errors[t].max_abs, max_abs) << c.name;
    EXPECT_DOUBLE_EQ(errors[t].mean_abs, sum / static_cast<double>(w.numel())) << c.name;
    if (c.data_type == DataType::kFp32) {
      EXPECT_EQ(max_abs, 0.0);
    }
  }
  EXPECT_LT(errors[0].max_abs, errors[1].max_abs);  // int8 < int4
  EXPECT_LT(errors[1].max_abs, 0.2);

  // Lookups: the dequantized rows pooled, weighted.
  const KeyedJaggedTensor kjt = LocalBatch(q->tables().configs(), 0, 0, 6);
  auto out = q->Forward(kjt);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  const auto offsets = kjt.offsets();
  int64_t col = 0;
  for (size_t f = 0; f < q->tables().features().size(); ++f) {
    const int32_t t = q->tables().features()[f].table;
    const int64_t dim = q->tables().configs()[static_cast<size_t>(t)].embedding_dim;
    for (int64_t b = 0; b < 6; ++b) {
      for (int64_t c = 0; c < dim; ++c) {
        double ref = 0;
        for (int64_t i = offsets[static_cast<size_t>(f) * 6 + b]; i < offsets[static_cast<size_t>(f) * 6 + b + 1]; ++i) {
          ref += static_cast<double>((*kjt.weights())[i]) *
                 served[static_cast<size_t>(t)].data<float>()[kjt.values()[i] * dim + c];
        }
        EXPECT_NEAR(out->values().data<float>()[b * out->values().size(1) + col + c], ref, 1e-5)
            << "feature " << f << " sample " << b << " column " << c;
      }
    }
    col += dim;
  }
}

struct ShardCase {
  std::string sharder;
  int world;
  PoolingType pooling;
  bool weighted;
};

TEST_P(QuantEbc, ShardedGivesTheCallerTheUnshardedOutput) {
  std::vector<ShardCase> cases;
  for (const char* sharder : {"table_wise", "row_wise", "table_row_wise", "data_parallel"}) {
    for (int world : {2, 3}) cases.push_back({sharder, world, PoolingType::kSum, world == 3});
  }
  cases.push_back({"row_wise", 2, PoolingType::kMean, true});
  cases.push_back({"table_row_wise", 3, PoolingType::kMean, false});
  for (const ShardCase& c : cases) {
    SCOPED_TRACE(fmt::format("{} world {} {} weighted {}", c.sharder, c.world, PoolingName(c.pooling), c.weighted));
    const auto tables = Tables(c.pooling, c.weighted);
    auto unsharded = QuantEmbeddingBagCollection::Create(registry_, tables, Options());
    ASSERT_TRUE(unsharded.ok()) << unsharded.status().ToString();
    const KeyedJaggedTensor batch = LocalBatch(tables, 7, 1, 9);
    const Tensor want = unsharded->Forward(batch).value().values();
    PlanRequest req;
    req.tables = tables;
    req.world_size = c.world;
    req.ranks_per_host = c.world;
    req.sharder = c.sharder;
    auto plan = MakePlan(registry_, req);
    ASSERT_TRUE(plan.ok()) << plan.status().ToString();
    const int caller = c.world - 1;  // not rank 0: any rank may hold the batch
    std::mutex mu;
    int answered = 0;
    OnRanks(c.world, [&](const ProcessGroup& group) {
      auto m = ShardedQuantEmbeddingBagCollection::Create(registry_, group, plan.value(), Options());
      ASSERT_TRUE(m.ok()) << m.status().ToString();
      for (int step = 0; step < 2; ++step) {
        auto out = m->Forward(group.rank() == caller ? &batch : nullptr);
        ASSERT_TRUE(out.ok()) << out.status().ToString();
        std::lock_guard<std::mutex> lock(mu);
        if (group.rank() != caller) {
          EXPECT_FALSE(out->has_value()) << "rank " << group.rank();
          continue;
        }
        ASSERT_TRUE(out->has_value());
        EXPECT_LE(MaxAbsDiff((*out)->values(), want), 1e-5f);
        ++answered;
      }
    });
    EXPECT_EQ(answered, 2);
  }
}

TEST_P(QuantEbc, ARefusedBatchIsTheCallersErrorAloneAndTheRanksStayInStep) {
  const auto tables = Tables(PoolingType::kSum, false);
  PlanRequest req;
  req.tables = tables;
  req.world_size = 2;
  req.ranks_per_host = 2;
  req.sharder = "row_wise";
  auto plan = MakePlan(registry_, req);
  ASSERT_TRUE(plan.ok()) << plan.status().ToString();
  const KeyedJaggedTensor good = LocalBatch(tables, 3, 0, 5);
  std::vector<int64_t> ids = good.values().ToVector();
  ids[0] = 1000;  // outside t0's 40 rows: the fatal bounds check refuses it
  KeyedJaggedTensor bad = good;
  ASSERT_TRUE(bad.ReplaceValues(ids).ok());
  auto unknown = KeyedJaggedTensor::FromLengths({"f0", "f1", "f2", "f3", "nope"}, {1, 2, 0, 0, 0},
                                                {1, 1, 1, 1, 1});
  ASSERT_TRUE(unknown.ok()) << unknown.status().ToString();
  OnRanks(2, [&](const ProcessGroup& group) {
    auto m = ShardedQuantEmbeddingBagCollection::Create(registry_, group, plan.value(), Options());
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    const bool caller = group.rank() == 0;
    auto refused = m->Forward(caller ? &bad : nullptr);
    if (caller) {
      ASSERT_FALSE(refused.ok());
      EXPECT_NE(refused.status().message().find("id 1000 is outside its table's"), std::string::npos)
          << refused.status().message();
    } else {
      ASSERT_TRUE(refused.ok()) << refused.status().ToString();
      EXPECT_FALSE(refused->has_value());
    }
    auto unknown_key = m->Forward(caller ? &unknown.value() : nullptr);
    if (caller) {
      ASSERT_FALSE(unknown_key.ok());
      EXPECT_NE(unknown_key.status().message().find("feature 'nope', which no table serves"), std::string::npos)
          << unknown_key.status().message();
    }
    // The collectives are still in step: the next batch is served.
    auto served = m->Forward(caller ? &good : nullptr);
    ASSERT_TRUE(served.ok()) << served.status().ToString();
    EXPECT_EQ(served->has_value(), caller);
  });
}

TEST_P(QuantEbc, Refusals) {
  const auto tables = Tables(PoolingType::kSum, false);
  // A plan that splits t0's int8 rows by column.
  auto spec = ParsePlanJson(R"({"plan": {"t0": {"sharding_type": "column_wise", "shards": [
      {"rows": [0, 40], "cols": [0, 4], "rank": 0}, {"rows": [0, 40], "cols": [4, 4], "rank": 1}]}}})",
                            "test plan");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  PlanRequest req;
  req.tables = tables;
  req.world_size = 2;
  req.ranks_per_host = 2;
  req.spec = spec.value();
  auto plan = MakePlan(registry_, req);
  ASSERT_FALSE(plan.ok());
  EXPECT_NE(plan.status().message().find("table 't0'"), std::string::npos) << plan.status().message();
  EXPECT_NE(plan.status().message().find("cannot be split by column"), std::string::npos) << plan.status().message();
  EXPECT_NE(plan.status().message().find("columns [0, 4)"), std::string::npos) << plan.status().message();

  EmbeddingModuleOptions training = Options();
  training.optimizer = OptimizerSpec::Parse("sgd,lr=0.1").value();
  auto trains = QuantEmbeddingBagCollection::Create(registry_, tables, training);
  ASSERT_FALSE(trains.ok());
  EXPECT_NE(trains.status().message().find("optimizer must be none"), std::string::npos) << trains.status().message();
  auto direct = EmbeddingBagCollection::Create(registry_, tables, training);
  ASSERT_FALSE(direct.ok());
  EXPECT_NE(direct.status().message().find("is int8 (row-wise quantized, inference only): it cannot train"),
            std::string::npos)
      << direct.status().message();

  auto config = QuantConfig::Parse("int8", "nope=int4");
  ASSERT_TRUE(config.ok());
  EXPECT_NE(config->CheckTables(tables).message().find("no table 'nope' (tables: t0, t1, t2, t3)"), std::string::npos)
      << config->CheckTables(tables).message();
  EXPECT_FALSE(QuantConfig::Parse("int8", "t0").ok());
  EXPECT_FALSE(QuantConfig::Parse("int8", "t0=int4,t0=int2").ok());
  EXPECT_FALSE(QuantConfig::Parse("int3", "").ok());

  // Values a fp16 scale and bias cannot hold.
  auto q = QuantEmbeddingBagCollection::Create(registry_, tables, Options());
  ASSERT_TRUE(q.ok());
  Tensor big = RandomTable(40, 8, 1);
  big.data<float>()[13] = 1e6f;
  auto encoded = EncodeWeights(big, tables[0], "t0");
  ASSERT_FALSE(encoded.ok());
  EXPECT_NE(encoded.status().message().find("row 1 column 5 is 1000000, which an int8 row cannot hold"),
            std::string::npos)
      << encoded.status().message();
}

INSTANTIATE_TEST_SUITE_P(Comm, QuantEbc, ::testing::Values("local", "gloo"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

}  // namespace
}  // namespace shardrec
