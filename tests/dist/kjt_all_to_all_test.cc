// KjtAllToAll against the seeds' worked examples, exactly (WE-1: keys A/B/C,
// splits [2,1]; WE-2: the id-score-list KJT, splits [1,3], weights travel
// with their ids), over `local` (threads) and `gloo` (TCP, in-process
// rendezvous); plus variable batch per feature and the errors.
#include <gtest/gtest.h>


#include "ranks_fixture.h"
#include "shardrec/core/dist/kjt_all_to_all.h"

namespace shardrec {
namespace {

using V = std::vector<int64_t>;

using KjtAllToAllTest = RanksTest;

// Ids stand for the seeds' symbols: A.Vi = 100 + i, B.Vi = 200 + i, C.Vi = 300 + i, D.Vi = 400 + i.
TEST_P(KjtAllToAllTest, SeedWE1KeysABCSplits21) {
  OnRanks(2, [](const ProcessGroup& g) {
    auto input = g.rank() == 0
                     ? KeyedJaggedTensor::FromLengths({"A", "B", "C"}, {100, 101, 102, 200, 201, 300, 301},
                                                      {1, 0, 2, 0, 1, 1, 1, 1, 0})
                     : KeyedJaggedTensor::FromLengths({"A", "B", "C"}, {103, 104, 202, 203, 204, 302, 303},
                                                      {1, 1, 0, 0, 1, 2, 1, 1, 0});
    ASSERT_TRUE(input.ok());
    auto out = KjtAllToAll(g, input.value(), {2, 1});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_FALSE(out->variable_stride_per_key());
    EXPECT_EQ(out->stride(), 6);
    if (g.rank() == 0) {
      EXPECT_EQ(out->keys(), (std::vector<std::string>{"A", "B"}));
      EXPECT_EQ(out->lengths(), (V{1, 0, 2, 1, 1, 0, 0, 1, 1, 0, 1, 2}));
      EXPECT_EQ(out->values(), (V{100, 101, 102, 103, 104, 200, 201, 202, 203, 204}));
    } else {
      EXPECT_EQ(out->keys(), (std::vector<std::string>{"C"}));
      EXPECT_EQ(out->lengths(), (V{1, 1, 0, 1, 1, 0}));
      EXPECT_EQ(out->values(), (V{300, 301, 302, 303}));
    }
  });
}

TEST_P(KjtAllToAllTest, SeedWE2ScoreListSplits13CarriesWeights) {
  OnRanks(2, [](const ProcessGroup& g) {
    const V values = g.rank() == 0 ? V{100, 101, 102, 200, 201, 300, 301, 400}
                                   : V{103, 104, 202, 203, 204, 302, 303, 401, 402, 403, 404};
    std::vector<float> weights;  // each id's weight encodes the id, so its travel is checked
    for (int64_t v : values) weights.push_back(static_cast<float>(v) / 4);
    auto input = KeyedJaggedTensor::FromLengths(
        {"A", "B", "C", "D"}, values,
        g.rank() == 0 ? V{1, 0, 2, 0, 1, 1, 1, 1, 0, 0, 1, 0} : V{1, 1, 0, 0, 1, 2, 1, 1, 0, 1, 1, 2}, weights);
    ASSERT_TRUE(input.ok()) << input.status().ToString();
    auto out = KjtAllToAll(g, input.value(), {1, 3});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    ASSERT_TRUE(out->has_weights());
    if (g.rank() == 0) {
      EXPECT_EQ(out->keys(), (std::vector<std::string>{"A"}));
      EXPECT_EQ(out->lengths(), (V{1, 0, 2, 1, 1, 0}));
      EXPECT_EQ(out->values(), (V{100, 101, 102, 103, 104}));
    } else {
      EXPECT_EQ(out->keys(), (std::vector<std::string>{"B", "C", "D"}));
      EXPECT_EQ(out->lengths(), (V{0, 1, 1, 0, 1, 2, 1, 1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 2}));
      EXPECT_EQ(out->values(), (V{200, 201, 202, 203, 204, 300, 301, 302, 303, 400, 401, 402, 403, 404}));
    }
    for (size_t i = 0; i < out->values().size(); ++i) {
      EXPECT_EQ((*out->weights())[i], static_cast<float>(out->values()[i]) / 4) << "weight " << i;
    }
  });
}

TEST_P(KjtAllToAllTest, VariableBatchPerFeatureAndThreeRanks) {
  // Rank s has batch (s + 1) for key "x" and 2 for key "y"; "x" goes to rank 0,
  // "y" to rank 2, nothing to rank 1.
  OnRanks(3, [](const ProcessGroup& g) {
    const int64_t s = g.rank();
    V lengths, values;
    for (int64_t b = 0; b < s + 1; ++b) lengths.push_back(1);  // x: one id per sample
    lengths.insert(lengths.end(), {2, 0});                      // y
    for (int64_t b = 0; b < s + 1; ++b) values.push_back(10 * s + b);
    values.insert(values.end(), {1000 + s, 2000 + s});
    auto input = KeyedJaggedTensor::FromLengths({"x", "y"}, values, lengths, {}, {s + 1, 2});
    ASSERT_TRUE(input.ok()) << input.status().ToString();
    auto out = KjtAllToAll(g, input.value(), {1, 0, 1});
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    if (g.rank() == 0) {
      EXPECT_EQ(out->keys(), (std::vector<std::string>{"x"}));
      EXPECT_EQ(out->stride(), 6);  // 1 + 2 + 3 samples
      EXPECT_EQ(out->values(), (V{0, 10, 11, 20, 21, 22}));
    } else if (g.rank() == 1) {
      EXPECT_EQ(out->num_keys(), 0);
    } else {
      EXPECT_EQ(out->keys(), (std::vector<std::string>{"y"}));
      EXPECT_EQ(out->lengths(), (V{2, 0, 2, 0, 2, 0}));
      EXPECT_EQ(out->values(), (V{1000, 2000, 1001, 2001, 1002, 2002}));
    }
  });
}

TEST_P(KjtAllToAllTest, SplitsThatDoNotFitTheKeysAreRefused) {
  OnRanks(1, [](const ProcessGroup& g) {
    auto input = KeyedJaggedTensor::FromLengths({"A", "B"}, {1, 2}, {1, 1});
    ASSERT_TRUE(input.ok());
    auto out = KjtAllToAll(g, input.value(), {3});
    ASSERT_FALSE(out.ok());
    EXPECT_NE(out.status().message().find("splits sum to 3, the KJT has 2 keys"), std::string::npos);
    EXPECT_FALSE(KjtAllToAll(g, input.value(), {1, 1}).ok()) << "two splits for a world of one";
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, KjtAllToAllTest, ::testing::Values("local", "gloo"));

}  // namespace
}  // namespace shardrec
