// The built-in quantized comm codecs (plugins/codec_builtin) through the
// host's Codec wrapper: the seeds' WE-19 round trip (encode, a real
// collective, decode) within each codec's documented bound, over local and
// gloo; quantized_dtype and calc_quantized_size; edge rows (zeros,
// constants, extremes); the quantized collectives against the plain ones;
// QCommConfig's flag and plan-file forms; and the refusals a user meets.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../dist/ranks_fixture.h"
#include "shardrec/core/qcomm/qcomm_codecs.h"
#include "shardrec/core/qcomm/quantized_collectives.h"
#include "shardrec/core/sharding/sharding_plan.h"

namespace shardrec {
namespace {

// The bound docs/comm.md documents for |decoded - x|, per value, given the
// value and its row's min, max and max |x|.
double Bound(const std::string& codec, float x, float lo, float hi, float amax) {
  const double a = std::fabs(static_cast<double>(x));
  if (codec == "fp16") return a * std::ldexp(1.0, -11) + std::ldexp(1.0, -25);
  if (codec == "bf16") return a * std::ldexp(1.0, -8) + 1e-38;
  if (codec == "int8") {
    // Half a step, and for rows narrower than FBGEMM's 1e-8 epsilon up to
    // the whole range (they decode to their minimum).
    const double range = static_cast<double>(hi) - lo;
    return range / 255.0 * 0.5 * (1 + 1e-4) + range * 1e-8 / (range + 1e-8) * 1.001 +
           1e-6 * (std::fabs(lo) + std::fabs(hi));
  }
  if (codec == "fp8") {
    const double scale = amax / 448.0;
    return a * std::ldexp(1.0, -4) + scale * std::ldexp(1.0, -10) + 1e-6 * a;
  }
  return 0;
}

std::vector<float> Values(int64_t rows, int64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float spread = std::ldexp(1.0f, static_cast<int>(r % 9) - 4);  // rows of very different ranges
    for (int64_t c = 0; c < cols; ++c) v[static_cast<size_t>(r * cols + c)] = n(rng) * spread;
  }
  return v;
}

void ExpectWithinBound(const std::string& codec, const float* x, const float* y, int64_t rows, int64_t cols,
                       const std::string& where) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * cols;
    float lo = row[0], hi = row[0], amax = 0;
    for (int64_t c = 0; c < cols; ++c) {
      lo = std::min(lo, row[c]);
      hi = std::max(hi, row[c]);
      amax = std::max(amax, std::fabs(row[c]));
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double err = std::fabs(static_cast<double>(y[r * cols + c]) - row[c]);
      ASSERT_LE(err, Bound(codec, row[c], lo, hi, amax))
          << codec << " " << where << ": row " << r << " col " << c << ": " << row[c] << " came back as "
          << y[r * cols + c];
    }
  }
}

