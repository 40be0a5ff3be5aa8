// Owning tensors, DLPack round trips, dtype conversions and .npy files.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "fixture_paths.h"
#include "shardrec/core/tensor/dtype_convert.h"
#include "shardrec/core/tensor/npy.h"

namespace shardrec {
namespace {

namespace fs = std::filesystem;

TEST(Tensor, ZerosHasShapeAndIsAligned) {
  Tensor t = Tensor::Zeros(dtype::kFloat32, {3, 5});
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 60u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % 64, 0u);
  for (float v : t.span<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(t.dl().ndim, 2);
  EXPECT_EQ(t.dl().shape[1], 5);
}

TEST(Tensor, CopiesShareStorageAndCloneDoesNot) {
  Tensor a = Tensor::FromVector(std::vector<float>{1, 2, 3});
  Tensor b = a;
  Tensor c = a.Clone();
  a.data<float>()[0] = 9;
  EXPECT_EQ(b.data<float>()[0], 9);
  EXPECT_EQ(c.data<float>()[0], 1);
}

TEST(Tensor, ACopyOfATemporaryKeepsItsOwnShape) {
  // A copy's DLTensor once pointed at the source's shape: dangling when the
  // source was a temporary (the conditional below copies one).
  const Tensor kept = Tensor::Empty(dtype::kFloat32, {8, 9});
  for (bool use_kept : {false, true}) {
    const Tensor t = use_kept ? kept : Tensor::Empty(dtype::kFloat32, {3, 9});
    std::vector<int64_t> junk(64, 77);  // reuses the temporary's freed memory, if any
    EXPECT_EQ(t.dl().ndim, 2);
    EXPECT_EQ(t.dl().shape[0], use_kept ? 8 : 3) << junk[0];
    EXPECT_EQ(t.dl().shape[1], 9);
  }
  Tensor moved = Tensor::Empty(dtype::kInt64, {5});
  Tensor target = std::move(moved);
  EXPECT_EQ(target.dl().shape[0], 5);
  EXPECT_EQ(moved.numel(), 0);  // NOLINT(bugprone-use-after-move): the moved-from state is defined
}

TEST(Tensor, DLPackRoundTripIsZeroCopy) {
  Tensor a = Tensor::FromVector(std::vector<int64_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  DLManagedTensor* capsule = a.ToDLPack();
  auto back = Tensor::FromDLPack(capsule);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->raw_data(), a.raw_data());
  EXPECT_EQ(back->shape(), (std::vector<int64_t>{2, 3}));
  a = Tensor();  // the capsule keeps the storage alive
  EXPECT_EQ(back->data<int64_t>()[5], 6);
}

TEST(Tensor, FromDLPackRefusesNonContiguousAndDevice) {
  Tensor a = Tensor::FromVector(std::vector<float>{1, 2, 3, 4}, {2, 2});
  DLManagedTensor* capsule = a.ToDLPack();
  int64_t strides[2] = {1, 2};  // column-major
  capsule->dl_tensor.strides = strides;
  auto r = Tensor::FromDLPack(capsule);
  EXPECT_EQ(r.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(r.status().message().find("contiguous"), std::string::npos);

  DLManagedTensor* gpu = a.ToDLPack();
  gpu->dl_tensor.device = {kDLCUDA, 0};
  auto g = Tensor::FromDLPack(gpu);
  EXPECT_NE(g.status().message().find("CPU"), std::string::npos);
}

TEST(Tensor, ReshapeChecksElementCount) {
  Tensor a = Tensor::Zeros(dtype::kInt32, {6});
  EXPECT_TRUE(a.Reshape({2, 3}).ok());
  EXPECT_EQ(a.Reshape({4, 2}).status().code(), SR_INVALID_ARGUMENT);
}

TEST(DTypeConvert, HalfAndBFloat16RoundToNearestEven) {
  // 1 + 2^-11 is halfway between two fp16 values: ties go to even (1.0).
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(HalfToFloat(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  // bf16 keeps 8 mantissa bits: 1 + 2^-8 is a tie -> 1.0; 1 + 3*2^-8 -> 1 + 2^-6.
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_EQ(BFloat16ToFloat(FloatToBFloat16(1.0f + 3 * std::ldexp(1.0f, -8))), 1.0f + std::ldexp(1.0f, -6));
  EXPECT_TRUE(std::isnan(BFloat16ToFloat(FloatToBFloat16(std::nanf("")))));
  Tensor f = Tensor::FromVector(std::vector<float>{0.5f, -2.0f, 1e-3f});
  auto h = FromFloat32(f, dtype::kBFloat16, "t");
  ASSERT_TRUE(h.ok());
  auto back = ToFloat32(h.value(), "t");
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->data<float>()[1], -2.0f);
  EXPECT_NEAR(back->data<float>()[2], 1e-3f, 1e-5f);
  EXPECT_EQ(ToInt64(f, "lengths.npy").status().code(), SR_INVALID_ARGUMENT);
}

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::MakeTempDir("npy"); }
  void TearDown() override { fs::remove_all(dir_); }
  void WriteRaw(const fs::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
  }
  fs::path dir_;
};

TEST_F(NpyTest, RoundTripsEveryDType) {
  const std::vector<std::pair<DLDataType, int>> types = {
      {dtype::kFloat32, 4}, {dtype::kFloat64, 8}, {dtype::kFloat16, 2}, {dtype::kInt32, 4},
      {dtype::kInt64, 8},   {dtype::kUInt8, 1},   {{kDLInt, 8, 1}, 1},  {{kDLUInt, 64, 1}, 8}};
  for (const auto& [dt, size] : types) {
    for (const std::vector<int64_t>& shape :
         {std::vector<int64_t>{}, std::vector<int64_t>{0}, std::vector<int64_t>{7}, std::vector<int64_t>{3, 4},
          std::vector<int64_t>{2, 1, 5}}) {
      Tensor t = Tensor::Empty(dt, shape);
      auto* bytes = static_cast<unsigned char*>(t.raw_data());
      for (size_t i = 0; i < t.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 1);
      const fs::path p = dir_ / "t.npy";
      ASSERT_TRUE(WriteNpy(p, t).ok());
      auto back = ReadNpy(p);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_TRUE(SameDType(back->dtype(), dt)) << DTypeName(dt);
      EXPECT_EQ(back->shape(), shape);
      EXPECT_EQ(std::memcmp(back->raw_data(), t.raw_data(), t.nbytes()), 0);
      EXPECT_EQ(size, static_cast<int>(DTypeSize(dt)));
    }
  }
}

TEST_F(NpyTest, HeaderIsAlignedAndNumpyStyle) {
  ASSERT_TRUE(WriteNpy(dir_ / "a.npy", Tensor::Zeros(dtype::kFloat32, {3})).ok());
  std::ifstream in(dir_ / "a.npy", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all.size(), 128u + 12u);  // header padded to 64 bytes multiple
  EXPECT_NE(all.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }"), std::string::npos);
}

TEST_F(NpyTest, TruncatedFileIsRefusedWithSizes) {
  ASSERT_TRUE(WriteNpy(dir_ / "a.npy", Tensor::Zeros(dtype::kFloat32, {4, 4})).ok());
  fs::resize_file(dir_ / "a.npy", fs::file_size(dir_ / "a.npy") - 10);
  auto r = ReadNpy(dir_ / "a.npy");
  EXPECT_EQ(r.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("a.npy"), std::string::npos);
  EXPECT_NE(r.status().message().find("64 bytes"), std::string::npos) << r.status().message();
}

TEST_F(NpyTest, BadFilesAreRefusedByName) {
  WriteRaw(dir_ / "junk.npy", "hello world, not numpy");
  EXPECT_NE(ReadNpy(dir_ / "junk.npy").status().message().find("bad magic"), std::string::npos);
  WriteRaw(dir_ / "big.npy", std::string("\x93NUMPY\x01\x00\x46\x00", 10) +
                                 "{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }" +
                                 std::string(12, ' ') + "\n" + std::string(4, '\0'));
  EXPECT_NE(ReadNpy(dir_ / "big.npy").status().message().find("big-endian"), std::string::npos)
      << ReadNpy(dir_ / "big.npy").status().message();
  WriteRaw(dir_ / "f.npy", std::string("\x93NUMPY\x01\x00\x46\x00", 10) +
                               "{'descr': '<f4', 'fortran_order': True, 'shape': (1,), }" +
                               std::string(13, ' ') + "\n" + std::string(4, '\0'));
  EXPECT_NE(ReadNpy(dir_ / "f.npy").status().message().find("Fortran"), std::string::npos);
  WriteRaw(dir_ / "c.npy", std::string("\x93NUMPY\x01\x00\x46\x00", 10) +
                               "{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }" +
                               std::string(12, ' ') + "\n" + std::string(8, '\0'));
  EXPECT_NE(ReadNpy(dir_ / "c.npy").status().message().find("unsupported dtype '<c8'"), std::string::npos);
  EXPECT_EQ(ReadNpy(dir_ / "missing.npy").status().code(), SR_NOT_FOUND);
  EXPECT_EQ(WriteNpy(dir_ / "bf.npy", Tensor::Zeros(dtype::kBFloat16, {2})).code(), SR_INVALID_ARGUMENT);
  EXPECT_FALSE(fs::exists(dir_ / "bf.npy"));
}

// A .npy v2 file (4-byte header length) with `header` as its header.
std::string NpyV2(const std::string& header, size_t payload) {
  std::string h = header + "\n";
  const uint32_t n = static_cast<uint32_t>(h.size());
  std::string out("\x93NUMPY\x02\x00", 8);
  for (int i = 0; i < 4; ++i) out += static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + h + std::string(payload, '\0');
}

// Huge fields under the 1 MiB header cap once overflowed std::regex's
// stack (a segfault in every build); they are now an error or a value.
TEST_F(NpyTest, HostileHeadersAreRefusedWithoutCrashing) {
  const std::string big(50000, 'x');
  WriteRaw(dir_ / "long_descr.npy", NpyV2("{'descr': '" + big + "', 'fortran_order': False, 'shape': (1,), }", 4));
  EXPECT_NE(ReadNpy(dir_ / "long_descr.npy").status().message().find("unsupported dtype"), std::string::npos);
  WriteRaw(dir_ / "long_shape.npy", NpyV2("{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                                          std::string(900000, ' ') + "1,), }", 4));
  auto r = ReadNpy(dir_ / "long_shape.npy");
  EXPECT_TRUE(r.ok()) << r.status().message();
  std::string parens(500000, '(');
  WriteRaw(dir_ / "parens.npy", NpyV2("{'descr': '<f4', 'fortran_order': False, 'shape': " + parens + "}", 4));
  EXPECT_NE(ReadNpy(dir_ / "parens.npy").status().message().find("expected a dimension"), std::string::npos);
  std::string many = "(";
  for (int i = 0; i < 60000; ++i) many += "1,";
  WriteRaw(dir_ / "dims.npy", NpyV2("{'descr': '<f4', 'fortran_order': False, 'shape': " + many + "), }", 4));
  EXPECT_NE(ReadNpy(dir_ / "dims.npy").status().message().find("more than 64 dimensions"), std::string::npos);
  WriteRaw(dir_ / "unterminated.npy", NpyV2("{'descr': '" + big, 0));
  EXPECT_NE(ReadNpy(dir_ / "unterminated.npy").status().message().find("bad .npy header at byte"), std::string::npos);
}

TEST_F(NpyTest, HeaderScannerNamesWhatIsWrongAndWhere) {
  struct Case {
    std::string header, error;
  };
  for (const Case& c : std::vector<Case>{
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", ""},
           {"{\"shape\": (2, 3),'fortran_order':False,'descr':'<f4'}", ""},  // any order, either quote
           {"{'descr': '<f4', 'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}", "'descr' given twice"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'x': 1}", "unexpected key 'x'"},
           {"{'descr': '<f4', 'fortran_order': False}", "no 'shape'"},
           {"{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}", "expected ',' or '}'"},
           {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (2,)}", "expected True or False"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", "expected a dimension"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,)}", "dimension too large"},
           {"{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} junk", "after the closing"},
       }) {
    WriteRaw(dir_ / "h.npy", NpyV2(c.header, 24));
    auto r = ReadNpy(dir_ / "h.npy");
    if (c.error.empty()) {
      ASSERT_TRUE(r.ok()) << c.header << ": " << r.status().message();
      EXPECT_EQ(r->shape(), (std::vector<int64_t>{2, 3}));
    } else {
      EXPECT_NE(r.status().message().find(c.error), std::string::npos) << c.header << ": " << r.status().message();
      EXPECT_NE(r.status().message().find("h.npy"), std::string::npos);
    }
  }
}

