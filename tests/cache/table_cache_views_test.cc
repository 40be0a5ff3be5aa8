// TableCache (core/include/shardrec/core/cache/table_cache.h) moving whole
// rows in and out of the kernel as strided views of the buffers they are
// packed in, and, when the kernel refuses strided views or the row's layout
// cannot be viewed (fp16 weights of an odd width put the state off a
// 4-byte boundary), split into two tensors as before: every row the same
// either way. The kernel is a fake that keeps its slots in plain arrays,
// honours strides like the CPU kernel, or refuses them as the ABI allows
// (SR_INVALID_ARGUMENT, writing nothing); cached_tables_test.cc runs the
// real kernel.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <set>

#include "shardrec/core/cache/table_cache.h"
#include "shardrec/core/host_services.h"
#include "shardrec/core/plugin_registry.h"
#include "temp_dir.h"

namespace shardrec {
namespace {

constexpr int64_t kRows = 300, kStateDim = 1;
constexpr float kInitialState = 0.5f;

// A kernel table of `slots` rows: weights of `elem` bytes a column, state
// float32. Counts the strided calls it served and those it refused.
class FakeSlots final : public CacheSlots {
 public:
  FakeSlots(int64_t slots, int64_t dim, size_t elem, bool refuse_strided)
      : dim_(dim), elem_(elem), refuse_(refuse_strided), weights_(static_cast<size_t>(slots * dim) * elem),
        state_(static_cast<size_t>(slots * kStateDim)) {}
  Status ReadViews(std::span<const int64_t> slots, DLTensor* weights, DLTensor* state) const override {
    return Move(slots, weights, state, /*reading=*/true);
  }
  Status WriteViews(std::span<const int64_t> slots, const DLTensor* weights, const DLTensor* state) const override {
    return Move(slots, weights, state, /*reading=*/false);
  }
  // "Training": each slot's state and its first weight byte change.
  void Train(int64_t slot) {
    state_[static_cast<size_t>(slot)] += 1.0f;
    weights_[static_cast<size_t>(slot * dim_) * elem_] ^= std::byte{0x5a};
  }
  mutable int64_t strided = 0, refused = 0;  // counted by the const calls the cache makes

