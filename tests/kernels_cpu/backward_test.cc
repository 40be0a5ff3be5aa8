// Backward fused with each optimizer: against the scalar reference over
// several steps (ids repeated within a bag, across bags and across features
// of one table; weighted, mean and sequence features; weight decay), against
// the textbook formulas written out here on a tiny case, on fp16/bf16
// tables, and bit-identical for 1 and 2 threads.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>

#include "kernel_test_util.h"

namespace shardrec::testing {
namespace {

using reference::RefLookup;
using reference::RefOptimizer;
using reference::RefTable;

// |got - want| <= rel * max(1, |want|) for weights and state; rows the step
// did not touch (equal to `before` in the reference) must be bit-identical to
// the kernel's own previous values `got_before`.
void ExpectTableNear(const RefTable& got, const RefTable& want, const RefTable& before,
                     const RefTable& got_before, double rel, const std::string& what) {
  ASSERT_EQ(got.weights.size(), want.weights.size());
  ASSERT_EQ(got.state.size(), want.state.size());
  int failures = 0;
  for (int64_t r = 0; r < want.num_rows; ++r) {
    bool touched = false;
    for (int64_t c = 0; c < want.dim; ++c) touched |= want.W(r, c) != before.W(r, c);
    for (int64_t c = 0; c < want.dim && failures < 5; ++c) {
      const double g = got.W(r, c), w = want.W(r, c);
      const bool ok = touched ? std::fabs(g - w) <= rel * std::max(1.0, std::fabs(w))
                              : std::bit_cast<uint32_t>(got.W(r, c)) ==
                                    std::bit_cast<uint32_t>(got_before.W(r, c));
      if (!ok) {
        ADD_FAILURE() << what << ": weight (" << r << ", " << c << ") = " << g << ", want " << w
                      << (touched ? "" : " (untouched row changed)");
        ++failures;
      }
    }
    for (int64_t c = 0; c < want.state_dim && failures < 5; ++c) {
      const double g = got.state[static_cast<size_t>(r * want.state_dim + c)];
      const double w = want.state[static_cast<size_t>(r * want.state_dim + c)];
      if (std::fabs(g - w) > rel * std::max(1e-3, std::fabs(w))) {
        ADD_FAILURE() << what << ": state (" << r << ", " << c << ") = " << g << ", want " << w;
        ++failures;
      }
    }
  }
}

// A step's lookup: two features on table 0 (weighted sum, mean) and two on
// table 1 (sequence, sum), ids drawn from few rows so they repeat.
RefLookup StepLookup(std::mt19937_64& rng, int64_t rows0, int64_t dim0, int64_t rows1,
                     int64_t* out_rows, int64_t* out_cols) {
  RefLookup l;
  AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 12, 5, rows0, 0, 0, true);
  AddRandomFeature(l, rng, 0, SR_POOLING_MEAN, 9, 5, rows0, 0, dim0);
  AddRandomFeature(l, rng, 1, SR_POOLING_NONE, 6, 4, rows1, 12, 0, false);
  AddRandomFeature(l, rng, 1, SR_POOLING_SUM, 5, 4, rows1, 0, 2 * dim0);
  *out_rows = 12 + FeatureRows(l, 2);
  *out_cols = 2 * dim0 + 16;
  return l;
}

std::vector<float> RandomGrad(std::mt19937_64& rng, int64_t n) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> g(static_cast<size_t>(n));
  for (float& x : g) x = u(rng);
  return g;
}

struct OptimizerCase {
  int32_t optimizer;
  OptionList params;
  std::string label;
};

class OptimizerSweep : public ::testing::TestWithParam<OptimizerCase> {};

