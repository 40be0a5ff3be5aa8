// KeyedJaggedTensor, JaggedTensor and KeyedTensor: construction, the seeds'
// layout, validation messages, permute/split/concat/to_dict, regroup.
#include <gtest/gtest.h>

#include <memory>

#include "fixture_paths.h"
#include "shardrec/core/io/batch_dir.h"
#include "shardrec/core/sparse/keyed_jagged_tensor.h"
#include "shardrec/core/sparse/keyed_tensor.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec {
namespace {

using V = std::vector<int64_t>;

// The seeds' example: f1 = [0,1] [] [2], f2 = [3] [4] [5,6,7].
KeyedJaggedTensor SeedKjt(bool weighted = false) {
  std::optional<std::vector<float>> w;
  if (weighted) w = std::vector<float>{.1f, .2f, .3f, .4f, .5f, .6f, .7f, .8f};
  return KeyedJaggedTensor::FromOffsets({"f1", "f2"}, {0, 1, 2, 3, 4, 5, 6, 7}, {0, 2, 2, 3, 4, 5, 8}, w).value();
}

TEST(Kjt, SeedLayoutFromOffsets) {
  const auto kjt = SeedKjt();
  EXPECT_EQ(kjt.stride(), 3);
  EXPECT_FALSE(kjt.variable_stride_per_key());
  EXPECT_EQ(kjt.lengths(), (V{2, 0, 1, 1, 1, 3}));
  EXPECT_EQ(kjt.length_per_key(), (V{3, 5}));
  EXPECT_EQ(kjt.offset_per_key(), (V{0, 3, 8}));
  const auto dict = kjt.ToDict();
  EXPECT_EQ(dict.at("f1").lengths, (V{2, 0, 1}));
  EXPECT_EQ(dict.at("f2").lengths, (V{1, 1, 3}));
  EXPECT_EQ(dict.at("f2").values.data<int64_t>()[4], 7);
  EXPECT_EQ(dict.at("f2").offsets(), (V{0, 1, 2, 5}));
}

TEST(Kjt, FromLengthsEqualsFromOffsets) {
  auto a = KeyedJaggedTensor::FromLengths({"f1", "f2"}, {0, 1, 2, 3, 4, 5, 6, 7}, {2, 0, 1, 1, 1, 3});
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->offsets(), SeedKjt().offsets());
}

