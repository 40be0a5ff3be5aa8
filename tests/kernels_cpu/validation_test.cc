// Bad input to forward and backward: every validation answers with the
// right status code and a message naming the argument (and feature, bag,
// id), before anything is written — the output keeps its guard values and
// the tables read back unchanged. Bounds-check modes: FATAL writes nothing,
// WARNING and IGNORE compute as if bad ids were absent and count them.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <functional>

#include "kernel_test_util.h"

namespace shardrec::testing {
namespace {

using reference::RefLookup;
using reference::RefTable;

// Tables a (10 x 4) and b (50 x 3); feature 0 sums two bags of a, feature 1
// averages three bags of b, into a [3, 7] output (b at column 4).
class Validation : public ::testing::Test {
 protected:
  void SetUp() override {
    auto k =
        CreateKernel({{.name = "a", .rows = 10, .dim = 4}, {.name = "b", .rows = 50, .dim = 3}},
                     SR_OPTIMIZER_SGD, {{"learning_rate", "0.5"}});
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    kernel_.emplace(std::move(k).value());
    before_ = {ReadTable(*kernel_, 0), ReadTable(*kernel_, 1)};
  }
  static RefLookup Base() {
    RefLookup l;
    l.AddFeature(0, SR_POOLING_SUM, {2, 1}, {1, 2, 3}, 0, 0, {1.0f, 2.0f, 0.5f});
    l.AddFeature(1, SR_POOLING_MEAN, {1, 2, 2}, {4, 5, 6, 7, 8}, 0, 4,
                 {1.0f, 1.0f, 1.0f, 1.0f, 1.0f});
    return l;
  }
  void ExpectTablesUnchanged() {
    EXPECT_EQ(ReadTable(*kernel_, 0).weights, before_[0].weights);
    EXPECT_EQ(ReadTable(*kernel_, 1).weights, before_[1].weights);
  }