TEST_P(OptimizerSweep, ThreeStepsMatchTheReference) {
  const OptimizerCase& c = GetParam();
  constexpr int64_t kRows0 = 40, kDim0 = 7, kRows1 = 30;
  auto k = CreateKernel({{.name = "a", .rows = kRows0, .dim = kDim0},
                         {.name = "b", .rows = kRows1, .dim = 16}},
                        c.optimizer, c.params);
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const RefOptimizer opt = RefOptimizerFor(c.optimizer, c.params);
  std::vector<RefTable> ref = {ReadTable(*k, 0), ReadTable(*k, 1)};
  std::mt19937_64 rng(static_cast<uint64_t>(c.optimizer) * 7 + c.params.items().size());
  for (int64_t step = 1; step <= 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    int64_t rows = 0, cols = 0;
    const RefLookup l = StepLookup(rng, kRows0, kDim0, kRows1, &rows, &cols);
    std::vector<float> grad = RandomGrad(rng, rows * cols);
    const std::vector<RefTable> got_before = {ReadTable(*k, 0), ReadTable(*k, 1)};
    ASSERT_TRUE(Backward(*k, l, grad, cols, step).ok());
    const std::vector<RefTable> before = ref;
    reference::Backward(ref, l, grad, cols, opt, step);
    ExpectTableNear(ReadTable(*k, 0), ref[0], before[0], got_before[0], 2e-5, "table a");
    ExpectTableNear(ReadTable(*k, 1), ref[1], before[1], got_before[1], 2e-5, "table b");
  }
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, OptimizerSweep,
    ::testing::Values(
        OptimizerCase{SR_OPTIMIZER_SGD, {{"learning_rate", "0.1"}}, "sgd"},
        OptimizerCase{SR_OPTIMIZER_SGD, {{"learning_rate", "0.1"}, {"weight_decay", "0.05"}},
                      "sgd_weight_decay"},
        OptimizerCase{SR_OPTIMIZER_ADAGRAD, {{"learning_rate", "0.1"}}, "adagrad"},
        OptimizerCase{SR_OPTIMIZER_ADAGRAD,
                      {{"learning_rate", "0.1"}, {"weight_decay", "0.05"},
                       {"initial_accumulator_value", "0.1"}, {"eps", "1e-6"}},
                      "adagrad_decay_init"},
        OptimizerCase{SR_OPTIMIZER_ROWWISE_ADAGRAD, {{"learning_rate", "0.1"}}, "rowwise_adagrad"},
        OptimizerCase{SR_OPTIMIZER_ROWWISE_ADAGRAD,
                      {{"learning_rate", "0.1"}, {"weight_decay", "0.05"},
                       {"initial_accumulator_value", "0.2"}},
                      "rowwise_adagrad_decay_init"},
        OptimizerCase{SR_OPTIMIZER_ADAM, {{"learning_rate", "0.01"}}, "adam"},
        OptimizerCase{SR_OPTIMIZER_ADAM,
                      {{"learning_rate", "0.01"}, {"beta1", "0.8"}, {"beta2", "0.99"},
                       {"eps", "1e-6"}, {"weight_decay", "0.05"}},
                      "adam_custom"}),
    [](const auto& p) { return p.param.label; });