// Ids another runtime owns (a torch tensor through DLPack) are borrowed:
// the KJT reads them in place and keeps their owner alive; copies share
// them; what derives a new KJT (permute, replace) owns its own.
TEST(Kjt, BorrowedIdsAreSharedNotCopied) {
  auto ids = std::make_shared<V>(V{0, 1, 2, 3, 4, 5, 6, 7});
  auto w = std::make_shared<std::vector<float>>(8, 0.5f);
  const std::weak_ptr<V> watch = ids;
  const int64_t* where = ids->data();
  auto kjt = KeyedJaggedTensor::FromOffsets({"f1", "f2"}, SharedArray<int64_t>::Borrow(ids->data(), ids->size(), ids),
                                            {0, 2, 2, 3, 4, 5, 8},
                                            SharedArray<float>::Borrow(w->data(), w->size(), w))
                 .value();
  ids.reset();
  w.reset();
  ASSERT_FALSE(watch.expired()) << "the KJT must keep the ids' owner alive";
  EXPECT_EQ(kjt.values().data(), where);
  EXPECT_TRUE(kjt.values().borrowed());
  EXPECT_TRUE(kjt.weights()->borrowed());
  EXPECT_EQ(kjt.values(), (V{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(kjt.offsets(), SeedKjt().offsets());

  KeyedJaggedTensor copy = kjt;
  EXPECT_EQ(copy.values().data(), where) << "copies share the ids";
  auto permuted = kjt.Permute({1, 0}).value();
  EXPECT_FALSE(permuted.values().borrowed());
  EXPECT_EQ(permuted.values(), (V{3, 4, 5, 6, 7, 0, 1, 2}));
  ASSERT_TRUE(copy.ReplaceValues(V{7, 6, 5, 4, 3, 2, 1, 0}).ok());
  EXPECT_FALSE(copy.values().borrowed());
  EXPECT_EQ(kjt.values(), (V{0, 1, 2, 3, 4, 5, 6, 7})) << "replacing a copy's ids leaves the original's";
  EXPECT_EQ(kjt.Feature(1).values.data<int64_t>()[4], 7);

  SharedArray<int64_t> moved = kjt.values();
  SharedArray<int64_t> target = std::move(moved);
  EXPECT_TRUE(moved.empty()) << "a moved-from array is empty, not a view of memory it no longer keeps";  // NOLINT
  EXPECT_EQ(moved.data(), nullptr);  // NOLINT(bugprone-use-after-move)
  EXPECT_EQ(target.data(), where);
  target = SharedArray<int64_t>();
  kjt = KeyedJaggedTensor();
  EXPECT_TRUE(watch.expired()) << "the last KJT sharing the ids releases their owner";
}

// Hostile sizes are refused, not overflowed (UBSan flagged the sums; the
// kjt fuzz target found the stride one).
TEST(Kjt, OverflowingLengthsAndStridesAreRefused) {
  constexpr int64_t kBig = int64_t{1} << 62;
  auto strides = KeyedJaggedTensor::FromLengths({"a", "b"}, {}, {0, 0}, std::nullopt, {kBig, kBig});
  EXPECT_EQ(strides.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(strides.status().message().find("stride_per_key sums past 2^63"), std::string::npos)
      << strides.status().message();
  auto lengths = KeyedJaggedTensor::FromLengths({"a"}, {1, 2}, {kBig, kBig});
  EXPECT_EQ(lengths.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(lengths.status().message().find("lengths sum past 2^63"), std::string::npos) << lengths.status().message();
}

TEST(Kjt, ValidationNamesKeyAndSample) {
  auto neg = KeyedJaggedTensor::FromLengths({"f1", "f2"}, {0, 1, 2}, {1, 1, 1, 1, -1, 0});
  EXPECT_EQ(neg.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(neg.status().message().find("key 'f2' sample 1: negative length -1"), std::string::npos)
      << neg.status().message();
  auto sum = KeyedJaggedTensor::FromLengths({"f1"}, {0, 1, 2}, {1, 1});
  EXPECT_NE(sum.status().message().find("lengths sum to 2 but there are 3 values"), std::string::npos);
  auto w = KeyedJaggedTensor::FromLengths({"f1"}, {0, 1}, {1, 1}, std::vector<float>{1.0f});
  EXPECT_NE(w.status().message().find("weights have 1 entries, expected 2"), std::string::npos);
  auto uneven = KeyedJaggedTensor::FromLengths({"a", "b"}, {0, 1, 2}, {1, 1, 1});
  EXPECT_NE(uneven.status().message().find("do not divide evenly"), std::string::npos);
  auto dup = KeyedJaggedTensor::FromLengths({"a", "a"}, {}, {0, 0});
  EXPECT_NE(dup.status().message().find("duplicate key 'a'"), std::string::npos);
  auto off = KeyedJaggedTensor::FromOffsets({"a"}, {0, 1}, {0, 2, 1});
  EXPECT_NE(off.status().message().find("negative length -1"), std::string::npos);
  auto strides = KeyedJaggedTensor::FromLengths({"a", "b"}, {0}, {1, 0, 0}, {}, {1, 1});
  EXPECT_NE(strides.status().message().find("stride_per_key sums to 2 samples but there are 3 lengths"),
            std::string::npos);
}

TEST(Kjt, VariableStridePerKey) {
  // The seeds' variable-batch example: f_0 has 2 samples, f_1 has 1, f_2 has 3.
  auto kjt = KeyedJaggedTensor::FromLengths({"f_0", "f_1", "f_2"}, {1, 2, 3, 4, 5, 6, 7}, {1, 1, 2, 1, 1, 1},
                                            {}, {2, 1, 3});
  ASSERT_TRUE(kjt.ok()) << kjt.status().ToString();
  EXPECT_TRUE(kjt->variable_stride_per_key());
  EXPECT_EQ(kjt->stride(), 3);
  EXPECT_EQ(kjt->BagOffset(2), 3);
  EXPECT_EQ(kjt->ToDict().at("f_2").lengths, (V{1, 1, 1}));
  auto f1 = kjt->Select({"f_2", "f_0"});
  ASSERT_TRUE(f1.ok());
  EXPECT_EQ(f1->stride_per_key(), (V{3, 2}));
  EXPECT_EQ(f1->values(), (V{5, 6, 7, 1, 2}));
}

TEST(Kjt, PermuteSplitConcat) {
  const auto kjt = SeedKjt(/*weighted=*/true);
  auto p = kjt.Permute({1, 0});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->keys(), (std::vector<std::string>{"f2", "f1"}));
  EXPECT_EQ(p->values(), (V{3, 4, 5, 6, 7, 0, 1, 2}));
  EXPECT_EQ(p->lengths(), (V{1, 1, 3, 2, 0, 1}));
  EXPECT_FLOAT_EQ((*p->weights())[0], .4f);
  auto fan = kjt.Permute({0, 0});  // TorchRec allows repeats for fan-out
  ASSERT_TRUE(fan.ok());
  EXPECT_EQ(fan->values(), (V{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(kjt.Permute({2}).status().code(), SR_INVALID_ARGUMENT);

  auto parts = kjt.Split({1, 1});
  ASSERT_TRUE(parts.ok());
  EXPECT_EQ((*parts)[1].values(), (V{3, 4, 5, 6, 7}));
  EXPECT_NE(kjt.Split({1}).status().message().find("segments sum to 1 but there are 2 keys"), std::string::npos);
  auto back = KeyedJaggedTensor::Concat(*parts);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->values(), kjt.values());
  EXPECT_EQ(back->lengths(), kjt.lengths());
  EXPECT_EQ(*back->weights(), *kjt.weights());
  EXPECT_EQ(kjt.Select({"nope"}).status().code(), SR_NOT_FOUND);
}

TEST(Kjt, DictRoundTrip) {
  const auto kjt = SeedKjt(true);
  auto back = KeyedJaggedTensor::FromDict(kjt.keys(), kjt.ToDict());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->values(), kjt.values());
  EXPECT_EQ(*back->weights(), *kjt.weights());
  EXPECT_EQ(KeyedJaggedTensor::FromDict({"f1", "zz"}, kjt.ToDict()).status().code(), SR_NOT_FOUND);
}

TEST(Kjt, SliceAndConcatSamplesRoundTrip) {
  const auto kjt = SeedKjt(true);  // f1 = [0,1] [] [2], f2 = [3] [4] [5,6,7]
  auto head = kjt.SliceSamples(0, 1), tail = kjt.SliceSamples(1, 3);
  ASSERT_TRUE(head.ok() && tail.ok());
  EXPECT_EQ(head->values(), (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(tail->lengths(), (std::vector<int64_t>{0, 1, 1, 3}));
  auto back = KeyedJaggedTensor::ConcatSamples({head.value(), tail.value()});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->values(), kjt.values());
  EXPECT_EQ(back->lengths(), kjt.lengths());
  EXPECT_EQ(*back->weights(), *kjt.weights());
  EXPECT_EQ(kjt.SliceSamples(2, 4).status().code(), SR_OUT_OF_RANGE);
  EXPECT_FALSE(KeyedJaggedTensor::ConcatSamples({kjt, SeedKjt(false)}).ok());
}

TEST(Kjt, DirectoryRoundTripAndBadFiles) {
  const auto dir = testing::MakeTempDir("kjt");
  const auto kjt = SeedKjt(true);
  ASSERT_TRUE(WriteKjtDir(dir, kjt).ok());
  auto back = ReadKjtDir(dir);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->values(), kjt.values());
  EXPECT_EQ(back->keys(), kjt.keys());
  // Wrong dtype: float ids.
  ASSERT_TRUE(WriteNpy(dir / "values.npy", Tensor::Zeros(dtype::kFloat32, {8})).ok());
  auto bad = ReadKjtDir(dir);
  EXPECT_NE(bad.status().message().find("values.npy: expected int64 (or int32), got float32"), std::string::npos)
      << bad.status().message();
  // int32 ids are widened.
  ASSERT_TRUE(WriteNpy(dir / "values.npy", Tensor::FromVector(std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7})).ok());
  EXPECT_TRUE(ReadKjtDir(dir).ok());
  // Weights of the wrong length are named with the directory.
  ASSERT_TRUE(WriteNpy(dir / "weights.npy", Tensor::Zeros(dtype::kFloat32, {3})).ok());
  auto w = ReadKjtDir(dir);
  EXPECT_NE(w.status().message().find("weights have 3 entries, expected 8"), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST(KeyedTensor, SeedOffsetsAndRegroup) {
  Tensor a = Tensor::FromVector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = Tensor::FromVector(std::vector<float>{7, 8, 9, 10, 11, 12, 13, 14}, {2, 4});
  auto kt = KeyedTensor::FromTensors({"f1", "f2"}, {a, b});
  ASSERT_TRUE(kt.ok());
  EXPECT_EQ(kt->offset_per_key(), (V{0, 3, 7}));
  EXPECT_EQ(kt->values().shape(), (V{2, 7}));
  EXPECT_EQ(kt->values().data<float>()[7 + 3], 11);
  auto f2 = kt->At("f2");
  ASSERT_TRUE(f2.ok());
  EXPECT_EQ(f2->data<float>()[4], 11);
  auto groups = KeyedTensor::Regroup({kt.value()}, {{"f2"}, {"f2", "f1"}});
  ASSERT_TRUE(groups.ok());
  EXPECT_EQ((*groups)[1].shape(), (V{2, 7}));
  EXPECT_EQ((*groups)[1].data<float>()[4], 1);  // f1 after f2's 4 columns
  EXPECT_EQ(KeyedTensor::Regroup({kt.value()}, {{"x"}}).status().code(), SR_NOT_FOUND);
  EXPECT_EQ(KeyedTensor::Create({"a"}, {3}, Tensor::Zeros(dtype::kFloat32, {2, 4})).status().code(),
            SR_INVALID_ARGUMENT);
}

}  // namespace
}  // namespace shardrec