  std::optional<Kernel> kernel_;
  std::vector<RefTable> before_;
};

struct BadCase {
  const char* name;
  std::function<void(RefLookup&)> edit_lookup;       // before the args are built
  std::function<void(LookupArgs&, GuardedOutput&)> edit_args;  // after
  int32_t code;
  const char* message;
  // Only the written output must not overlap; grad_output may.
  bool forward_only = false;
};

TEST_F(Validation, EveryBadForwardArgumentIsRefusedBeforeWriting) {
  int64_t shape_i32[1] = {6};
  int32_t offsets_i32[6] = {0, 2, 3, 4, 6, 8};
  double weights_f64[8] = {};
  int64_t shape5[1] = {5};
  int64_t shape_2d[2] = {2, 4};
  int64_t shape_1d[1] = {21};
  int64_t overlap_strides[2] = {1, 1};
  std::vector<BadCase> cases = {
      {"feature_bag_offsets[0]", [](RefLookup& l) { l.feature_bag_offsets[0] = 1; }, nullptr,
       SR_INVALID_ARGUMENT, "feature_bag_offsets[0] must be 0, got 1"},
      {"feature_bag_offsets decrease", [](RefLookup& l) { l.feature_bag_offsets = {0, 2, 1}; },
       nullptr, SR_INVALID_ARGUMENT, "feature_bag_offsets decreases at feature 1"},
      {"table index", [](RefLookup& l) { l.feature_table[1] = 2; }, nullptr, SR_INVALID_ARGUMENT,
       "feature 1: table index 2 is out of range (the kernel holds 2 tables)"},
      {"negative table index", [](RefLookup& l) { l.feature_table[0] = -1; }, nullptr,
       SR_INVALID_ARGUMENT, "feature 0: table index -1 is out of range"},
      {"pooling", [](RefLookup& l) { l.feature_pooling[1] = 7; }, nullptr, SR_INVALID_ARGUMENT,
       "feature 1 (table 'b'): pooling 7 is not SUM (0), MEAN (1) or NONE (2)"},
      {"offsets[0]", [](RefLookup& l) { l.offsets[0] = 1; }, nullptr, SR_INVALID_ARGUMENT,
       "offsets[0] must be 0, got 1"},
      {"negative length", [](RefLookup& l) { l.offsets[4] = 3; }, nullptr, SR_INVALID_ARGUMENT,
       "feature 1 (table 'b'), bag 1: negative length (offsets[3] = 4 > offsets[4] = 3)"},
      {"lengths vs nnz",
       [](RefLookup& l) {
         l.indices.push_back(0);
         l.per_sample_weights.push_back(1.0f);
       },
       nullptr, SR_INVALID_ARGUMENT, "bag lengths sum to 8 but indices has 9 values"},
      {"weights length", [](RefLookup& l) { l.per_sample_weights.pop_back(); }, nullptr,
       SR_INVALID_ARGUMENT, "per_sample_weights has 7 entries, expected one per index (nnz = 8)"},
      {"weights dtype", nullptr,
       [&](LookupArgs& a, GuardedOutput&) {
         a.weights->get()->dtype = DLDataType{kDLFloat, 64, 1};
         a.weights->get()->data = weights_f64;
       },
       SR_INVALID_ARGUMENT, "per_sample_weights: expected dtype float32, got float64"},
      {"offsets dtype", nullptr,
       [&](LookupArgs& a, GuardedOutput&) {
         a.offsets->dtype = DLDataType{kDLInt, 32, 1};
         a.offsets->data = offsets_i32;
         a.offsets->shape = shape_i32;
       },
       SR_INVALID_ARGUMENT, "offsets: expected dtype int64, got int32"},
      {"offsets length", nullptr, [&](LookupArgs& a, GuardedOutput&) { a.offsets->shape = shape5; },
       SR_INVALID_ARGUMENT, "offsets: expected extent 6 in dimension 0, got shape [5]"},
      {"offsets NULL", nullptr, [](LookupArgs& a, GuardedOutput&) { a.args.offsets = nullptr; },
       SR_INVALID_ARGUMENT, "offsets: tensor is NULL"},
      {"indices rank", nullptr,
       [&](LookupArgs& a, GuardedOutput&) {
         a.indices->ndim = 2;
         a.indices->shape = shape_2d;
       },
       SR_INVALID_ARGUMENT, "indices: expected 1 dimensions, got shape [2, 4]"},
      {"indices device", nullptr,
       [](LookupArgs& a, GuardedOutput&) { a.indices->device = DLDevice{kDLCUDA, 0}; },
       SR_INVALID_ARGUMENT, "indices: expected a CPU tensor, got device type 2"},
      {"output dtype", nullptr,
       [](LookupArgs&, GuardedOutput& o) { o.tensor()->dtype = DLDataType{kDLFloat, 64, 1}; },
       SR_INVALID_ARGUMENT, "output: expected dtype float32, got float64"},
      {"output device", nullptr,
       [](LookupArgs&, GuardedOutput& o) { o.tensor()->device = DLDevice{kDLCUDA, 0}; },
       SR_INVALID_ARGUMENT, "output: expected a CPU tensor"},
      {"output rank", nullptr,
       [&](LookupArgs&, GuardedOutput& o) {
         o.tensor()->ndim = 1;
         o.tensor()->shape = shape_1d;
         o.tensor()->strides = nullptr;
       },
       SR_INVALID_ARGUMENT, "output: expected 2 dimensions, got shape [21]"},
      {"output rows", nullptr, [](LookupArgs&, GuardedOutput& o) { o.tensor()->shape[0] = 2; },
       SR_INVALID_ARGUMENT,
       "feature 1 (table 'b') covers output rows [0, 3) and columns [4, 7), outside output of "
       "shape [2, 7]"},
      {"output columns", nullptr, [](LookupArgs&, GuardedOutput& o) { o.tensor()->shape[1] = 6; },
       SR_INVALID_ARGUMENT, "feature 1 (table 'b') covers output rows [0, 3) and columns [4, 7)"},
      {"negative output row", [](RefLookup& l) { l.feature_output_row[0] = -1; }, nullptr,
       SR_INVALID_ARGUMENT, "feature 0 (table 'a') covers output rows [-1, 1)"},
      {"overlapping output", nullptr,
       [&](LookupArgs&, GuardedOutput& o) { o.tensor()->strides = overlap_strides; },
       SR_INVALID_ARGUMENT, "output: strides [1, 1] make elements of a [3, 7] tensor overlap",
       true},
      {"overlapping features",
       [](RefLookup& l) { l.feature_output_col[1] = 3; }, nullptr, SR_INVALID_ARGUMENT,
       "features 0 and 1 would both write output element (0, 3)", true},
      {"bounds mode", nullptr, [](LookupArgs& a, GuardedOutput&) { a.args.bounds_check = 9; },
       SR_INVALID_ARGUMENT, "bounds_check 9 is not FATAL (0), WARNING (1), IGNORE (2) or NONE (3)"},
      {"struct size", nullptr, [](LookupArgs& a, GuardedOutput&) { a.args.struct_size = 16; },
       SR_INVALID_ARGUMENT, "struct_size 16 is smaller than sr_kernel_lookup_args v1.0"},
      {"NULL feature array", nullptr,
       [](LookupArgs& a, GuardedOutput&) { a.args.feature_output_col = nullptr; },
       SR_INVALID_ARGUMENT, "2 features but a feature_* array is NULL"},
  };
  for (const BadCase& c : cases) {
    SCOPED_TRACE(c.name);
    RefLookup l = Base();
    if (c.edit_lookup) c.edit_lookup(l);
    LookupArgs args(l);
    GuardedOutput out(3, 7);
    if (c.edit_args) c.edit_args(args, out);
    sr_kernel_forward_args f{};
    f.struct_size = SR_STRUCT_SIZE(sr_kernel_forward_args, output);
    f.lookup = &args.args;
    f.output = out.tensor();
    const Status s = kernel_->Forward(f);
    EXPECT_EQ(s.code(), c.code) << s.ToString();
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
    EXPECT_TRUE(out.Untouched());
    if (c.forward_only) continue;
    // The same arguments to backward (with the output as gradient) change
    // no table.
    sr_kernel_backward_args b{};
    b.struct_size = SR_STRUCT_SIZE(sr_kernel_backward_args, learning_rate);
    b.lookup = &args.args;
    b.grad_output = out.tensor();
    b.iteration = 1;
    b.learning_rate = std::nan("");
    const Status sb = kernel_->Backward(b);
    EXPECT_EQ(sb.code(), c.code) << sb.ToString();
    ExpectTablesUnchanged();
  }
}

TEST_F(Validation, ForwardArgsOfAnOlderSmallerLayoutAreRefused) {
  RefLookup l = Base();
  LookupArgs args(l);
  GuardedOutput out(3, 7);
  sr_kernel_forward_args f{};
  f.struct_size = 8;
  f.lookup = &args.args;
  f.output = out.tensor();
  const Status s = kernel_->Forward(f);
  EXPECT_EQ(s.code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("sr_kernel_forward_args"), std::string::npos) << s.message();
  EXPECT_TRUE(out.Untouched());
}

RefLookup WithBadIds() {
  RefLookup l;
  l.AddFeature(0, SR_POOLING_SUM, {2, 1}, {1, 2, -3}, 0, 0, {1.0f, 2.0f, 0.5f});
  l.AddFeature(1, SR_POOLING_MEAN, {1, 2, 2}, {4, 5, 6, 7, 50}, 0, 4,
               {1.0f, 1.0f, 1.0f, 1.0f, 1.0f});
  return l;
}

TEST_F(Validation, FatalBoundsCheckNamesTheFirstBadIdAndWritesNothing) {
  const RefLookup l = WithBadIds();
  GuardedOutput out(3, 7);
  int64_t invalid = -1;
  const Status s = Forward(*kernel_, l, out.tensor(), SR_BOUNDS_CHECK_FATAL, &invalid);
  EXPECT_EQ(s.code(), SR_OUT_OF_RANGE);
  EXPECT_NE(s.message().find("feature 0 (table 'a'), bag 1, position 0 (indices[2]): id -3 is "
                             "out of range for table 'a' with 10 rows (2 ids out of range"),
            std::string::npos)
      << s.message();
  EXPECT_EQ(invalid, 2);
  EXPECT_TRUE(out.Untouched());

  std::vector<float> grad(21, 1.0f);
  const Status sb = Backward(*kernel_, l, grad, 7, 1, std::nan(""), SR_BOUNDS_CHECK_FATAL);
  EXPECT_EQ(sb.code(), SR_OUT_OF_RANGE);
  ExpectTablesUnchanged();

  // Second offender alone: bag and position inside feature 1.
  RefLookup l2 = Base();
  l2.indices[7] = 50;
  EXPECT_NE(Forward(*kernel_, l2, out.tensor()).message().find(
                "feature 1 (table 'b'), bag 2, position 1 (indices[7]): id 50 is out of range "
                "for table 'b' with 50 rows (1 ids"),
            std::string::npos);
  EXPECT_TRUE(out.Untouched());
}

TEST_F(Validation, WarningAndIgnoreTreatBadIdsAsAbsentAndCountThem) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(16);
  spdlog::default_logger()->sinks().push_back(sink);
  const RefLookup l = WithBadIds();
  const ExpectedOutput e = ReferenceOutput(before_, l, 3, 7);
  for (int32_t mode : {SR_BOUNDS_CHECK_WARNING, SR_BOUNDS_CHECK_IGNORE}) {
    SCOPED_TRACE(mode == SR_BOUNDS_CHECK_WARNING ? "WARNING" : "IGNORE");
    GuardedOutput out(3, 7);
    int64_t invalid = -1;
    ASSERT_TRUE(Forward(*kernel_, l, out.tensor(), mode, &invalid).ok());
    EXPECT_EQ(invalid, 2);
    EXPECT_TRUE(out.Matches(e.values, e.magnitude, 1e-5));
    // Mean divides by the full bag length, the dropped id included.
    EXPECT_NEAR(out.At(2, 4), before_[1].W(7, 0) / 2.0f, 1e-6);
  }
  spdlog::default_logger()->sinks().pop_back();
  const std::vector<std::string> lines = sink->last_formatted();
  ASSERT_EQ(lines.size(), 1u) << "one line for the WARNING call, none for IGNORE";
  EXPECT_NE(lines[0].find("forward: 2 ids out of range, treated as absent; the first: feature 0 "
                          "(table 'a'), bag 1, position 0 (indices[2]): id -3"),
            std::string::npos)
      << lines[0];

