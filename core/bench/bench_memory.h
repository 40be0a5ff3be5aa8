// Where `shardrec bench kernel` keeps a kernel's inputs and outputs: views of
// the host batches for a CPU kernel; for a GPU kernel, copies uploaded once
// to device memory with its own stream, so each timed call is the kernel
// alone (no staging) followed by a wait for the stream.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>
#include <vector>

#include "id_batches.h"
#include "shardrec/core/status.h"
#include "shardrec/core/tensor/tensor.h"

namespace shardrec::bench {

class BenchMemory {
 public:
  struct Batch {
    DLTensor offsets{}, indices{}, weights{};
  };

  explicit BenchMemory(DLDevice device) : device_(device) {}
  ~BenchMemory();
  BenchMemory(const BenchMemory&) = delete;
  BenchMemory& operator=(const BenchMemory&) = delete;

  // `batches`, `grad` and `output` must outlive this object.
  Status Prepare(const std::vector<IdBatch>& batches, const std::vector<float>& grad, Tensor& output);

  // The tensors of `b` (one of the prepared batches).
  const Batch& batch(const IdBatch& b) const { return views_[static_cast<size_t>(&b - batches_)]; }
  DLTensor& output() { return output_; }
  const DLTensor& grad() const { return grad_; }
  void* stream() const { return stream_; }
  // Waits for the calls on stream() (nothing to wait for on the CPU).
  Status Wait() const;

 private:
  // A device copy of `bytes` at `host`, NULL for none.
  StatusOr<void*> Upload(const void* host, size_t bytes);

  DLDevice device_;
  const IdBatch* batches_ = nullptr;
  std::vector<Batch> views_;
  DLTensor output_{}, grad_{};
  std::vector<int64_t> shapes_;  // backing store of every view's shape
  std::vector<void*> device_blocks_;
  void* stream_ = nullptr;
};

}  // namespace shardrec::bench
