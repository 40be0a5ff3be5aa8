// The plugin SDK's helpers, used directly (they are header-only).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "shardrec/sdk/init.hpp"
#include "shardrec/sdk/plugin.hpp"

namespace shardrec::sdk {
namespace {

sr_named_value Str(const char* k, const char* v) { return StringAttr(k, v); }

// A row drawn at once must hold exactly what drawing each weight alone
// gives: kernels use either, and sharded tables must match unsharded ones.
TEST(SdkInit, RowWeightsAreTheElementWeightsBitForBit) {
  for (const uint64_t seed : {uint64_t{0}, uint64_t{99}, ~uint64_t{0}}) {
    for (const int64_t row : {int64_t{0}, int64_t{7}, int64_t{123456789}}) {
      std::vector<float> got(37);
      InitialRowWeights(seed, row, 5, 37, -0.25, 0.75, got.data());
      for (int64_t c = 0; c < 37; ++c) {
        const float want = InitialWeight(seed, row, 5 + c, -0.25, 0.75);
        EXPECT_EQ(std::memcmp(&got[static_cast<size_t>(c)], &want, sizeof(float)), 0)
            << "seed " << seed << " row " << row << " col " << 5 + c;
      }
    }
  }
}

TEST(SdkOptions, TypedGettersAndFinish) {
  const sr_named_value values[] = {Str("lr", "0.5"), Str("steps", "7"), Str("on", "true"),
                                   Str("name", "x")};
  Options o({values, 4}, "kernel test");
  EXPECT_DOUBLE_EQ(o.GetDouble("lr", 0), 0.5);
  EXPECT_EQ(o.GetInt("steps", 0), 7);
  EXPECT_TRUE(o.GetBool("on", false));
  EXPECT_EQ(o.GetString("name", ""), "x");
  EXPECT_EQ(o.GetInt("absent", 3), 3);
  EXPECT_NO_THROW(o.Finish());
}

TEST(SdkOptions, BadValuesAndUnknownKeysNameTheKey) {
  const sr_named_value values[] = {Str("lr", "fast"), Str("typo", "1")};
  Options o({values, 2}, "kernel test");
  try {
    o.GetDouble("lr", 0);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), SR_INVALID_ARGUMENT);
    EXPECT_STREQ(e.what(), "kernel test: option 'lr' must be a number, got 'fast'");
  }
  try {
    o.Finish();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "kernel test: unknown option 'typo' (accepted: lr)");
  }
}

TEST(SdkTensor, ChecksDtypeShapeDeviceAndHonoursStridesAndOffset) {
  std::vector<float> data(12);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i);
  int64_t shape[2] = {2, 3};
  int64_t strides[2] = {6, 2};  // every other column of a 2x6 buffer
  DLTensor t{};
  t.data = data.data();
  t.device = {kDLCPU, 0};
  t.ndim = 2;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  t.strides = strides;
  t.byte_offset = sizeof(float);  // start at element 1
  TensorView<const float, 2> v(&t, "x", {2, 3});
  EXPECT_EQ(v(0, 0), 1.0f);
  EXPECT_EQ(v(0, 2), 5.0f);
  EXPECT_EQ(v(1, 1), 9.0f);
  EXPECT_FALSE(v.IsContiguous());

  auto message = [&](auto make) {
    try {
      make();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message([&] { TensorView<const double, 2> w(&t, "x"); }),
            "x: expected dtype float64, got float32");
  EXPECT_EQ(message([&] { TensorView<const float, 2> w(&t, "x", {3, -1}); }),
            "x: expected extent 3 in dimension 0, got shape [2, 3]");
  EXPECT_EQ(message([&] { TensorView<const float, 1> w(&t, "x"); }),
            "x: expected 1 dimensions, got shape [2, 3]");
  t.device = {kDLCUDA, 0};
  EXPECT_EQ(message([&] { TensorView<const float, 2> w(&t, "x"); }),
            "x: expected a CPU tensor, got device type 2");
  t.device = {kDLCPU, 0};
  t.byte_offset = 2;
  EXPECT_EQ(message([&] { TensorView<const float, 2> w(&t, "x"); }),
            "x: byte_offset 2 is not a multiple of the element size");
  EXPECT_EQ(message([&] { TensorView<const float, 2> w(nullptr, "y"); }), "y: tensor is NULL");
}

TEST(SdkGuard, EveryExceptionBecomesAStatus) {
  sr_status* s = Guard([] { throw Error(SR_OUT_OF_RANGE, "id 9 >= 8"); });
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(StatusCode(s), SR_OUT_OF_RANGE);
  EXPECT_STREQ(StatusMessage(s), "id 9 >= 8");
  StatusDestroy(s);
  s = Guard([] { throw std::runtime_error("boom"); });
  EXPECT_EQ(StatusCode(s), SR_INTERNAL);
  EXPECT_STREQ(StatusMessage(s), "uncaught exception: boom");
  StatusDestroy(s);
  s = Guard([] { throw 42; });
  EXPECT_EQ(StatusCode(s), SR_INTERNAL);
  StatusDestroy(s);
  s = Guard([] { throw std::bad_alloc(); });
  EXPECT_EQ(StatusCode(s), SR_RESOURCE_EXHAUSTED);
  StatusDestroy(s);
  EXPECT_EQ(Guard([] {}), nullptr);
}

// A sharder with every optional entry, to reach the adapters' argument checks.
class AllEntriesSharder {
 public:
  explicit AllEntriesSharder(Options&) {}
  void ShardTable(const sr_shard_table_args&) {}
  void RouteIds(const sr_route_ids_args&) { ADD_FAILURE() << "route_ids ran with bad arguments"; }
  void EstimateStorage(const sr_estimate_storage_args&) { ADD_FAILURE() << "estimate_storage ran with bad arguments"; }
};

// Every adapter entry refuses a NULL handle or NULL args with
// INVALID_ARGUMENT instead of dereferencing them (route_ids and
// estimate_storage once did not check).
TEST(SdkSharderVtable, EveryEntryRefusesNullHandleAndArgs) {
  const sr_sharder_vtable& vt = SharderVtable<AllEntriesSharder>();
  ASSERT_NE(vt.route_ids, nullptr);
  ASSERT_NE(vt.estimate_storage, nullptr);
  sr_sharder* h = nullptr;
  ASSERT_EQ(vt.create(sr_named_value_list{nullptr, 0}, &h), nullptr);
  sr_route_ids_args route{};
  route.struct_size = sizeof(route);
  sr_estimate_storage_args estimate{};
  estimate.struct_size = sizeof(estimate);
  auto expect_refused = [](sr_status* s, const char* entry) {
    ASSERT_NE(s, nullptr) << entry;
    EXPECT_EQ(StatusCode(s), SR_INVALID_ARGUMENT) << entry;
    EXPECT_NE(std::string(StatusMessage(s)).find(entry), std::string::npos) << StatusMessage(s);
    StatusDestroy(s);
  };
  expect_refused(vt.route_ids(h, nullptr), "route_ids");
  expect_refused(vt.route_ids(nullptr, &route), "route_ids");
  expect_refused(vt.estimate_storage(h, nullptr), "estimate_storage");
  expect_refused(vt.estimate_storage(nullptr, &estimate), "estimate_storage");
  expect_refused(vt.shard_table(h, nullptr), "shard_table");
  vt.destroy(h);
}

}  // namespace
}  // namespace shardrec::sdk
