// SharedArray<T>: an immutable array whose storage is shared, not copied.
// It either owns a std::vector (built here) or borrows memory another runtime
// owns -- a torch tensor handed over by DLPack -- kept alive by `owner` for as
// long as any copy of the array lives. A KeyedJaggedTensor's ids and weights
// are SharedArrays, so a batch built from Python's tensors is never copied
// and copying a KJT is cheap. Nothing writes through a SharedArray; the
// borrowed memory must not be changed by its owner while the array is in use
// (the same contract as TorchRec's KJT over its tensors).
#pragma once

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace shardrec {

template <class T>
class SharedArray {
 public:
  using value_type = T;
  using const_iterator = const T*;
  using iterator = const T*;  // read-only either way

  SharedArray() = default;
  SharedArray(const SharedArray&) = default;
  SharedArray& operator=(const SharedArray&) = default;
  // A moved-from array is empty (not a view of memory it no longer keeps).
  SharedArray(SharedArray&& o) noexcept
      : owner_(std::move(o.owner_)), data_(std::exchange(o.data_, nullptr)), size_(std::exchange(o.size_, 0)),
        owns_vector_(std::exchange(o.owns_vector_, false)) {}
  SharedArray& operator=(SharedArray&& o) noexcept {
    owner_ = std::move(o.owner_);
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    owns_vector_ = std::exchange(o.owns_vector_, false);
    return *this;
  }
  // Owning: takes the vector (implicit, so every factory taking a vector
  // still takes one).
  SharedArray(std::vector<T> v)  // NOLINT(google-explicit-constructor)
      : SharedArray(std::make_shared<const std::vector<T>>(std::move(v))) {}
  SharedArray(std::initializer_list<T> values) : SharedArray(std::vector<T>(values)) {}
  // Borrowing: `data[0, size)` stays valid while `owner` lives.
  static SharedArray Borrow(const T* data, size_t size, std::shared_ptr<const void> owner) {
    SharedArray a;
    a.owner_ = std::move(owner);
    a.data_ = size == 0 ? nullptr : data;
    a.size_ = size;
    return a;
  }

  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }
  const T& operator[](size_t i) const { return data_[i]; }
  const T& back() const { return data_[size_ - 1]; }
  std::span<const T> span() const { return {data_, size_}; }
  // A copy the caller owns and may change.
  std::vector<T> ToVector() const { return std::vector<T>(begin(), end()); }
  // Whether the storage belongs to another runtime (for tests and stats).
  bool borrowed() const { return owner_ != nullptr && !owns_vector_; }

  friend bool operator==(const SharedArray& a, const SharedArray& b) {
    return a.size_ == b.size_ && std::equal(a.begin(), a.end(), b.begin());
  }
  friend bool operator==(const SharedArray& a, const std::vector<T>& b) {
    return a.size_ == b.size() && std::equal(a.begin(), a.end(), b.begin());
  }

 private:
  explicit SharedArray(std::shared_ptr<const std::vector<T>> v)
      : owner_(v), data_(v->empty() ? nullptr : v->data()), size_(v->size()), owns_vector_(true) {}

  std::shared_ptr<const void> owner_;
  const T* data_ = nullptr;
  size_t size_ = 0;
  bool owns_vector_ = false;
};

}  // namespace shardrec
