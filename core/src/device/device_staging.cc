// DeviceStaging (device_staging.h) over core's CUDA runtime wrapper.
#include "device_staging.h"

#include <fmt/format.h>

#include "shardrec/core/device/cuda_runtime.h"

namespace shardrec {
namespace {

// byte_offset + the bytes from the tensor's first element to past its last
// (strides in elements; negative strides are refused).
StatusOr<size_t> SpanBytes(const DLTensor& t) {
  const size_t element = static_cast<size_t>((t.dtype.bits * t.dtype.lanes + 7) / 8);
  size_t last = 0;  // element offset of the last element
  int64_t contiguous = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] == 0) return static_cast<size_t>(t.byte_offset);
    const int64_t stride = t.strides != nullptr ? t.strides[d] : contiguous;
    if (stride < 0) return UnimplementedError("staging a tensor with a negative stride to the GPU");
    last += static_cast<size_t>((t.shape[d] - 1) * stride);
    contiguous *= t.shape[d];
  }
  return static_cast<size_t>(t.byte_offset) + (last + 1) * element;
}

bool OnHost(const DLTensor* t) {
  return t != nullptr && (t->device.device_type == kDLCPU || t->device.device_type == kDLCUDAHost);
}

}  // namespace

StatusOr<std::unique_ptr<DeviceStaging>> DeviceStaging::Create(int device) {
  SR_ASSIGN_OR_RETURN(void* stream, device::CreateStream(device));
  return std::unique_ptr<DeviceStaging>(new DeviceStaging(device, stream));
}

DeviceStaging::~DeviceStaging() {
  (void)device::Synchronize(device_, stream_);
  for (Slot& s : slots_) device::CudaFree(device_, s.device, stream_);
  (void)device::Synchronize(device_, stream_);
  device::DestroyStream(device_, stream_);
}

StatusOr<DeviceStaging::Slot*> DeviceStaging::Stage(const DLTensor& t) {
  SR_ASSIGN_OR_RETURN(const size_t bytes, SpanBytes(t));
  if (used_ == slots_.size()) slots_.emplace_back();
  Slot& s = slots_[used_++];
  if (s.capacity < bytes) {
    device::CudaFree(device_, s.device, stream_);
    s.capacity = 0;
    s.device = device::CudaAlloc(device_, bytes + bytes / 2, stream_);
    if (s.device == nullptr) {
      return Status(SR_RESOURCE_EXHAUSTED,
                    fmt::format("cannot allocate {} bytes on cuda:{} to stage a tensor", bytes, device_));
    }
    s.capacity = bytes + bytes / 2;
  }
  s.bytes = bytes;
  s.host = nullptr;
  s.twin = t;
  s.twin.data = s.device;
  s.twin.device = DLDevice{kDLCUDA, device_};
  if (bytes > 0) SR_RETURN_IF_ERROR(device::CopyToDevice(device_, s.device, t.data, bytes, stream_));
  return &s;
}

StatusOr<const DLTensor*> DeviceStaging::In(const DLTensor* t) {
  if (!OnHost(t)) return t;
  SR_ASSIGN_OR_RETURN(Slot * s, Stage(*t));
  return &s->twin;
}

StatusOr<DLTensor*> DeviceStaging::Out(DLTensor* t) {
  if (!OnHost(t)) return t;
  // Copied in too: elements the plugin does not write must come back as
  // they were.
  SR_ASSIGN_OR_RETURN(Slot * s, Stage(*t));
  s->host = t;
  return &s->twin;
}

Status DeviceStaging::Finish() {
  Status status = Status::Ok();
  for (size_t i = 0; i < used_ && status.ok(); ++i) {
    const Slot& s = slots_[i];
    if (s.host != nullptr && s.bytes > 0) {
      status = device::CopyToHost(device_, s.host->data, s.device, s.bytes, stream_);
    }
  }
  const Status synced = used_ > 0 ? device::Synchronize(device_, stream_) : Status::Ok();
  used_ = 0;
  return status.ok() ? synced : status;
}

}  // namespace shardrec
