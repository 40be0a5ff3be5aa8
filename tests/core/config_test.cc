// Table configs from JSON and optimizer specs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "shardrec/abi/kernel.h"
#include "shardrec/core/io/names.h"
#include "shardrec/core/modules/embedding_config.h"
#include "shardrec/core/modules/optimizer_spec.h"

namespace shardrec {
namespace {

TEST(TablesJson, ParsesTheIssueExampleAndDefaults) {
  auto t = ParseTablesJson(R"({"tables": [{"name": "t0", "num_embeddings": 1000, "embedding_dim": 64,
      "feature_names": ["f0"], "pooling": "sum", "data_type": "fp32", "weight_init_min": -0.01,
      "weight_init_max": 0.01}, {"name": "t1", "num_embeddings": 100, "embedding_dim": 3,
      "feature_names": ["a", "b"], "pooling": "mean", "data_type": "bf16", "is_weighted": true}]})",
                           "tables.json");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 2u);
  EXPECT_EQ((*t)[0].init_min(), -0.01);
  EXPECT_EQ((*t)[1].pooling, PoolingType::kMean);
  EXPECT_EQ((*t)[1].data_type, DataType::kBf16);
  EXPECT_TRUE((*t)[1].is_weighted);
  EXPECT_DOUBLE_EQ((*t)[1].init_max(), std::sqrt(1.0 / 100));  // TorchRec's default
  auto again = ParseTablesJson(TablesToJson(t.value()), "round trip");
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ((*again)[1].feature_names, (std::vector<std::string>{"a", "b"}));
}

// Names become file names (embed's OUT/tables/NAME.npy, OUT/sequence/FEATURE/,
// --weights DIR/NAME.npy): anything that is not one plain component is
// refused where the tables file is read, naming it.
TEST(TablesJson, NamesThatAreNotPlainFileNamesAreRefused) {
  auto with = [](const std::string& table, const std::string& feature) {
    return ParseTablesJson(R"({"tables": [{"name": )" + table + R"(, "num_embeddings": 4, "embedding_dim": 2,
        "feature_names": [)" + feature + "]}]}", "t.json");
  };
  EXPECT_TRUE(with(R"("t_0.a-b@1")", R"("f-0.x")").ok());
  for (const std::string& bad : std::vector<std::string>{R"("../x")", R"("/abs")", R"("a/b")", R"(".hidden")", R"("..")", R"("x\u0000y")",
                                 R"("tab\tx")", R"("")", "\"" + std::string(129, 'a') + "\""}) {
    auto r = with(bad, R"("f")");
    EXPECT_EQ(r.status().code(), SR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(r.status().message().find("t.json"), std::string::npos) << r.status().message();
    EXPECT_TRUE(r.status().message().find("table name") != std::string::npos ||
                r.status().message().find("has no name") != std::string::npos)
        << r.status().message();
    auto f = with(R"("t")", bad);
    EXPECT_EQ(f.status().code(), SR_INVALID_ARGUMENT) << bad;
    EXPECT_NE(f.status().message().find("feature name"), std::string::npos) << f.status().message();
  }
  // A NUL inside a name is shown, not truncated.
  EXPECT_NE(with(R"("x\u0000y")", R"("f")").status().message().find("x\\x00y"), std::string::npos);
  EXPECT_EQ(PathUnder("/out", "table", "t0", ".npy").value(), std::filesystem::path("/out/t0.npy"));
  EXPECT_FALSE(PathUnder("/out", "table", "../t0", ".npy").ok());
}

