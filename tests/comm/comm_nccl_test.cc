// The `nccl` comm backend. Without a GPU: the plugin loads, is listed below
// the CPU backends, and refuses to create a communicator with a clear
// message instead of crashing. With a GPU (the device machine): every
// collective on device buffers against host-computed results, for every
// reducible dtype and op, on the legacy default stream and on a stream of
// the test's, with a world of 1 and, given two GPUs, a world of 2 (ranks as
// threads, one GPU each: NCCL allows one rank per GPU); splits; and a rank
// that stalls being named within the timeout.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "shardrec/core/comm/process_group.h"
#include "shardrec/core/host_services.h"
#include "shardrec/core/plugin_registry.h"
#include "shardrec/sdk/collective_ops.hpp"
#include "shardrec/sdk/half.hpp"

namespace shardrec {
namespace {

namespace fs = std::filesystem;

constexpr const char* kNoGpu = "no CUDA device: the NCCL tests need a GPU (they run on the device machine)";

int DeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

// ---------------------------------------------------------------------------
// Host-side values in any dtype: small integers, exact in float16 and
// bfloat16 and in their sums over a few ranks, so NCCL's arithmetic and the
// host's agree bit for bit.
// ---------------------------------------------------------------------------

struct DType {
  const char* name;
  DLDataType dl;
};
const DType kFloat32{"float32", {kDLFloat, 32, 1}};
const DType kFloat64{"float64", {kDLFloat, 64, 1}};
const DType kFloat16{"float16", {kDLFloat, 16, 1}};
const DType kBFloat16{"bfloat16", {kDLBfloat, 16, 1}};
const DType kInt32{"int32", {kDLInt, 32, 1}};
const DType kInt64{"int64", {kDLInt, 64, 1}};
const DType kUInt8{"uint8", {kDLUInt, 8, 1}};
const DType kReducible[] = {kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64};


// Element `i` of rank `rank`'s input: in [-8, 8] (in [0, 16] for uint8).
double Value(int rank, int64_t i, DLDataType t) {
  const double v = static_cast<double>((i * 7 + rank * 13) % 17) - 8;
  return t.code == kDLUInt ? v + 8 : v;
}

std::vector<uint8_t> Encode(DLDataType t, const std::vector<double>& v) {
  std::vector<uint8_t> out(v.size() * DTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) {
    uint8_t* p = out.data() + i * DTypeSize(t);
    if (t.code == kDLFloat && t.bits == 32) {
      const float x = static_cast<float>(v[i]);
      std::memcpy(p, &x, 4);
    } else if (t.code == kDLFloat && t.bits == 64) {
      std::memcpy(p, &v[i], 8);
    } else if (t.code == kDLFloat && t.bits == 16) {
      const uint16_t x = sdk::FloatToHalf(static_cast<float>(v[i]));
      std::memcpy(p, &x, 2);
    } else if (t.code == kDLBfloat) {
      const uint16_t x = sdk::FloatToBFloat16(static_cast<float>(v[i]));
      std::memcpy(p, &x, 2);
    } else if (t.code == kDLInt && t.bits == 32) {
      const int32_t x = static_cast<int32_t>(v[i]);
      std::memcpy(p, &x, 4);
    } else if (t.code == kDLInt && t.bits == 64) {
      const int64_t x = static_cast<int64_t>(v[i]);
      std::memcpy(p, &x, 8);
    } else {
      *p = static_cast<uint8_t>(v[i]);
    }
  }
  return out;
}

std::vector<double> Decode(DLDataType t, const std::vector<uint8_t>& bytes) {
  std::vector<double> out(bytes.size() / DTypeSize(t));
  for (size_t i = 0; i < out.size(); ++i) {
    const uint8_t* p = bytes.data() + i * DTypeSize(t);
    if (t.code == kDLFloat && t.bits == 32) {
      float x;
      std::memcpy(&x, p, 4);
      out[i] = x;
    } else if (t.code == kDLFloat && t.bits == 64) {
      std::memcpy(&out[i], p, 8);
    } else if (t.code == kDLFloat && t.bits == 16) {
      uint16_t x;
      std::memcpy(&x, p, 2);
      out[i] = sdk::HalfToFloat(x);
    } else if (t.code == kDLBfloat) {
      uint16_t x;
      std::memcpy(&x, p, 2);
      out[i] = sdk::BFloat16ToFloat(x);
    } else if (t.code == kDLInt && t.bits == 32) {
      int32_t x;
      std::memcpy(&x, p, 4);
      out[i] = x;
    } else if (t.code == kDLInt && t.bits == 64) {
      int64_t x;
      std::memcpy(&x, p, 8);
      out[i] = static_cast<double>(x);
    } else {
      out[i] = *p;
    }
  }
  return out;
}

double Combine(int32_t op, double a, double b) {
  if (op == SR_REDUCE_SUM) return a + b;
  if (op == SR_REDUCE_MAX) return std::max(a, b);
  return std::min(a, b);
}


// A 1-D tensor in device memory. Not movable: its DLTensor points at its
// own shape.
class DeviceBuffer {
 public:
  DeviceBuffer(DLDataType dtype, int64_t numel, int device) : shape_(numel) {
    bytes_ = static_cast<size_t>(numel) * DTypeSize(dtype);
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&data_, std::max<size_t>(bytes_, 1)), cudaSuccess);
    dl_.data = data_;
    dl_.device = {kDLCUDA, device};
    dl_.ndim = 1;
    dl_.dtype = dtype;
    dl_.shape = &shape_;
    dl_.strides = nullptr;
    dl_.byte_offset = 0;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { cudaFree(data_); }

