// Owning host tensors (see tensor.h).
#include "shardrec/core/tensor/tensor.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace shardrec {

namespace {
constexpr size_t kAlignment = 64;  // a cache line; also every SIMD width we use

std::shared_ptr<void> Allocate(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (p == nullptr) throw std::bad_alloc();
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

int64_t Product(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t e : shape) n *= e;
  return n;
}

// What a DLPack capsule made by ToDLPack owns.
struct ExportContext {
  std::shared_ptr<void> storage;
  std::vector<int64_t> shape;
};
}  // namespace

void AbortOnMisuse(const std::string& what) {
  std::fprintf(stderr, "shardrec: internal misuse: %s\n", what.c_str());
  std::abort();
}

size_t DTypeSize(DLDataType t) { return (static_cast<size_t>(t.bits) * t.lanes + 7) / 8; }

std::string ShapeString(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Tensor::Tensor() : Tensor(Allocate(0), nullptr, dtype::kFloat32, {0}) {}

Tensor::Tensor(std::shared_ptr<void> storage, void* data, DLDataType dtype,
               std::vector<int64_t> shape)
    : storage_(std::move(storage)), shape_(std::move(shape)), numel_(Product(shape_)) {
  dl_.data = data != nullptr ? data : storage_.get();
  dl_.device = {kDLCPU, 0};
  dl_.ndim = static_cast<int32_t>(shape_.size());
  dl_.dtype = dtype;
  dl_.shape = shape_.data();
  dl_.strides = nullptr;
  dl_.byte_offset = 0;
}

Tensor::Tensor(const Tensor& other)
    : storage_(other.storage_), shape_(other.shape_), numel_(other.numel_), dl_(other.dl_) {
  dl_.shape = shape_.data();
}

Tensor& Tensor::operator=(const Tensor& other) {
  if (this != &other) {
    storage_ = other.storage_;
    shape_ = other.shape_;
    numel_ = other.numel_;
    dl_ = other.dl_;
    dl_.shape = shape_.data();
  }
  return *this;
}

Tensor::Tensor(Tensor&& other) noexcept
    : storage_(std::move(other.storage_)), shape_(std::move(other.shape_)), numel_(other.numel_), dl_(other.dl_) {
  dl_.shape = shape_.data();
  other.ForgetStorage();
}

void Tensor::ForgetStorage() noexcept {
  // A moved-from tensor: no storage, no elements, nothing pointing at the new owner's.
  shape_.assign(1, 0);
  numel_ = 0;
  dl_.data = nullptr;
  dl_.ndim = 1;
  dl_.shape = shape_.data();
}

Tensor& Tensor::operator=(Tensor&& other) noexcept {
  if (this != &other) {
    storage_ = std::move(other.storage_);
    shape_ = std::move(other.shape_);
    numel_ = other.numel_;
    dl_ = other.dl_;
    dl_.shape = shape_.data();
    other.ForgetStorage();
  }
  return *this;
}

Tensor Tensor::Empty(DLDataType dtype, std::vector<int64_t> shape) {
  for (int64_t e : shape) {
    if (e < 0) AbortOnMisuse("Tensor::Empty: negative extent in " + ShapeString(shape));
  }
  const size_t bytes = static_cast<size_t>(Product(shape)) * DTypeSize(dtype);
  auto storage = Allocate(bytes);
  return Tensor(storage, storage.get(), dtype, std::move(shape));
}

Tensor Tensor::Zeros(DLDataType dtype, std::vector<int64_t> shape) {
  Tensor t = Empty(dtype, std::move(shape));
  std::memset(t.raw_data(), 0, t.nbytes());
  return t;
}

StatusOr<Tensor> Tensor::FromDLPack(DLManagedTensor* managed) {
  if (managed == nullptr) return InvalidArgumentError("FromDLPack: NULL capsule");
  std::shared_ptr<void> owner(managed, [](void* p) {
    auto* m = static_cast<DLManagedTensor*>(p);
    if (m->deleter) m->deleter(m);
  });
  const DLTensor& t = managed->dl_tensor;
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost) {
    return InvalidArgumentError("FromDLPack: expected a CPU tensor, got device type " +
                                std::to_string(t.device.device_type));
  }
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  if (t.strides != nullptr) {
    int64_t expect = 1;
    for (int d = t.ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && t.strides[d] != expect) {
        return InvalidArgumentError("FromDLPack: strides are not row-major contiguous for shape " +
                                    ShapeString(shape));
      }
      expect *= shape[d];
    }
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return Tensor(std::move(owner), data, t.dtype, std::move(shape));
}

DLManagedTensor* Tensor::ToDLPack() const {
  auto* ctx = new ExportContext{storage_, shape_};
  auto* managed = new DLManagedTensor{};
  managed->dl_tensor = dl_;
  managed->dl_tensor.shape = ctx->shape.data();
  managed->manager_ctx = ctx;
  managed->deleter = [](DLManagedTensor* self) {
    delete static_cast<ExportContext*>(self->manager_ctx);
    delete self;
  };
  return managed;
}

StatusOr<Tensor> Tensor::Reshape(std::vector<int64_t> shape) const {
  for (int64_t e : shape) {
    if (e < 0) return InvalidArgumentError("Reshape: negative extent in " + ShapeString(shape));
  }
  if (Product(shape) != numel_) {
    return InvalidArgumentError("Reshape: " + ShapeString(shape_) + " has " +
                                std::to_string(numel_) + " elements, " + ShapeString(shape) +
                                " needs " + std::to_string(Product(shape)));
  }
  return Tensor(storage_, dl_.data, dtype(), std::move(shape));
}

Tensor Tensor::Clone() const {
  Tensor copy = Empty(dtype(), shape_);
  if (nbytes() > 0) std::memcpy(copy.raw_data(), raw_data(), nbytes());
  return copy;
}

void Tensor::CheckType(DLDataType want) const {
  if (!SameDType(want, dtype())) {
    AbortOnMisuse("Tensor of dtype " + DTypeName(dtype()) + " accessed as " + DTypeName(want));
  }
}

Status ExpectTensor(const Tensor& t, const std::string& what, DLDataType dtype, int ndim) {
  if (!SameDType(t.dtype(), dtype)) {
    return InvalidArgumentError(what + ": expected dtype " + DTypeName(dtype) + ", got " +
                                DTypeName(t.dtype()));
  }
  if (t.ndim() != ndim) {
    return InvalidArgumentError(what + ": expected " + std::to_string(ndim) +
                                " dimension(s), got shape " + ShapeString(t.shape()));
  }
  return Status::Ok();
}

}  // namespace shardrec
