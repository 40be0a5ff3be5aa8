// An owning, dense, row-major host tensor: dtype + shape + 64-byte aligned
// storage shared between copies (copies are shallow, like torch.Tensor).
// It is what npy files load into, what the embedding collections return,
// and it converts to and from DLPack without copying, so the same bytes can
// be handed to a plugin (dl()) or to another framework (ToDLPack()).
// Thread-safety: const methods may be called concurrently; writes through
// data() need the caller's own synchronisation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <dlpack/dlpack.h>

#include "shardrec/core/dl_view.h"
#include "shardrec/core/status.h"

namespace shardrec {

// Element types the host understands (DLPack codes). bfloat16 is {kDLBfloat, 16}.
namespace dtype {
inline constexpr DLDataType kFloat32{kDLFloat, 32, 1};
inline constexpr DLDataType kFloat64{kDLFloat, 64, 1};
inline constexpr DLDataType kFloat16{kDLFloat, 16, 1};
inline constexpr DLDataType kBFloat16{kDLBfloat, 16, 1};
inline constexpr DLDataType kInt32{kDLInt, 32, 1};
inline constexpr DLDataType kInt64{kDLInt, 64, 1};
inline constexpr DLDataType kUInt8{kDLUInt, 8, 1};
}  // namespace dtype

using sdk::DTypeName;  // "float32", "bfloat16", "int64", ...
using sdk::SameDType;
// Bytes per element (lanes included).
size_t DTypeSize(DLDataType t);
// "[3, 4]"
std::string ShapeString(std::span<const int64_t> shape);

class Tensor {
 public:
  // An empty float32 tensor of shape [0].
  Tensor();
  // Copies share the storage. Each copy's dl() points at its own shape: the
  // defaults would leave it pointing at the source's, dangling once the
  // source is gone (a copy made from a temporary).
  Tensor(const Tensor& other);
  Tensor& operator=(const Tensor& other);
  Tensor(Tensor&& other) noexcept;
  Tensor& operator=(Tensor&& other) noexcept;

  // Uninitialised / zero-filled storage of `shape` (every extent >= 0).
  static Tensor Empty(DLDataType dtype, std::vector<int64_t> shape);
  static Tensor Zeros(DLDataType dtype, std::vector<int64_t> shape);
  // A copy of `values` (1-D unless `shape` is given; its product must match).
  template <class T>
  static Tensor FromVector(const std::vector<T>& values, std::vector<int64_t> shape = {});

  // Takes ownership of a DLPack capsule without copying. Refused (the
  // capsule is then released): a non-CPU device, non-contiguous strides.
  static StatusOr<Tensor> FromDLPack(DLManagedTensor* managed);
  // A DLPack capsule sharing this tensor's storage; the consumer calls its
  // deleter. The storage lives until both this tensor and the capsule are gone.
  DLManagedTensor* ToDLPack() const;
  // A borrowed view for a plugin call: valid while this tensor lives.
  const DLTensor& dl() const { return dl_; }
  DLTensor* mutable_dl() { return &dl_; }

  DLDataType dtype() const { return dl_.dtype; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t size(int d) const { return shape_.at(static_cast<size_t>(d)); }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * DTypeSize(dtype()); }

  void* raw_data() { return dl_.data; }
  const void* raw_data() const { return dl_.data; }
  // Typed access; aborts on a dtype mismatch (a programming error, not input).
  template <class T>
  T* data();
  template <class T>
  const T* data() const;
  template <class T>
  std::span<T> span() { return {data<T>(), static_cast<size_t>(numel_)}; }
  template <class T>
  std::span<const T> span() const { return {data<T>(), static_cast<size_t>(numel_)}; }

  // Same storage, new shape with the same number of elements.
  StatusOr<Tensor> Reshape(std::vector<int64_t> shape) const;
  // A deep copy.
  Tensor Clone() const;

 private:
  Tensor(std::shared_ptr<void> storage, void* data, DLDataType dtype, std::vector<int64_t> shape);
  void CheckType(DLDataType want) const;
  void ForgetStorage() noexcept;

  std::shared_ptr<void> storage_;
  std::vector<int64_t> shape_;
  int64_t numel_ = 0;
  DLTensor dl_{};
};

// Reports a programming error (not bad input) and aborts.
[[noreturn]] void AbortOnMisuse(const std::string& what);

// Refuses a tensor whose dtype or rank differs, naming `what` ("lengths.npy").
Status ExpectTensor(const Tensor& t, const std::string& what, DLDataType dtype, int ndim);

template <class T>
Tensor Tensor::FromVector(const std::vector<T>& values, std::vector<int64_t> shape) {
  if (shape.empty()) shape = {static_cast<int64_t>(values.size())};
  Tensor t = Empty(DLTypeOf<T>(), std::move(shape));
  if (static_cast<size_t>(t.numel()) != values.size()) {
    AbortOnMisuse("Tensor::FromVector: " + std::to_string(values.size()) +
                  " values for shape " + ShapeString(t.shape()));
  }
  std::copy(values.begin(), values.end(), t.template data<T>());
  return t;
}

template <class T>
T* Tensor::data() {
  CheckType(DLTypeOf<T>());
  return static_cast<T*>(dl_.data);
}

template <class T>
const T* Tensor::data() const {
  CheckType(DLTypeOf<T>());
  return static_cast<const T*>(dl_.data);
}

}  // namespace shardrec