  void Upload(const std::vector<double>& v) {
    const std::vector<uint8_t> bytes = Encode(dl_.dtype, v);
    EXPECT_EQ(bytes.size(), bytes_);
    EXPECT_EQ(cudaMemcpy(data_, bytes.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    // A copy from pageable memory may still be in flight when cudaMemcpy
    // returns, and a collective on a non-blocking stream would not wait.
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  }
  std::vector<double> Download() const {
    std::vector<uint8_t> bytes(bytes_);
    EXPECT_EQ(cudaMemcpy(bytes.data(), data_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    return Decode(dl_.dtype, bytes);
  }
  DLTensor* dl() { return &dl_; }

 private:
  int64_t shape_;
  size_t bytes_ = 0;
  void* data_ = nullptr;
  DLTensor dl_{};
};

sr_collective_args Args(const DLTensor* send, DLTensor* recv, cudaStream_t stream) {
  sr_collective_args a{};
  a.struct_size = SR_STRUCT_SIZE(sr_collective_args, stream);
  a.send = send;
  a.recv = recv;
  a.stream = stream;
  return a;
}

std::vector<int64_t> Displacements(const std::vector<int64_t>& counts) {
  std::vector<int64_t> d(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t s = 0;
  for (int64_t x : v) s += x;
  return s;
}

// Collects mismatches as text, so that each rank's thread reports them.
class Failures {
 public:
  void Add(const std::string& s) {
    if (all_.size() < 4000) all_ += s + "\n";
  }
  void Status(const std::string& what, const shardrec::Status& s) {
    if (!s.ok()) Add(what + ": " + s.message());
  }
  void Compare(const std::string& what, const std::vector<double>& got, const std::vector<double>& want) {
    if (got.size() != want.size()) {
      Add(what + ": " + std::to_string(got.size()) + " elements, expected " + std::to_string(want.size()));
      return;
    }
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != want[i]) {
        Add(what + ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", expected " +
            std::to_string(want[i]));
        return;
      }
    }
  }
  const std::string& text() const { return all_; }

 private:
  std::string all_;
};

// Waits for a posted collective; records a failed post or wait under `what`.
void PostAndWait(Failures& f, const std::string& what, const StatusOr<CommRequest>& request) {
  if (!request.ok()) return f.Add(what + ": post: " + request.status().message());
  f.Status(what, request.value().Wait());
}

// Every collective on `comm` (rank `rank` of `world`, on `device`), each on
// `stream`, against host-computed results. Counts differ per rank and
// include zeros where world > 1, so NCCL's uneven paths run too.
std::string EveryCollective(const Communicator& comm, int rank, int world, int device, cudaStream_t stream) {
  Failures f;
  const std::string where = std::string(stream == nullptr ? "default stream" : "user stream") + ", rank " +
                            std::to_string(rank) + " of " + std::to_string(world);
  // all_to_all_v: rank p sends Count(p, q) elements to q (0 for p=0, q=1).
  auto count = [](int p, int q) -> int64_t { return (p == 0 && q == 1) ? 0 : 1 + (3 * p + 5 * q) % 7; };
  for (const DType& t : {kUInt8, kFloat32, kFloat16, kInt64}) {
    std::vector<int64_t> send_counts(world), recv_counts(world);
    for (int q = 0; q < world; ++q) {
      send_counts[q] = count(rank, q);
      recv_counts[q] = count(q, rank);
    }
    DeviceBuffer send(t.dl, Sum(send_counts), device), recv(t.dl, Sum(recv_counts), device);
    std::vector<double> mine(Sum(send_counts));
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = Value(rank, static_cast<int64_t>(i), t.dl);
    send.Upload(mine);
    sr_collective_args a = Args(send.dl(), recv.dl(), stream);
    a.send_counts = send_counts.data();
    a.recv_counts = recv_counts.data();
    const std::string what = std::string("all_to_all_v ") + t.name + " (" + where + ")";
    PostAndWait(f, what, comm.AllToAllV(a));
    std::vector<double> want;
    for (int q = 0; q < world; ++q) {
      int64_t displ = 0;  // where q's slice for this rank starts in q's send
      for (int p = 0; p < rank; ++p) displ += count(q, p);
      for (int64_t i = 0; i < count(q, rank); ++i) want.push_back(Value(q, displ + i, t.dl));
    }
    f.Compare(what, recv.Download(), want);
  }
  // all_gather_v and reduce_scatter_v, with equal counts (NCCL's
  // all-gather and reduce-scatter) and unequal ones (broadcasts, reduces).
  for (bool equal : {true, false}) {
    std::vector<int64_t> counts(world);
    for (int q = 0; q < world; ++q) counts[q] = equal ? 5 : (q == 1 ? 0 : 3 + 2 * q);
    const std::vector<int64_t> displs = Displacements(counts);
    const std::string shape = equal ? "equal counts" : "unequal counts";
    for (const DType& t : {kUInt8, kFloat64, kBFloat16, kInt32}) {
      DeviceBuffer send(t.dl, counts[rank], device), recv(t.dl, Sum(counts), device);
      std::vector<double> mine(counts[rank]), want;
      for (int64_t i = 0; i < counts[rank]; ++i) mine[i] = Value(rank, i, t.dl);
      send.Upload(mine);
      sr_collective_args a = Args(send.dl(), recv.dl(), stream);
      a.recv_counts = counts.data();
      const std::string what = std::string("all_gather_v ") + t.name + ", " + shape + " (" + where + ")";
      PostAndWait(f, what, comm.AllGatherV(a));
      for (int q = 0; q < world; ++q) {
        for (int64_t i = 0; i < counts[q]; ++i) want.push_back(Value(q, i, t.dl));
      }
      f.Compare(what, recv.Download(), want);
    }
    for (const DType& t : kReducible) {
      for (int32_t op : {SR_REDUCE_SUM, SR_REDUCE_MAX, SR_REDUCE_MIN}) {
        DeviceBuffer send(t.dl, Sum(counts), device), recv(t.dl, counts[rank], device);
        std::vector<double> mine(Sum(counts)), want(counts[rank]);
        for (int64_t i = 0; i < Sum(counts); ++i) mine[i] = Value(rank, i, t.dl);
        send.Upload(mine);
        sr_collective_args a = Args(send.dl(), recv.dl(), stream);
        a.recv_counts = counts.data();
        a.reduce_op = op;
        const std::string what =
            std::string("reduce_scatter_v ") + t.name + " " + sdk::ReduceOpName(op) + ", " + shape + " (" + where + ")";
        PostAndWait(f, what, comm.ReduceScatterV(a));
        for (int64_t i = 0; i < counts[rank]; ++i) {
          want[i] = Value(0, displs[rank] + i, t.dl);
          for (int q = 1; q < world; ++q) want[i] = Combine(op, want[i], Value(q, displs[rank] + i, t.dl));
        }
        f.Compare(what, recv.Download(), want);
      }
    }
  }
  // all_reduce, out of place and in place.
  for (const DType& t : kReducible) {
    for (int32_t op : {SR_REDUCE_SUM, SR_REDUCE_MAX, SR_REDUCE_MIN}) {
      for (bool in_place : {false, true}) {
        const int64_t n = 1000;
        DeviceBuffer send(t.dl, n, device), recv(t.dl, n, device);
        std::vector<double> mine(n), want(n);
        for (int64_t i = 0; i < n; ++i) {
          mine[i] = Value(rank, i, t.dl);
          want[i] = Value(0, i, t.dl);
          for (int q = 1; q < world; ++q) want[i] = Combine(op, want[i], Value(q, i, t.dl));
        }
        send.Upload(mine);
        sr_collective_args a = Args(send.dl(), in_place ? send.dl() : recv.dl(), stream);
        a.reduce_op = op;
        const std::string what = std::string("all_reduce ") + t.name + " " + sdk::ReduceOpName(op) +
                                 (in_place ? ", in place" : "") + " (" + where + ")";
        PostAndWait(f, what, comm.AllReduce(a));
        f.Compare(what, (in_place ? send : recv).Download(), want);
      }
    }
  }
  // broadcast from every root.
  for (int root = 0; root < world; ++root) {
    const int64_t n = 777;
    DeviceBuffer buffer(kFloat32.dl, n, device);
    std::vector<double> mine(n), want(n);
    for (int64_t i = 0; i < n; ++i) {
      mine[i] = Value(rank + 100, i, kFloat32.dl);
      want[i] = Value(root + 100, i, kFloat32.dl);
    }
    buffer.Upload(mine);
    sr_collective_args a = Args(nullptr, buffer.dl(), stream);
    a.root = root;
    const std::string what = "broadcast from rank " + std::to_string(root) + " (" + where + ")";
    PostAndWait(f, what, comm.Broadcast(a));
    f.Compare(what, buffer.Download(), want);
  }
  PostAndWait(f, "barrier (" + where + ")", comm.Barrier());
  return f.text();
}

// Several all_reduces posted before any is waited on, on one stream, then
// tested until each completes, then waited on in reverse order.
std::string ManyOutstanding(const Communicator& comm, int rank, int world, int device, cudaStream_t stream) {
  Failures f;
  constexpr int kRequests = 8;
  constexpr int64_t n = 1 << 16;
  std::vector<std::unique_ptr<DeviceBuffer>> buffers;
  std::vector<CommRequest> requests;
  for (int k = 0; k < kRequests; ++k) {
    buffers.push_back(std::make_unique<DeviceBuffer>(kFloat32.dl, n, device));
    std::vector<double> mine(n);
    for (int64_t i = 0; i < n; ++i) mine[i] = Value(rank + k, i, kFloat32.dl);
    buffers.back()->Upload(mine);
    sr_collective_args a = Args(buffers.back()->dl(), buffers.back()->dl(), stream);
    auto r = comm.AllReduce(a);
    if (!r.ok()) {
      f.Add("post #" + std::to_string(k) + ": " + r.status().message());
      return f.text();
    }
    requests.push_back(std::move(r).value());
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (int k = 0; k < kRequests; ++k) {
    for (;;) {
      StatusOr<bool> done = requests[k].Test();
      if (!done.ok()) {
        f.Add("test #" + std::to_string(k) + ": " + done.status().message());
        break;
      }
      if (done.value()) break;
      if (std::chrono::steady_clock::now() > deadline) {
        f.Add("request #" + std::to_string(k) + " never completed");
        break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  for (int k = kRequests - 1; k >= 0; --k) f.Status("wait #" + std::to_string(k), requests[k].Wait());
  for (int k = 0; k < kRequests; ++k) {
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      want[i] = 0;
      for (int q = 0; q < world; ++q) want[i] += Value(q + k, i, kFloat32.dl);
    }
    f.Compare("outstanding all_reduce #" + std::to_string(k), buffers[k]->Download(), want);
  }
  return f.text();
}

class NcclTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path path = fs::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_comm_nccl.so";
    ASSERT_TRUE(fs::exists(path)) << path << " was not built";
    Status s = registry_.LoadLibrary(path);
    ASSERT_TRUE(s.ok()) << s.message();
    static std::atomic<int> job{0};
    prefix_ = "nccltest" + std::to_string(::getpid()) + "_" + std::to_string(++job);
  }

  ProcessGroupConfig Config(int rank, int world, int device, int64_t timeout_ms = 60000) const {
    ProcessGroupConfig c;
    c.comm = "nccl";
    c.rendezvous = "local:" + prefix_;
    c.prefix = prefix_;
    c.timeout_ms = timeout_ms;
    c.placement = {rank, world, 0, 1};  // one rank per "host": local rank 0 everywhere
    c.device = {kDLCUDA, device};
    return c;
  }

  // Runs body(rank) on `world` threads, rank r on GPU r; each returns its
  // failures as text ("" when fine).
  std::vector<std::string> OnRanks(int world, const std::function<std::string(int)>& body) const {
    std::vector<std::string> out(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        if (cudaSetDevice(r) != cudaSuccess) {
          out[r] = "cudaSetDevice failed";
          return;
        }
        out[r] = body(r);
      });
    }
    for (auto& t : threads) t.join();
    return out;
  }

  HostServices services_;
  PluginRegistry registry_{&services_};
  std::string prefix_;
};

// The GPU tests: each skips on a host without a CUDA device.
class NcclGpuTest : public NcclTest {
 protected:
  void SetUp() override {
    devices_ = DeviceCount();
    if (devices_ == 0) GTEST_SKIP() << kNoGpu;
    NcclTest::SetUp();
  }
  int devices_ = 0;
};

// ----- without a GPU (and with one) ----------------------------------------

TEST_F(NcclTest, LoadsAndIsListedBelowTheCpuBackends) {
  StatusOr<ComponentRef> nccl = registry_.Find(SR_KIND_COMM, "nccl");
  ASSERT_TRUE(nccl.ok()) << nccl.status().message();
  EXPECT_EQ(nccl.value().component->priority, 1);
  bool never_unload = false, transport = false;
  const sr_named_value_list& attrs = nccl.value().component->attributes;
  for (size_t i = 0; i < attrs.count; ++i) {
    const std::string name = attrs.values[i].name;
    if (name == "never_unload") never_unload = attrs.values[i].value.int64_value != 0;
    if (name == "transport") transport = true;
  }
  EXPECT_TRUE(never_unload) << "a library with a CUDA runtime must ask never to be unloaded";
  EXPECT_TRUE(transport);
  const fs::path local = fs::path(SHARDREC_BUILT_PLUGIN_DIR) / "libshardrec_comm_local.so";
  if (fs::exists(local)) {
    ASSERT_TRUE(registry_.LoadLibrary(local).ok());
    StatusOr<ComponentRef> best = registry_.Find(SR_KIND_COMM, "");
    ASSERT_TRUE(best.ok());
    EXPECT_EQ(best.value().name(), "local") << "nccl must never be the default comm backend";
  }
}

TEST_F(NcclTest, CreateWithoutAGpuFailsWithAClearMessage) {
  if (DeviceCount() > 0) GTEST_SKIP() << "a CUDA device is visible; this checks the CPU-only host";
  auto g = ProcessGroup::Create(registry_, Config(0, 1, 0));
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), SR_FAILED_PRECONDITION) << g.status().message();
  // Said in the user's terms (no driver, no GPU), not the runtime's
  // "CUDA driver version is insufficient".
  EXPECT_NE(g.status().message().find("comm nccl: no NVIDIA GPU"), std::string::npos) << g.status().message();
  EXPECT_EQ(g.status().message().find("insufficient"), std::string::npos) << g.status().message();
  std::cout << "create says: " << g.status().message() << "\n";
}

TEST_F(NcclTest, UnknownOptionsAreRejected) {
  ProcessGroupConfig c = Config(0, 1, 0);
  c.options = OptionList{{"max_ctas", "4"}, {"bogus", "1"}};
  auto g = ProcessGroup::Create(registry_, c);
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), SR_INVALID_ARGUMENT) << g.status().message();
  EXPECT_NE(g.status().message().find("comm nccl: unknown option 'bogus'"), std::string::npos)
      << g.status().message();
}

