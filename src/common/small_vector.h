// A vector of trivially copyable values that keeps its first N in place:
// the per-rank arrays an operation builds (block pointers, counts) cost no
// allocation on communicators of up to N ranks. Copyable (operations queued
// for later keep their own copy); not assignable.
#pragma once

#include <algorithm>
#include <cstddef>
#include <iterator>
#include <memory>
#include <span>
#include <type_traits>

namespace tutti::detail {

template <class T, std::size_t N = 16>
class SmallVector {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  SmallVector() = default;
  SmallVector(std::size_t n, const T& value) { resize(n, value); }
  template <std::input_iterator It>
  SmallVector(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }
  SmallVector(const SmallVector& o) {
    reserve(o.size_);
    std::copy(o.begin(), o.end(), data());
    size_ = o.size_;
  }
  SmallVector(SmallVector&& o) noexcept : heap_(std::move(o.heap_)), size_(o.size_), cap_(o.cap_) {
    if (!heap_) std::copy(o.inline_, o.inline_ + size_, inline_);
    o.size_ = 0;
    o.cap_ = N;
  }
  SmallVector& operator=(const SmallVector&) = delete;
  SmallVector& operator=(SmallVector&&) = delete;

  T* data() { return heap_ ? heap_.get() : inline_; }
  const T* data() const { return heap_ ? heap_.get() : inline_; }
  std::size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  T* begin() { return data(); }
  T* end() { return data() + size_; }
  const T* begin() const { return data(); }
  const T* end() const { return data() + size_; }
  operator std::span<const T>() const { return {data(), size_}; }

  void reserve(std::size_t n) {
    if (n <= cap_) return;
    std::unique_ptr<T[]> bigger(new T[n]);
    std::copy(begin(), end(), bigger.get());
    heap_ = std::move(bigger);
    cap_ = n;
  }
  void push_back(const T& v) {
    const T value = v;  // v may lie in the storage reserve() replaces
    if (size_ == cap_) reserve(2 * cap_);
    data()[size_++] = value;
  }
  void resize(std::size_t n, const T& value = T()) {
    reserve(n);
    if (n > size_) std::fill(data() + size_, data() + n, value);
    size_ = n;
  }

 private:
  T inline_[N];
  std::unique_ptr<T[]> heap_;
  std::size_t size_ = 0, cap_ = N;
};

}  // namespace tutti::detail