class Codecs : public RanksTest {
 protected:
  void SetUp() override {
    RanksTest::SetUp();
    if (IsSkipped()) return;
    ASSERT_TRUE(
        registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_codec_builtin.so").ok());
  }
  Codec Make(const std::string& name) {
    auto ref = registry_.Find(SR_KIND_CODEC, name);
    EXPECT_TRUE(ref.ok()) << ref.status().ToString();
    return Codec::Create(ref.value(), {}).value();
  }
};

TEST_P(Codecs, QuantizedDtypeAndSize) {
  struct Want {
    std::string name;
    DLDataType dtype;
    int64_t size;  // of a 5 x 12 block
  };
  for (const Want& w : {Want{"fp16", {kDLFloat, 16, 1}, 60}, Want{"bf16", {kDLBfloat, 16, 1}, 60},
                        Want{"int8", {kDLUInt, 8, 1}, 5 * (12 + 8)}, Want{"fp8", {kDLUInt, 8, 1}, 5 * (12 + 4)}}) {
    const Codec c = Make(w.name);
    EXPECT_EQ(c.quantized_dtype().code, w.dtype.code) << w.name;
    EXPECT_EQ(c.quantized_dtype().bits, w.dtype.bits) << w.name;
    EXPECT_EQ(c.QuantizedSize(5, 12).value(), w.size) << w.name;
    EXPECT_EQ(c.QuantizedSize(0, 12).value(), 0) << w.name;
  }
}

// WE-19: encode, the collective, decode; close to the input.
TEST_P(Codecs, WE19RoundTripThroughAnAllToAll) {
  for (const std::string name : {"fp16", "bf16", "int8", "fp8"}) {
    for (int world : {2, 3}) {
      SCOPED_TRACE(fmt::format("{} world {}", name, world));
      const int64_t cols = 37;
      OnRanks(world, [&](const ProcessGroup& group) {
        const Codec codec = Make(name);
        const int me = group.rank();
        // Rank r sends (r + d + 1) rows to rank d.
        std::vector<FloatBlock> send, recv;
        int64_t send_rows = 0, recv_rows = 0;
        for (int d = 0; d < world; ++d) {
          send.push_back({me + d + 1, cols});
          recv.push_back({d + me + 1, cols});
          send_rows += me + d + 1;
          recv_rows += d + me + 1;
        }
        const auto mine = Values(send_rows, cols, 100 + static_cast<uint64_t>(me));
        Tensor in = Tensor::FromVector(mine);
        Tensor out = Tensor::Empty(dtype::kFloat32, {recv_rows * cols});
        auto bytes = QuantizedAllToAll(group, &codec, in, send, &out, recv, "test all-to-all");
        ASSERT_TRUE(bytes.ok()) << bytes.status().ToString();
        // What each source sent us, recomputed: source s's block for me.
        int64_t at = 0;
        for (int s = 0; s < world; ++s) {
          const auto theirs = Values([&] {
            int64_t n = 0;
            for (int d = 0; d < world; ++d) n += s + d + 1;
            return n;
          }(), cols, 100 + static_cast<uint64_t>(s));
          int64_t first = 0;
          for (int d = 0; d < me; ++d) first += s + d + 1;
          ExpectWithinBound(name, theirs.data() + first * cols, out.data<float>() + at * cols, s + me + 1, cols,
                            fmt::format("from rank {}", s));
          at += s + me + 1;
        }
        // Bytes on the wire: the encoded blocks to the other ranks.
        int64_t want = 0;
        for (int d = 0; d < world; ++d) {
          if (d != me) want += codec.QuantizedSize(me + d + 1, cols).value() * static_cast<int64_t>(codec.quantized_element_bytes());
        }
        EXPECT_EQ(bytes.value(), want);
      });
    }
  }
}

TEST_P(Codecs, WithoutACodecTheCollectivesAreThePlainOnes) {
  OnRanks(3, [&](const ProcessGroup& group) {
    const int me = group.rank(), world = 3;
    const int64_t cols = 5;
    std::vector<int64_t> rows = {2, 3, 1};
    int64_t total = 6;
    const auto v = Values(total, cols, 7 + static_cast<uint64_t>(me));
    // Reduce-scatter: the plain one and the codec-less quantized one, bit for bit.
    Tensor a = Tensor::Empty(dtype::kFloat32, {rows[static_cast<size_t>(me)], cols});
    Tensor b = Tensor::Empty(dtype::kFloat32, {rows[static_cast<size_t>(me)], cols});
    std::vector<int64_t> counts;
    for (int64_t r : rows) counts.push_back(r * cols);
    ASSERT_TRUE(group.ReduceScatterV(Tensor::FromVector(v, {total, cols}), &a, counts).ok());
    ASSERT_TRUE(QuantizedReduceScatter(group, nullptr, Tensor::FromVector(v, {total, cols}), rows, &b, "rs").ok());
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()), 0);
    // With fp16 the sum is of the decoded slices, in float32: close.
    Codec fp16 = Make("fp16");
    Tensor c = Tensor::Empty(dtype::kFloat32, {rows[static_cast<size_t>(me)], cols});
    ASSERT_TRUE(QuantizedReduceScatter(group, &fp16, Tensor::FromVector(v, {total, cols}), rows, &c, "rs").ok());
    for (int64_t i = 0; i < c.numel(); ++i) EXPECT_NEAR(c.data<float>()[i], a.data<float>()[i], 2e-3 * world);
    // All-gather with int8: every rank's rows, each within int8's bound.
    Codec int8 = Make("int8");
    const auto mine = Values(rows[static_cast<size_t>(me)], cols, 50 + static_cast<uint64_t>(me));
    Tensor gathered = Tensor::Empty(dtype::kFloat32, {total, cols});
    ASSERT_TRUE(QuantizedAllGather(group, &int8, Tensor::FromVector(mine, {rows[static_cast<size_t>(me)], cols}),
                                   rows, &gathered, "ag")
                    .ok());
    int64_t at = 0;
    for (int r = 0; r < world; ++r) {
      const auto theirs = Values(rows[static_cast<size_t>(r)], cols, 50 + static_cast<uint64_t>(r));
      ExpectWithinBound("int8", theirs.data(), gathered.data<float>() + at * cols, rows[static_cast<size_t>(r)], cols,
                        "all-gather");
      at += rows[static_cast<size_t>(r)];
    }
  });
}