// ----- with a GPU ----------------------------------------------------------

TEST_F(NcclGpuTest, HostDevicesAndMissingGpusAreRejected) {
  ProcessGroupConfig c = Config(0, 1, 0);
  c.device = {kDLCPU, 0};
  auto cpu = ProcessGroup::Create(registry_, c);
  ASSERT_FALSE(cpu.ok());
  EXPECT_EQ(cpu.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(cpu.status().message().find("must be a CUDA device"), std::string::npos) << cpu.status().message();
  c.device = {kDLCUDA, devices_};
  auto missing = ProcessGroup::Create(registry_, c);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), SR_INVALID_ARGUMENT);
  EXPECT_NE(missing.status().message().find("does not exist"), std::string::npos) << missing.status().message();
}

// The plugin moves CUDA tensors only: a host tensor posted to it directly is
// refused at post. A ProcessGroup stages host tensors through the device
// (docs/comm.md), so the same call through the group works.
TEST_F(NcclGpuTest, HostTensorsAreRejectedByThePluginAndStagedByTheGroup) {
  auto g = ProcessGroup::Create(registry_, Config(0, 1, 0));
  ASSERT_TRUE(g.ok()) << g.status().message();
  Tensor x = Tensor::FromVector(std::vector<float>{1, 2, 3, 4});
  auto direct = g.value().communicator().AllReduce(Args(x.mutable_dl(), x.mutable_dl(), nullptr));
  ASSERT_FALSE(direct.ok());
  EXPECT_EQ(direct.status().code(), SR_INVALID_ARGUMENT) << direct.status().message();
  // The communicator is still usable, and the group stages the host tensor.
  EXPECT_TRUE(g.value().Barrier().ok());
  Tensor y = Tensor::Zeros(dtype::kFloat32, {4});
  ASSERT_TRUE(g.value().AllReduce(x, &y).ok());
  EXPECT_EQ(std::vector<float>(y.data<float>(), y.data<float>() + 4), (std::vector<float>{1, 2, 3, 4}));
}