// The formulas of docs/kernels.md written out for one table of 4 rows x 3:
// feature 0 sums bag {1, 1, 2} with weights {1, 0.5, 2}, feature 1 averages
// bag {2, 3}; three steps with fixed gradients.
TEST(Backward, EachOptimizerFollowsItsTextbookFormula) {
  for (int32_t optimizer : {SR_OPTIMIZER_SGD, SR_OPTIMIZER_ADAGRAD, SR_OPTIMIZER_ROWWISE_ADAGRAD,
                            SR_OPTIMIZER_ADAM}) {
    SCOPED_TRACE("optimizer " + std::to_string(optimizer));
    const double lr = 0.1, wd = 0.01, b1 = 0.9, b2 = 0.999;
    const double eps = optimizer == SR_OPTIMIZER_ADAGRAD ? 1e-10 : 1e-8;
    auto k = CreateKernel({{.rows = 4, .dim = 3}}, optimizer,
                          {{"learning_rate", "0.1"}, {"weight_decay", "0.01"}});
    ASSERT_TRUE(k.ok()) << k.status().ToString();
    RefTable t = ReadTable(*k, 0);
    double w[4][3], s[4][6] = {};
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 3; ++c)
        w[r][c] = t.W(r, c) = 0.25f * static_cast<float>(r + 1) - 0.5f * c;
    }
    WriteTable(*k, 0, t);
    RefLookup l;
    l.AddFeature(0, SR_POOLING_SUM, {3}, {1, 1, 2}, 0, 0, {1.0f, 0.5f, 2.0f});
    l.AddFeature(0, SR_POOLING_MEAN, {2}, {2, 3}, 1, 0, {1.0f, 1.0f});
    for (int step = 1; step <= 3; ++step) {
      std::vector<float> grad = {0.3f * step, -0.2f, 0.1f, -0.4f, 0.5f / step, 0.25f};
      ASSERT_TRUE(Backward(*k, l, grad, 3, step).ok());
      // Summed gradient per row: row 1 gets (1 + 0.5) g0, row 2 gets
      // 2 g0 + g1 / 2, row 3 gets g1 / 2.
      double g[4][3] = {};
      for (int c = 0; c < 3; ++c) {
        g[1][c] = 1.5 * grad[c];
        g[2][c] = 2.0 * grad[c] + grad[3 + c] / 2.0;
        g[3][c] = grad[3 + c] / 2.0;
      }
      for (int r = 1; r < 4; ++r) {
        double gp[3], mean_sq = 0;
        for (int c = 0; c < 3; ++c) {
          gp[c] = g[r][c] + wd * w[r][c];
          mean_sq += gp[c] * gp[c] / 3.0;
        }
        if (optimizer == SR_OPTIMIZER_ROWWISE_ADAGRAD) s[r][0] += mean_sq;
        for (int c = 0; c < 3; ++c) {
          switch (optimizer) {
            case SR_OPTIMIZER_SGD: w[r][c] -= lr * gp[c]; break;
            case SR_OPTIMIZER_ADAGRAD:
              s[r][c] += gp[c] * gp[c];
              w[r][c] -= lr * gp[c] / (std::sqrt(s[r][c]) + eps);
              break;
            case SR_OPTIMIZER_ROWWISE_ADAGRAD:
              w[r][c] -= lr * gp[c] / (std::sqrt(s[r][0]) + eps);
              break;
            case SR_OPTIMIZER_ADAM: {
              s[r][c] = b1 * s[r][c] + (1 - b1) * gp[c];
              s[r][3 + c] = b2 * s[r][3 + c] + (1 - b2) * gp[c] * gp[c];
              const double m_hat = s[r][c] / (1 - std::pow(b1, step));
              const double v_hat = s[r][3 + c] / (1 - std::pow(b2, step));
              w[r][c] -= lr * m_hat / (std::sqrt(v_hat) + eps);
              break;
            }
          }
        }
      }
      const RefTable got = ReadTable(*k, 0);
      for (int r = 0; r < 4; ++r) {
        for (int c = 0; c < 3; ++c) {
          EXPECT_NEAR(got.W(r, c), w[r][c], 2e-6)
              << "step " << step << " (" << r << ", " << c << ")";
        }
        for (int c = 0; c < got.state_dim; ++c) {
          EXPECT_NEAR(got.state[static_cast<size_t>(r * got.state_dim + c)], s[r][c],
                      2e-6 * std::max(1.0, std::fabs(s[r][c])))
              << "state, step " << step << " (" << r << ", " << c << ")";
        }
      }
      EXPECT_EQ(got.W(0, 0), 0.25f) << "row 0 is never looked up";
    }
  }
}

class HalfTableSgd : public ::testing::TestWithParam<DLDataType> {};