TEST_P(Codecs, EdgeRows) {
  const int64_t cols = 8;
  std::vector<float> rows = {0, 0, 0, 0, 0, 0, 0, 0,                    // zeros
                             3.5f, 3.5f, 3.5f, 3.5f, 3.5f, 3.5f, 3.5f, 3.5f,  // a constant
                             448, -448, 1, 0.5f, 0.25f, 0.125f, -2, 0,         // fp8's exact values at scale 1
                             1e-30f, -1e-30f, 0, 0, 0, 0, 0, 2e-30f,          // tiny
                             6e4f, -6e4f, 1, 2, 3, 4, 5, 6};                  // large for fp16, still finite
  const int64_t n = static_cast<int64_t>(rows.size()) / cols;
  for (const std::string name : {"fp16", "bf16", "int8", "fp8"}) {
    const Codec codec = Make(name);
    std::vector<uint8_t> q(static_cast<size_t>(codec.QuantizedSize(n, cols).value()) * codec.quantized_element_bytes());
    ASSERT_TRUE(codec.Encode(rows.data(), n, cols, q.data()).ok());
    std::vector<float> back(rows.size());
    ASSERT_TRUE(codec.Decode(q.data(), n, cols, back.data()).ok());
    for (int64_t c = 0; c < cols; ++c) {
      EXPECT_EQ(back[static_cast<size_t>(c)], 0.0f) << name << ": zeros stay zeros";
      EXPECT_NEAR(back[static_cast<size_t>(cols + c)], 3.5f, name == "bf16" || name == "fp16" || name == "fp8" ? 0 : 1e-6)
          << name << ": a constant row";
    }
    if (name == "fp8") {
      for (int64_t c = 0; c < cols; ++c) {
        EXPECT_EQ(back[static_cast<size_t>(2 * cols + c)], rows[static_cast<size_t>(2 * cols + c)])
            << "fp8 keeps its representable values exactly";
      }
    }
    ExpectWithinBound(name, rows.data(), back.data(), n, cols, "edge rows");
  }
}

TEST_P(Codecs, RefusesBuffersOfTheWrongSize) {
  const Codec codec = Make("int8");
  std::vector<float> x(12, 1.0f);
  std::vector<uint8_t> q(100);
  // The Codec wrapper sizes the tensors itself; a plugin still checks what it gets.
  auto ref = registry_.Find(SR_KIND_CODEC, "int8").value();
  const auto* vt = static_cast<const sr_codec_vtable*>(ref.vtable());
  int64_t n_in = 12, n_out = 5;  // int8 needs 3 x (4 + 8) = 36
  DLTensor in{x.data(), {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, &n_in, nullptr, 0};
  DLTensor out{q.data(), {kDLCPU, 0}, 1, {kDLUInt, 8, 1}, &n_out, nullptr, 0};
  sr_codec_block_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_codec_block_args, output);
  a.rows = 3;
  a.cols = 4;
  a.input = &in;
  a.output = &out;
  Status s = ref.library->Call("encode", [&] { return vt->encode(codec.handle(), &a); });
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("expected 36 elements"), std::string::npos) << s.ToString();
}

