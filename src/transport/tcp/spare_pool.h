#pragma once
// Buffers kept for reuse by size class, so that finding one is a few bit
// operations whatever the pool holds, and a pool filled by one size of
// message makes way for the next size.
//
// Class k holds buffers whose capacity has bit width k + 1 (from 2^k to
// 2^(k+1) - 1 bytes), each class last in, first out (the last given back is
// warm in cache). One list scanned for a buffer that fits would cost a pass
// over every kept buffer for each message once it held only smaller ones
// (after a run of 8-byte messages, every later small unexpected message
// would pass over the 1024 8-byte buffers kept: TUTTI_TRANSPORT=tcp
// tuttirun -n 4 tutti-bench reduce, 64 B right after 8 B).
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace tutti::detail {

template <class Bytes>
class SparePool {
 public:
  SparePool(std::size_t max_bytes, std::size_t max_buffers) : max_bytes_(max_bytes), max_buffers_(max_buffers) {}

  // A buffer resized to `bytes`: a kept one that holds it (the last given
  // back of the smallest class that does), else a new one.
  Bytes take(std::size_t bytes) {
    Bytes b;
    if (bytes > 0) {
      const int k = class_of(bytes);
      // Class k may hold buffers smaller than `bytes`; every buffer of a
      // higher class holds it.
      if (!classes_[k].empty() && classes_[k].back().capacity() >= bytes) {
        b = pop(k);
      } else if (const std::uint64_t above = k + 1 < kClasses ? nonempty_ >> (k + 1) << (k + 1) : 0; above) {
        b = pop(std::countr_zero(above));
      }
    }
    b.resize(bytes);
    return b;
  }

  // Keeps b while the pool holds fewer than max_buffers and max_bytes
  // together, dropping buffers of smaller classes to make room for it.
  void give(Bytes&& b) {
    const std::size_t cap = b.capacity();
    if (cap == 0 || cap > max_bytes_) return;
    const int k = class_of(cap);
    while (count_ >= max_buffers_ || bytes_ + cap > max_bytes_) {
      if (nonempty_ == 0 || std::countr_zero(nonempty_) >= k) return;
      pop(std::countr_zero(nonempty_));
    }
    classes_[k].push_back(std::move(b));
    nonempty_ |= std::uint64_t(1) << k;
    bytes_ += cap;
    ++count_;
  }

  std::size_t buffers() const { return count_; }
  std::size_t bytes() const { return bytes_; }

 private:
  static constexpr int kClasses = 64;
  static int class_of(std::size_t bytes) { return static_cast<int>(std::bit_width(bytes)) - 1; }

  Bytes pop(int k) {
    Bytes b = std::move(classes_[k].back());
    classes_[k].pop_back();
    if (classes_[k].empty()) nonempty_ &= ~(std::uint64_t(1) << k);
    bytes_ -= b.capacity();
    --count_;
    return b;
  }

  std::size_t max_bytes_, max_buffers_;
  std::array<std::vector<Bytes>, kClasses> classes_;
  std::uint64_t nonempty_ = 0;  // bit k: class k holds a buffer
  std::size_t bytes_ = 0, count_ = 0;
};

}  // namespace tutti::detail