// Hostile sizes: a float where an integer goes (4e47 once converted with
// undefined behaviour; found by the tables_json fuzz target), an unsigned
// past 2^63, a table whose byte counts would overflow.
TEST(TablesJson, HostileSizesAreRefused) {
  auto with = [](const std::string& rows, const std::string& dim) {
    return ParseTablesJson(R"({"tables": [{"name": "t", "num_embeddings": )" + rows + R"(, "embedding_dim": )" + dim +
                               R"(, "feature_names": ["f"]}]})",
                           "t.json");
  };
  auto f = with("4", "4e47");
  EXPECT_NE(f.status().message().find("embedding_dim must be an integer"), std::string::npos) << f.status().message();
  auto u = with("18446744073709551615", "4");
  EXPECT_NE(u.status().message().find("num_embeddings must be an integer"), std::string::npos) << u.status().message();
  auto big = with("4611686018427387904", "64");
  EXPECT_NE(big.status().message().find("elements is too large"), std::string::npos) << big.status().message();
  EXPECT_TRUE(with("1000", "64").ok());
}

TEST(TablesJson, ErrorsNameTheKeyAndTable) {
  auto unknown = ParseTablesJson(
      R"({"tables": [{"name": "t0", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f"], "poolng": "sum"}]})",
      "x.json");
  EXPECT_EQ(unknown.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(unknown.status().message().find("x.json: tables[0] ('t0'): unknown key 'poolng'"), std::string::npos)
      << unknown.status().message();
  auto pooling = ParseTablesJson(
      R"({"tables": [{"name": "t0", "num_embeddings": 10, "embedding_dim": 4, "feature_names": ["f"], "pooling": "SUM"}]})",
      "x.json");
  EXPECT_NE(pooling.status().message().find("unknown pooling 'SUM'"), std::string::npos);
  auto missing = ParseTablesJson(R"({"tables": [{"name": "t0", "embedding_dim": 4, "feature_names": ["f"]}]})", "x");
  EXPECT_NE(missing.status().message().find("missing 'num_embeddings'"), std::string::npos);
  auto type = ParseTablesJson(
      R"({"tables": [{"name": "t0", "num_embeddings": "ten", "embedding_dim": 4, "feature_names": ["f"]}]})", "x");
  EXPECT_EQ(type.status().code(), SR_INVALID_ARGUMENT);
  auto shared = ParseTablesJson(R"({"tables": [
      {"name": "a", "num_embeddings": 1, "embedding_dim": 1, "feature_names": ["f"]},
      {"name": "b", "num_embeddings": 1, "embedding_dim": 1, "feature_names": ["f"]}]})",
                                "x");
  EXPECT_NE(shared.status().message().find("feature 'f' is listed by tables 'a' and 'b'"), std::string::npos);
  EXPECT_NE(ParseTablesJson("{\"tables\": [], \"extra\": 1}", "x").status().message().find("unknown top-level key"),
            std::string::npos);
  EXPECT_NE(ParseTablesJson("{not json", "x").status().message().find("not valid JSON"), std::string::npos);
  auto zero = ParseTablesJson(
      R"({"tables": [{"name": "t0", "num_embeddings": 0, "embedding_dim": 4, "feature_names": ["f"]}]})", "x");
  EXPECT_NE(zero.status().message().find("num_embeddings must be positive"), std::string::npos);
}

TEST(OptimizerSpec, ParsesNameAndParams) {
  auto s = OptimizerSpec::Parse("adagrad,lr=0.1,eps=1e-10");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->optimizer, SR_OPTIMIZER_ADAGRAD);
  EXPECT_EQ(s->params.items()[0], (std::pair<std::string, std::string>{"learning_rate", "0.1"}));
  EXPECT_EQ(s->ToString(), "adagrad,learning_rate=0.1,eps=1e-10");
  EXPECT_EQ(OptimizerSpec::Parse("rowwise_adagrad")->optimizer, SR_OPTIMIZER_ROWWISE_ADAGRAD);
  EXPECT_NE(OptimizerSpec::Parse("adamw").status().message().find("unknown optimizer 'adamw'"), std::string::npos);
  EXPECT_NE(OptimizerSpec::Parse("sgd,lr").status().message().find("expected key=value"), std::string::npos);
}

}  // namespace
}  // namespace shardrec