TEST_P(Codecs, ACodecAskingForMoreThanTheBlockIsRefused) {
  const auto path = std::filesystem::path(SHARDREC_FIXTURE_DIR) / "greedy_codec" / "libshardrec_codec_greedy.so";
  ASSERT_TRUE(registry_.LoadLibrary(path).ok()) << path;
  auto codec = Codec::Create(registry_.Find(SR_KIND_CODEC, "greedy").value(), {});
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  auto size = codec->QuantizedSize(4, 16);
  ASSERT_FALSE(size.ok());
  EXPECT_NE(size.status().message().find("more than the block's 256 float32 bytes"), std::string::npos)
      << size.status().ToString();
  // Through a collective: refused before anything is allocated or sent.
  OnRanks(2, [&](const ProcessGroup& group) {
    Tensor in = Tensor::Zeros(dtype::kFloat32, {2 * 16}), out = Tensor::Zeros(dtype::kFloat32, {2 * 16});
    auto sent = QuantizedAllToAll(group, &codec.value(), in, {{1, 16}, {1, 16}}, &out, {{1, 16}, {1, 16}}, "test");
    EXPECT_FALSE(sent.ok());
  });
}

INSTANTIATE_TEST_SUITE_P(Comm, Codecs, ::testing::Values("local", "gloo"));

TEST(QCommConfig, FlagForms) {
  auto c = ParseQCommFlag("pooled_embeddings_all_to_all=fp16:bf16,pooled_embeddings_reduce_scatter=int8");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ops.at(CommOp::kPooledAllToAll).forward, "fp16");
  EXPECT_EQ(c->ops.at(CommOp::kPooledAllToAll).backward, "bf16");
  EXPECT_EQ(c->ops.at(CommOp::kPooledReduceScatter).backward, "int8") << "one codec names both directions";
  EXPECT_EQ(c->ToString(), "pooled_embeddings_all_to_all=fp16:bf16,pooled_embeddings_reduce_scatter=int8:int8");
  auto all = ParseQCommFlag("all=fp8:none");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->ops.size(), 3u);
  EXPECT_EQ(all->ops.at(CommOp::kSequenceAllToAll).backward, "fp32") << "none is fp32";
  EXPECT_TRUE(ParseQCommFlag("all=fp32")->empty());
  for (const char* bad : {"", "fp16", "pooled=fp16", "pooled_embeddings_all_to_all=", "all=FP16", "all=fp16:bf16:x",
                          "all=fp16,,"}) {
    auto r = ParseQCommFlag(bad);
    EXPECT_FALSE(r.ok()) << "'" << bad << "' must be refused";
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("--qcomm"), std::string::npos) << r.status().ToString();
    }
  }
}

TEST(QCommConfig, PlanFileForm) {
  const std::string text = R"({"plan": {"t0": {"sharding_type": "table_wise"}},
      "qcomm_codecs": {"pooled_embeddings_all_to_all": {"forward": "fp16", "backward": "bf16"}}})";
  auto c = ParsePlanQComm(text, "plan.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->ToString(), "pooled_embeddings_all_to_all=fp16:bf16");
  EXPECT_TRUE(ParsePlanJson(text, "plan.json").ok()) << "the plan itself still parses";
  EXPECT_TRUE(ParsePlanQComm(R"({"plan": {}})", "p")->empty());
  for (const char* bad : {R"({"plan": {}, "qcomm_codecs": []})", R"({"plan": {}, "qcomm_codecs": {"x": {}}})",
                          R"({"plan": {}, "qcomm_codecs": {"all": {"forward": 16}}})",
                          R"({"plan": {}, "qcomm_codecs": {"all": {"fwd": "fp16"}}})", R"({"plan": {}, "extra": 1})"}) {
    EXPECT_FALSE(ParsePlanQComm(bad, "p").ok()) << bad;
    EXPECT_FALSE(ParsePlanJson(bad, "p").ok()) << bad;
  }
  // Merging: the flag's ops replace the file's.
  QCommConfig merged = c.value();
  merged.Merge(ParseQCommFlag("pooled_embeddings_all_to_all=int8").value());
  EXPECT_EQ(merged.ToString(), "pooled_embeddings_all_to_all=int8:int8");
}

}  // namespace
}  // namespace shardrec