// A writer killed mid-write (kill -9) leaves ".tmp.NAME.PID"; the next
// write of NAME removes it once that PID is gone, and leaves a live
// writer's file alone.
TEST_F(NpyTest, TemporariesOfDeadWritersAreRemoved) {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  const fs::path dead = dir_ / (".tmp.a.npy." + std::to_string(child));
  const fs::path live = dir_ / (".tmp.a.npy." + std::to_string(getppid()));
  const fs::path other = dir_ / (".tmp.b.npy." + std::to_string(child));
  for (const auto& p : {dead, live, other}) WriteRaw(p, std::string(1000, 'x'));
  ASSERT_TRUE(WriteNpy(dir_ / "a.npy", Tensor::Zeros(dtype::kInt64, {3})).ok());
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));  // another file's: cleaned when that file is written
  EXPECT_TRUE(ReadNpy(dir_ / "a.npy").ok());
}

TEST_F(NpyTest, WriteIsAtomicAndLeavesNoTemporaries) {
  ASSERT_TRUE(WriteNpy(dir_ / "a.npy", Tensor::Zeros(dtype::kInt64, {100})).ok());
  ASSERT_TRUE(WriteNpy(dir_ / "a.npy", Tensor::Zeros(dtype::kInt64, {5})).ok());
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1);
  EXPECT_EQ(ReadNpy(dir_ / "a.npy")->numel(), 5);
  EXPECT_FALSE(WriteNpy(dir_ / "no_such_dir" / "a.npy", Tensor::Zeros(dtype::kInt64, {1})).ok());
}

}  // namespace
}  // namespace shardrec