TEST_P(HalfTableSgd, ThreeStepsMatchTheReferenceWithinOneUlp) {
  const DLDataType dtype = GetParam();
  auto k = CreateKernel({{.name = "a", .rows = 40, .dim = 7, .dtype = dtype},
                         {.name = "b", .rows = 30, .dim = 16, .dtype = dtype}},
                        SR_OPTIMIZER_SGD, {{"learning_rate", "0.1"}, {"weight_decay", "0.01"}});
  ASSERT_TRUE(k.ok()) << k.status().ToString();
  const RefOptimizer opt = RefOptimizerFor(SR_OPTIMIZER_SGD, {{"learning_rate", "0.1"},
                                                              {"weight_decay", "0.01"}});
  std::vector<RefTable> ref = {ReadTable(*k, 0), ReadTable(*k, 1)};
  // One unit in the last place relative to |w|: 2^-10 (fp16), 2^-7 (bf16);
  // double-then-round and float-then-round may differ by one near a tie.
  const double ulp = dtype.code == kDLBfloat ? 1.0 / 128 : 1.0 / 1024;
  std::mt19937_64 rng(3);
  for (int64_t step = 1; step <= 3; ++step) {
    int64_t rows = 0, cols = 0;
    const RefLookup l = StepLookup(rng, 40, 7, 30, &rows, &cols);
    std::vector<float> grad = RandomGrad(rng, rows * cols);
    const std::vector<RefTable> got_before = {ReadTable(*k, 0), ReadTable(*k, 1)};
    ASSERT_TRUE(Backward(*k, l, grad, cols, step).ok());
    const std::vector<RefTable> before = ref;
    reference::Backward(ref, l, grad, cols, opt, step);
    ExpectTableNear(ReadTable(*k, 0), ref[0], before[0], got_before[0], 2 * ulp, "table a");
    ExpectTableNear(ReadTable(*k, 1), ref[1], before[1], got_before[1], 2 * ulp, "table b");
    // Stored values are representable in the dtype (the kernel rounded).
    for (float v : ReadTable(*k, 0).weights) ASSERT_EQ(v, reference::RoundToDType(v, dtype));
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HalfTableSgd, ::testing::Values(kF16, kBF16),
                         [](const auto& p) { return DTypeLabel(p.param); });

std::vector<uint8_t> RawTable(const RefTable& t) {
  std::vector<uint8_t> bytes((t.weights.size() + t.state.size()) * sizeof(float));
  if (!t.weights.empty()) {
    std::memcpy(bytes.data(), t.weights.data(), t.weights.size() * sizeof(float));
  }
  if (!t.state.empty()) {
    std::memcpy(bytes.data() + t.weights.size() * sizeof(float), t.state.data(),
                t.state.size() * sizeof(float));
  }
  return bytes;
}

TEST(Backward, OneAndTwoThreadsGiveBitIdenticalTables) {
  for (int32_t optimizer : {SR_OPTIMIZER_SGD, SR_OPTIMIZER_ROWWISE_ADAGRAD, SR_OPTIMIZER_ADAM}) {
    SCOPED_TRACE("optimizer " + std::to_string(optimizer));
    const std::vector<TableSpec> specs = {{.name = "hot", .rows = 1000, .dim = 33},
                                          {.name = "half", .rows = 700, .dim = 8, .dtype = kF16}};
    auto one = CreateKernel(specs, optimizer, {}, {{"threads", "1"}});
    auto two = CreateKernel(specs, optimizer, {}, {{"threads", "2"}});
    ASSERT_TRUE(one.ok() && two.ok());
    std::mt19937_64 rng(17);
    for (int64_t step = 1; step <= 2; ++step) {
      // ~25k ids from 300 rows: long runs of each row, split across tasks.
      RefLookup l;
      AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 1000, 40, 300, 0, 0, true);
      AddRandomFeature(l, rng, 1, SR_POOLING_MEAN, 600, 20, 300, 0, 33);
      std::vector<float> grad = RandomGrad(rng, 1000 * 41);
      ASSERT_TRUE(Backward(*one, l, grad, 41, step).ok());
      ASSERT_TRUE(Backward(*two, l, grad, 41, step).ok());
    }
    for (int32_t t = 0; t < 2; ++t) {
      EXPECT_TRUE(RawTable(ReadTable(*one, t)) == RawTable(ReadTable(*two, t))) << "table " << t;
    }
  }
}