TEST_F(NcclGpuTest, WorldOfOneEveryCollective) {
  auto g = ProcessGroup::Create(registry_, Config(0, 1, 0));
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(EveryCollective(g.value().communicator(), 0, 1, 0, nullptr), "");
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(EveryCollective(g.value().communicator(), 0, 1, 0, stream), "");
  EXPECT_EQ(ManyOutstanding(g.value().communicator(), 0, 1, 0, stream), "");
  EXPECT_EQ(ManyOutstanding(g.value().communicator(), 0, 1, 0, nullptr), "");
  cudaStreamDestroy(stream);
}

TEST_F(NcclGpuTest, WorldOfOneSplitOutlivesItsParent) {
  std::optional<ProcessGroup> sub;
  {
    auto g = ProcessGroup::Create(registry_, Config(0, 1, 0));
    ASSERT_TRUE(g.ok()) << g.status().message();
    auto split = g.value().IntraHost();
    ASSERT_TRUE(split.ok()) << split.status().message();
    sub.emplace(std::move(split).value());
  }  // the parent is destroyed; the sub-group keeps the store
  EXPECT_EQ(EveryCollective(sub->communicator(), 0, 1, 0, nullptr), "");
}

TEST_F(NcclGpuTest, WorldOfTwoEveryCollective) {
  if (devices_ < 2) GTEST_SKIP() << "needs 2 GPUs (NCCL runs one rank per GPU); " << devices_ << " visible";
  auto errors = OnRanks(2, [&](int r) -> std::string {
    auto g = ProcessGroup::Create(registry_, Config(r, 2, r));
    if (!g.ok()) return "create: " + g.status().message();
    cudaStream_t stream = nullptr;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return "cudaStreamCreate failed";
    std::string out = EveryCollective(g.value().communicator(), r, 2, r, nullptr) +
                      EveryCollective(g.value().communicator(), r, 2, r, stream) +
                      ManyOutstanding(g.value().communicator(), r, 2, r, stream);
    cudaStreamDestroy(stream);
    return out;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST_F(NcclGpuTest, WorldOfTwoSplits) {
  if (devices_ < 2) GTEST_SKIP() << "needs 2 GPUs (NCCL runs one rank per GPU); " << devices_ << " visible";
  auto errors = OnRanks(2, [&](int r) -> std::string {
    auto g = ProcessGroup::Create(registry_, Config(r, 2, r));
    if (!g.ok()) return "create: " + g.status().message();
    std::string out;
    {
      // One rank per host: the intra-host groups are singletons.
      auto alone = g.value().IntraHost();
      if (!alone.ok()) return "intra-host split: " + alone.status().message();
      if (alone.value().world_size() != 1) {
        return "the intra-host group has " + std::to_string(alone.value().world_size()) + " ranks";
      }
      out += EveryCollective(alone.value().communicator(), 0, 1, r, nullptr);
    }
    {
      // Keys reversed: rank 1 becomes rank 0 of the sub-communicator.
      auto sub = g.value().communicator().Split(0, -r);
      if (!sub.ok()) return "split: " + sub.status().message();
      DeviceBuffer send(kInt32.dl, 1, r), recv(kInt32.dl, 2, r);
      send.Upload({static_cast<double>(r)});
      std::vector<int64_t> counts = {1, 1};
      sr_collective_args a = Args(send.dl(), recv.dl(), nullptr);
      a.recv_counts = counts.data();
      Failures f;
      PostAndWait(f, "all_gather_v on the reversed split", sub.value().AllGatherV(a));
      f.Compare("ranks of the reversed split", recv.Download(), {1, 0});
      out += f.text();
      out += EveryCollective(sub.value(), 1 - r, 2, r, nullptr);
    }
    out += EveryCollective(g.value().communicator(), r, 2, r, nullptr);  // the parent still works
    return out;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

TEST_F(NcclGpuTest, WorldOfTwoAStalledRankIsNamedWithinTheTimeout) {
  if (devices_ < 2) GTEST_SKIP() << "needs 2 GPUs (NCCL runs one rank per GPU); " << devices_ << " visible";
  constexpr int64_t kTimeoutMs = 4000;
  std::atomic<bool> rank0_done{false};
  auto errors = OnRanks(2, [&](int r) -> std::string {
    auto g = ProcessGroup::Create(registry_, Config(r, 2, r, kTimeoutMs));
    if (!g.ok()) {
      rank0_done = true;
      return "create: " + g.status().message();
    }
    DeviceBuffer x(kFloat32.dl, 1024, r);
    x.Upload(std::vector<double>(1024, 1.0));
    // One all_reduce together first, so NCCL's connections exist and the
    // stalled one is enqueued at once on rank 0.
    Failures f;
    PostAndWait(f, "warm-up all_reduce", g.value().communicator().AllReduce(Args(x.dl(), x.dl(), nullptr)));
    if (!f.text().empty()) {
      rank0_done = true;
      return f.text();
    }
    if (r == 1) {
      // Stalls: never posts the second all_reduce, and destroys its
      // communicator only once rank 0 has given up.
      while (!rank0_done) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return "";
    }
    const auto start = std::chrono::steady_clock::now();
    auto request = g.value().communicator().AllReduce(Args(x.dl(), x.dl(), nullptr));
    Status s = request.ok() ? request.value().Wait() : request.status();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::string out;
    if (s.ok()) out += "the all_reduce completed without rank 1\n";
    if (s.code() != SR_DEADLINE_EXCEEDED) out += "code " + std::to_string(s.code()) + ", expected DEADLINE_EXCEEDED\n";
    if (s.message().find("rank 1") == std::string::npos) out += "the error does not name rank 1: " + s.message() + "\n";
    if (secs > kTimeoutMs / 1000.0 * 1.5 + 1) out += "took " + std::to_string(secs) + " s\n";
    std::cout << "rank 0 says: " << s.message() << "\n";
    // The communicator was aborted: what follows fails at once.
    auto barrier = g.value().communicator().Barrier();
    if (barrier.ok() || barrier.status().code() != SR_FAILED_PRECONDITION) {
      out += "a barrier after the abort did not fail with FAILED_PRECONDITION\n";
    }
    rank0_done = true;
    return out;
  });
  for (int r = 0; r < 2; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace shardrec
