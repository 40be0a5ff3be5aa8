// BenchMemory (bench_memory.h).
#include "bench_memory.h"

#include <fmt/format.h>

#include "shardrec/core/device/cuda_runtime.h"

namespace shardrec::bench {
namespace {

DLTensor View(void* data, DLDataType dtype, DLDevice device, int64_t* shape, int ndim) {
  DLTensor t{};
  t.data = data;
  t.device = device;
  t.ndim = ndim;
  t.dtype = dtype;
  t.shape = shape;
  return t;
}

}  // namespace

BenchMemory::~BenchMemory() {
  if (device_.device_type != kDLCUDA) return;
  (void)device::Synchronize(device_.device_id, stream_);
  for (void* p : device_blocks_) device::CudaFree(device_.device_id, p, stream_);
  (void)device::Synchronize(device_.device_id, stream_);
  device::DestroyStream(device_.device_id, stream_);
}

StatusOr<void*> BenchMemory::Upload(const void* host, size_t bytes) {
  void* p = device::CudaAlloc(device_.device_id, bytes, stream_);
  if (p == nullptr) {
    return Status(SR_RESOURCE_EXHAUSTED, fmt::format("bench: cannot allocate {} bytes on cuda:{}", bytes,
                                                     device_.device_id));
  }
  device_blocks_.push_back(p);
  if (host != nullptr) SR_RETURN_IF_ERROR(device::CopyToDevice(device_.device_id, p, host, bytes, stream_));
  return p;
}

Status BenchMemory::Prepare(const std::vector<IdBatch>& batches, const std::vector<float>& grad, Tensor& output) {
  const bool gpu = device_.device_type == kDLCUDA;
  if (gpu) {
    SR_ASSIGN_OR_RETURN(stream_, device::CreateStream(device_.device_id));
  }
  batches_ = batches.data();
  // Shapes first, so the pointers into shapes_ stay valid.
  shapes_.clear();
  for (const IdBatch& b : batches) {
    shapes_.push_back(static_cast<int64_t>(b.offsets.size()));
    shapes_.push_back(static_cast<int64_t>(b.ids.size()));
    shapes_.push_back(static_cast<int64_t>(b.weights.size()));
  }
  shapes_.push_back(output.size(0));
  shapes_.push_back(output.size(1));
  const DLDataType i64{kDLInt, 64, 1}, f32{kDLFloat, 32, 1};
  views_.clear();
  for (size_t k = 0; k < batches.size(); ++k) {
    const IdBatch& b = batches[k];
    Batch v;
    void* offsets = const_cast<int64_t*>(b.offsets.data());
    void* ids = const_cast<int64_t*>(b.ids.data());
    void* weights = const_cast<float*>(b.weights.data());
    if (gpu) {
      SR_ASSIGN_OR_RETURN(offsets, Upload(b.offsets.data(), b.offsets.size() * sizeof(int64_t)));
      SR_ASSIGN_OR_RETURN(ids, Upload(b.ids.data(), b.ids.size() * sizeof(int64_t)));
      SR_ASSIGN_OR_RETURN(weights, Upload(b.weights.data(), b.weights.size() * sizeof(float)));
    }
    v.offsets = View(offsets, i64, device_, &shapes_[3 * k], 1);
    v.indices = View(ids, i64, device_, &shapes_[3 * k + 1], 1);
    v.weights = View(weights, f32, device_, &shapes_[3 * k + 2], 1);
    views_.push_back(v);
  }
  int64_t* matrix_shape = &shapes_[3 * batches.size()];
  void* out = output.mutable_dl()->data;
  void* g = const_cast<float*>(grad.data());
  if (gpu) {
    SR_ASSIGN_OR_RETURN(out, Upload(nullptr, static_cast<size_t>(output.size(0) * output.size(1)) * sizeof(float)));
    SR_ASSIGN_OR_RETURN(g, Upload(grad.data(), grad.size() * sizeof(float)));
  }
  output_ = View(out, f32, device_, matrix_shape, 2);
  grad_ = View(g, f32, device_, matrix_shape, 2);
  return Wait();
}

Status BenchMemory::Wait() const {
  if (device_.device_type != kDLCUDA) return Status::Ok();
  return device::Synchronize(device_.device_id, stream_);
}

}  // namespace shardrec::bench
