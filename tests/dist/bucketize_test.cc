// BucketizeKjt against the seeds' D-6 example, exactly, and with uneven
// row blocks, weights, several keys and the errors.
#include <gtest/gtest.h>

#include "shardrec/core/dist/bucketize.h"

namespace shardrec {
namespace {

using V = std::vector<int64_t>;

TEST(Bucketize, SeedD6OneKeyTwoBucketsOfFive) {
  // A = [[7, 1], [5], [2]], 10 rows in blocks of 5.
  auto kjt = KeyedJaggedTensor::FromLengths({"A"}, {7, 1, 5, 2}, {2, 1, 1});
  ASSERT_TRUE(kjt.ok());
  auto out = BucketizeKjtByBlockSize(kjt.value(), 2, {5});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->kjt.keys(), (std::vector<std::string>{"A", "A"}));
  EXPECT_EQ(out->kjt.lengths(), (V{1, 0, 1, 1, 1, 0}));
  EXPECT_EQ(out->kjt.values(), (V{1, 2, 2, 0}));
  EXPECT_EQ(out->permute, (V{2, 0, 3, 1}));
}

TEST(Bucketize, UnevenBlocksTwoKeysAndWeights) {
  // TorchRec's row_wise split of 5 rows over 3 ranks: [0,2) [2,4) [4,5); key
  // g over 3 rows: [0,1) [1,2) [2,3).
  auto kjt = KeyedJaggedTensor::FromLengths({"f", "g"}, {4, 0, 3, 2, 2, 0}, {3, 0, 1, 2},
                                            std::vector<float>{0.4f, 0.0f, 0.3f, 0.2f, 1.2f, 1.0f});
  ASSERT_TRUE(kjt.ok());
  auto out = BucketizeKjt(kjt.value(), {{0, 2, 4, 5}, {0, 1, 2, 3}});
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(out->kjt.keys(), (std::vector<std::string>{"f", "g", "f", "g", "f", "g"}));
  // f = [[4, 0, 3], []], g = [[2], [2, 0]].
  // bucket 0: f [0] [] | g [] [0]; bucket 1: f [3-2=1] [] | g [] []; bucket 2: f [4-4=0] [] | g [2-2=0] [2-2=0]
  EXPECT_EQ(out->kjt.lengths(), (V{1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 1, 1}));
  EXPECT_EQ(out->kjt.values(), (V{0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(*out->kjt.weights(), (std::vector<float>{0.0f, 1.0f, 0.3f, 0.4f, 0.2f, 1.2f}));
  // Every input id lands where permute says, with its weight.
  for (size_t i = 0; i < out->permute.size(); ++i) {
    EXPECT_EQ((*out->kjt.weights())[out->permute[i]], (*kjt->weights())[i]) << i;
  }
}

TEST(Bucketize, IdsOutsideTheTableNameKeyAndSample) {
  auto kjt = KeyedJaggedTensor::FromLengths({"f", "g"}, {1, 9}, {1, 0, 0, 1});
  ASSERT_TRUE(kjt.ok());
  auto out = BucketizeKjtByBlockSize(kjt.value(), 2, {3, 4});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("key 'g' sample 1: id 9 is outside rows [0, 8)"), std::string::npos)
      << out.status().message();
  EXPECT_FALSE(BucketizeKjt(kjt.value(), {{0, 5}}).ok()) << "one boundary list for two keys";
  EXPECT_FALSE(BucketizeKjt(kjt.value(), {{0, 5, 3}, {0, 2, 9}}).ok()) << "descending boundaries";
}

}  // namespace
}  // namespace shardrec