 private:
  Status Move(std::span<const int64_t> slots, const DLTensor* weights, const DLTensor* state, bool reading) const {
    for (const DLTensor* t : {weights, state}) {
      if (t == nullptr || t->strides == nullptr) continue;
      if (refuse_) {
        ++refused;
        return Status(SR_INVALID_ARGUMENT, "fake kernel: strided views refused");
      }
    }
    if ((weights != nullptr && weights->strides != nullptr) || (state != nullptr && state->strides != nullptr)) {
      ++strided;
    }
    for (size_t i = 0; i < slots.size(); ++i) {
      const auto s = static_cast<size_t>(slots[i]);
      if (weights != nullptr) {
        const int64_t stride = weights->strides ? weights->strides[0] : dim_;
        std::byte* theirs = static_cast<std::byte*>(weights->data) + static_cast<size_t>(static_cast<int64_t>(i) * stride) * elem_;
        std::byte* mine = weights_.data() + s * static_cast<size_t>(dim_) * elem_;
        reading ? std::memcpy(theirs, mine, static_cast<size_t>(dim_) * elem_)
                : std::memcpy(mine, theirs, static_cast<size_t>(dim_) * elem_);
      }
      if (state != nullptr) {
        const int64_t stride = state->strides ? state->strides[0] : kStateDim;
        float* theirs = static_cast<float*>(state->data) + static_cast<int64_t>(i) * stride;
        float* mine = state_.data() + s * kStateDim;
        reading ? std::memcpy(theirs, mine, sizeof(float) * kStateDim) : std::memcpy(mine, theirs, sizeof(float) * kStateDim);
      }
    }
    return Status::Ok();
  }
  int64_t dim_;
  size_t elem_;
  bool refuse_;
  mutable std::vector<std::byte> weights_;  // the kernel's table: written by the const WriteViews
  mutable std::vector<float> state_;
};

class TableCacheViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry_.LoadLibrary(std::filesystem::path(SHARDREC_BUILT_PLUGIN_DIR) /
                                      "libshardrec_eviction_builtin.so")
                    .ok());
  }
  struct Run {
    std::vector<float> state;           // every row's, after a flush
    std::vector<std::byte> weights;     // every row's
    int64_t strided = 0, refused = 0;   // the fake's counts
  };
  // 60 steps of 24 ids (repeats included) through a cache of a fifth of
  // the rows, each step's slots "trained"; then every row read back.
  Run Train(DataType dtype, int64_t dim, bool refuse, const std::string& io) {
    EmbeddingTableConfig t;
    t.name = "t";
    t.num_embeddings = kRows;
    t.embedding_dim = dim;
    t.feature_names = {"f"};
    t.data_type = dtype;
    const CacheParams params{.algorithm = "lru", .load_factor = 0.2, .ways = 8, .overflow = 64, .io = io};
    auto directory = TableCache::MakeDirectory(registry_, t, params);
    EXPECT_TRUE(directory.ok()) << directory.status().ToString();
    const DLDataType wt = dtype == DataType::kFp16 ? dtype::kFloat16 : dtype::kFloat32;
    const size_t elem = wt.bits / 8;
    FakeSlots slots(directory->capacity(), dim, elem, refuse);
    const CachedRowFormat format{wt, kStateDim, {kInitialState}, 7, 0, 0};
    auto cache = TableCache::Create(std::move(directory).value(), t, format,
                                    TableCacheSpec{params, dir_.path() / (io + std::to_string(refuse) + ".rows"), {}});
    EXPECT_TRUE(cache.ok()) << cache.status().ToString();
    std::mt19937_64 rng(11);
    for (int step = 0; step < 60; ++step) {
      std::vector<int64_t> ids(24);
      for (auto& id : ids) id = static_cast<int64_t>(std::min(rng() % kRows, rng() % kRows));
      EXPECT_TRUE(cache->Assign(ids, slots).ok());
      for (int64_t s : std::set<int64_t>(ids.begin(), ids.end())) slots.Train(s);
      cache->MarkBatchDirty();
    }
    EXPECT_TRUE(cache->Flush(slots).ok());
    std::vector<int64_t> all(kRows);
    for (int64_t r = 0; r < kRows; ++r) all[static_cast<size_t>(r)] = r;
    Tensor w = Tensor::Empty(wt, {kRows, dim}), st = Tensor::Empty(dtype::kFloat32, {kRows, kStateDim});
    EXPECT_TRUE(cache->ReadRows(all, &w, &st, slots).ok());
    Run run;
    run.state.assign(st.data<float>(), st.data<float>() + kRows);
    const auto* wb = static_cast<const std::byte*>(w.raw_data());
    run.weights.assign(wb, wb + w.nbytes());
    run.strided = slots.strided;
    run.refused = slots.refused;
    return run;
  }
  // What each row's state must be: the initial one plus one a step it was in.
  static std::vector<float> Expected() {
    std::vector<float> state(kRows, kInitialState);
    std::mt19937_64 rng(11);
    for (int step = 0; step < 60; ++step) {
      std::set<int64_t> seen;
      for (int i = 0; i < 24; ++i) seen.insert(static_cast<int64_t>(std::min(rng() % kRows, rng() % kRows)));
      for (int64_t r : seen) state[static_cast<size_t>(r)] += 1.0f;
    }
    return state;
  }
  HostServices services_;
  PluginRegistry registry_{&services_};
  testing::TempDir dir_{"cache-views"};
};

TEST_F(TableCacheViewsTest, AKernelThatRefusesStridedViewsGetsTheSameRowsUnpacked) {
  for (const std::string io : {"threads", "mmap"}) {
    SCOPED_TRACE(io);
    const Run viewed = Train(DataType::kFp32, 4, /*refuse=*/false, io);
    const Run refused = Train(DataType::kFp32, 4, /*refuse=*/true, io);
    EXPECT_GT(viewed.strided, 0);
    EXPECT_EQ(viewed.refused, 0);
    EXPECT_EQ(refused.strided, 0);
    EXPECT_EQ(refused.refused, 1);  // asked once, then not again
    EXPECT_EQ(viewed.state, Expected());
    EXPECT_EQ(refused.state, Expected());
    EXPECT_EQ(viewed.weights, refused.weights);
  }
}

TEST_F(TableCacheViewsTest, ARowWhoseStateIsOffItsAlignmentIsMovedUnpacked) {
  // fp16 weights of width 3: 6 bytes, so the state would start 2 bytes off
  // a float's boundary; width 4 (8 bytes) can be viewed.
  const Run odd = Train(DataType::kFp16, 3, /*refuse=*/false, "threads");
  const Run even = Train(DataType::kFp16, 4, /*refuse=*/false, "threads");
  EXPECT_EQ(odd.strided, 0);
  EXPECT_GT(even.strided, 0);
  EXPECT_EQ(odd.state, Expected());
  EXPECT_EQ(even.state, Expected());
}

}  // namespace
}  // namespace shardrec