  // Backward: bad ids are absent there too.
  std::vector<RefTable> ref = before_;
  std::vector<float> grad(21);
  for (size_t i = 0; i < grad.size(); ++i) grad[i] = 0.1f * static_cast<float>(i) - 1.0f;
  ASSERT_TRUE(Backward(*kernel_, l, grad, 7, 1, std::nan(""), SR_BOUNDS_CHECK_IGNORE).ok());
  reference::RefOptimizer opt = reference::DefaultOptimizer(SR_OPTIMIZER_SGD);
  opt.learning_rate = 0.5;
  reference::Backward(ref, l, grad, 7, opt, 1);
  for (int32_t t = 0; t < 2; ++t) {
    const RefTable got = ReadTable(*kernel_, t);
    for (size_t i = 0; i < got.weights.size(); ++i) {
      ASSERT_NEAR(got.weights[i], ref[static_cast<size_t>(t)].weights[i], 1e-6) << t << " " << i;
    }
  }
}

TEST_F(Validation, BoundsCheckNoneTrustsInRangeIds) {
  const RefLookup l = Base();
  GuardedOutput out(3, 7);
  int64_t invalid = -1;
  ASSERT_TRUE(Forward(*kernel_, l, out.tensor(), SR_BOUNDS_CHECK_NONE, &invalid).ok());
  EXPECT_EQ(invalid, 0);
  const ExpectedOutput e = ReferenceOutput(before_, l, 3, 7);
  EXPECT_TRUE(out.Matches(e.values, e.magnitude, 1e-5));
}

TEST_F(Validation, GradOutputIsValidatedLikeTheOutput) {
  const RefLookup l = Base();
  std::vector<float> small(2 * 7, 1.0f);
  const Status s = Backward(*kernel_, l, small, 7);
  EXPECT_EQ(s.code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("feature 1 (table 'b') covers grad_output rows [0, 3)"),
            std::string::npos)
      << s.message();
  std::vector<float> grad(21, 1.0f);
  EXPECT_NE(Backward(*kernel_, l, grad, 7, 1, -1.0).message().find("learning_rate must be"),
            std::string::npos);
  EXPECT_NE(Backward(*kernel_, l, grad, 7, 1, INFINITY).message().find("learning_rate must be"),
            std::string::npos);
  ExpectTablesUnchanged();
}

}  // namespace
}  // namespace shardrec::testing
