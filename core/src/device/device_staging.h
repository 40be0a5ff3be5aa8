// DeviceStaging: lets the host hand host-memory tensors to a plugin whose
// device is a GPU (a CUDA kernel, the NCCL communicator). For one call it
// makes a device twin of every host tensor (same shape, strides and
// byte_offset; the bytes they span copied in), runs the call on its own
// stream, and copies the tensors the plugin writes back before the call
// returns. Tensors already on the GPU pass through untouched, so callers
// that keep data on the device (bench kernel) pay nothing. Buffers are kept
// and grown between calls.
//
// Not thread-safe: the owner (Kernel, ProcessGroup) serialises calls with
// mutex().
#pragma once

#include <dlpack/dlpack.h>

#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>

#include "shardrec/core/status.h"

namespace shardrec {

class DeviceStaging {
 public:
  static StatusOr<std::unique_ptr<DeviceStaging>> Create(int device);
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  std::mutex& mutex() { return mutex_; }
  // A device twin of `t` with its bytes copied in; `t` itself when it is
  // NULL or already on the GPU.
  StatusOr<const DLTensor*> In(const DLTensor* t);
  // The same for a tensor the plugin writes: Finish() copies it back.
  StatusOr<DLTensor*> Out(DLTensor* t);
  // True once In/Out staged a tensor in this call: the call must then run
  // on stream().
  bool staged() const { return used_ > 0; }
  void* stream() const { return stream_; }
  int device() const { return device_; }
  // Copies the Out() tensors back, waits for the stream and readies the
  // next call. Called after every call, failed ones included.
  Status Finish();

 private:
  struct Slot {
    void* device = nullptr;
    size_t capacity = 0;
    DLTensor twin{};
    DLTensor* host = nullptr;  // set for Out(): copied back by Finish()
    size_t bytes = 0;          // byte_offset + the bytes the tensor spans
  };
  explicit DeviceStaging(int device, void* stream) : device_(device), stream_(stream) {}
  StatusOr<Slot*> Stage(const DLTensor& t);

  int device_ = 0;
  void* stream_ = nullptr;
  std::mutex mutex_;
  std::deque<Slot> slots_;
  size_t used_ = 0;
};

}  // namespace shardrec