TEST(Backward, ParallelPathMatchesTheReferenceAndSkipsBadIds) {
  // Big enough for parallel emission, sort and update; a few ids out of
  // range (IGNORE) shift every later occurrence's place.
  const OptionList params = {{"learning_rate", "0.05"}};
  auto one = CreateKernel({{.rows = 5000, .dim = 40}}, SR_OPTIMIZER_ADAGRAD, params,
                          {{"threads", "1"}});
  auto two = CreateKernel({{.rows = 5000, .dim = 40}}, SR_OPTIMIZER_ADAGRAD, params,
                          {{"threads", "2"}});
  ASSERT_TRUE(one.ok() && two.ok());
  std::vector<RefTable> ref = {ReadTable(*two, 0)};
  std::mt19937_64 rng(23);
  RefLookup l;
  AddRandomFeature(l, rng, 0, SR_POOLING_SUM, 800, 20, 5000, 0, 0, true);
  AddRandomFeature(l, rng, 0, SR_POOLING_MEAN, 300, 20, 5000, 0, 40, true);
  for (size_t i = 7; i < l.indices.size(); i += 997) l.indices[i] = i % 2 ? -1 : 5000 + i;
  std::vector<float> grad = RandomGrad(rng, 800 * 80);
  ASSERT_TRUE(Backward(*one, l, grad, 80, 1, std::nan(""), SR_BOUNDS_CHECK_IGNORE).ok());
  ASSERT_TRUE(Backward(*two, l, grad, 80, 1, std::nan(""), SR_BOUNDS_CHECK_IGNORE).ok());
  const std::vector<RefTable> before = ref;
  reference::Backward(ref, l, grad, 80, RefOptimizerFor(SR_OPTIMIZER_ADAGRAD, params), 1);
  ExpectTableNear(ReadTable(*two, 0), ref[0], before[0], before[0], 2e-5, "table");
  EXPECT_TRUE(RawTable(ReadTable(*one, 0)) == RawTable(ReadTable(*two, 0)));
}

TEST(Backward, LearningRateArgumentOverridesTheConfiguredOne) {
  auto k = CreateKernel({{.rows = 10, .dim = 4}}, SR_OPTIMIZER_SGD, {{"learning_rate", "0.01"}});
  ASSERT_TRUE(k.ok());
  std::vector<RefTable> ref = {ReadTable(*k, 0)};
  RefLookup l;
  l.AddFeature(0, SR_POOLING_SUM, {2}, {3, 5}, 0, 0);
  std::vector<float> grad = {1.0f, -2.0f, 0.5f, 0.25f};
  ASSERT_TRUE(Backward(*k, l, grad, 4, 1, 0.5).ok());
  RefOptimizer opt = reference::DefaultOptimizer(SR_OPTIMIZER_SGD);
  opt.learning_rate = 0.5;
  std::vector<RefTable> before = ref;
  reference::Backward(ref, l, grad, 4, opt, 1);
  const RefTable after_first = ReadTable(*k, 0);
  ExpectTableNear(after_first, ref[0], before[0], before[0], 1e-6, "lr 0.5");
  // NaN: the configured 0.01.
  ASSERT_TRUE(Backward(*k, l, grad, 4, 2, std::nan("")).ok());
  opt.learning_rate = 0.01;
  before = ref;
  reference::Backward(ref, l, grad, 4, opt, 2);
  ExpectTableNear(ReadTable(*k, 0), ref[0], before[0], after_first, 1e-6, "configured lr");
}

TEST(Backward, WithoutAnOptimizerIsAFailedPrecondition) {
  auto k = CreateKernel({{.rows = 10, .dim = 4}}, SR_OPTIMIZER_NONE);
  ASSERT_TRUE(k.ok());
  ASSERT_TRUE(k->HasBackward());
  const RefTable before = ReadTable(*k, 0);
  RefLookup l;
  l.AddFeature(0, SR_POOLING_SUM, {1}, {3}, 0, 0);
  std::vector<float> grad(4, 1.0f);
  const Status s = Backward(*k, l, grad, 4);
  EXPECT_EQ(s.code(), SR_FAILED_PRECONDITION);
  EXPECT_NE(s.message().find("created without an optimizer"), std::string::npos) << s.message();
  EXPECT_EQ(ReadTable(*k, 0).weights, before.weights);
}

TEST(Backward, AdamRefusesAnIterationBelowOne) {
  auto k = CreateKernel({{.rows = 10, .dim = 4}}, SR_OPTIMIZER_ADAM);
  ASSERT_TRUE(k.ok());
  const RefTable before = ReadTable(*k, 0);
  RefLookup l;
  l.AddFeature(0, SR_POOLING_SUM, {1}, {3}, 0, 0);
  std::vector<float> grad(4, 1.0f);
  const Status s = Backward(*k, l, grad, 4, 0);
  EXPECT_EQ(s.code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(s.message().find("iteration must be >= 1"), std::string::npos) << s.message();
  EXPECT_EQ(ReadTable(*k, 0).weights, before.weights);
  EXPECT_EQ(ReadTable(*k, 0).state, before.state);
}

}  // namespace
}  // namespace shardrec::testing
