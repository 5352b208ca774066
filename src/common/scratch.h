#pragma once
// Scratch memory kept from one operation to the next.

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace tutti::detail {

// Memory an algorithm works in, kept by its communicator (or hierarchy) from one operation
// to the next (one operation runs at a time). Fresh memory costs a page
// fault per 4 KiB when first touched (2,048 for 8 MiB: on these machines
// more than moving the bytes), and a std::vector zeroes it besides. A
// buffer's contents are undefined when handed out; the slots are distinct
// buffers of one operation. After an operation, buffers holding more than
// kKeepBytes together are freed. Buffers past that bound (and every one
// after an operation that went past it) are faulted in again by each
// operation, so they are aligned to 2 MiB and asked to be backed by
// transparent huge pages, one fault per 2 MiB where the kernel allows it (a
// 256 MiB two-level all_reduce otherwise faults its scratch in 4 KiB at a
// time in every operation: bench/peers/netbed/compare.sh, PER=2, MAXB=256M).
// Kept ones are not: buffers that all start on a 2 MiB boundary compete for
// the same cache sets when an operation walks them side by side, which made
// a 16 MiB all_reduce between 4 x 1 test-bed hosts markedly slower
// (bench/peers/netbed/compare.sh, PER=1, 16 MiB, against a build that aligns
// kept buffers to 2 MiB).
class Scratch {
 public:
  static constexpr int kSlots = 4;
  static constexpr std::size_t kKeepBytes = std::size_t(64) << 20;
  static constexpr std::size_t kHugeBytes = std::size_t(2) << 20;
  char* get(int slot, std::size_t bytes) {
    Buf& b = bufs_[slot];
    if (b.size < bytes) {
      b.p.reset();  // before the new one: at most one buffer of a slot at a time
      b.size = 0;
      b.p.reset(allocate(bytes, over_ || total() + bytes > kKeepBytes));
      b.size = bytes;
    }
    return b.p.get();
  }
  // After an operation.
  void trim() {
    over_ = total() > kKeepBytes;
    if (!over_) return;
    for (Buf& b : bufs_) {
      b.p.reset();
      b.size = 0;
    }
  }

 private:
  std::size_t total() const {
    std::size_t t = 0;
    for (const Buf& b : bufs_) t += b.size;
    return t;
  }
  static char* allocate(std::size_t bytes, bool huge) {
    if (!huge || bytes < kHugeBytes) {
      void* p = std::malloc(bytes);
      if (!p) throw std::bad_alloc();
      return static_cast<char*>(p);
    }
    const std::size_t rounded = (bytes + kHugeBytes - 1) / kHugeBytes * kHugeBytes;
    void* p = std::aligned_alloc(kHugeBytes, rounded);
    if (!p) throw std::bad_alloc();
    ::madvise(p, rounded, MADV_HUGEPAGE);  // a hint: refused where huge pages are off
    return static_cast<char*>(p);
  }
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  struct Buf {
    std::unique_ptr<char, Free> p;
    std::size_t size = 0;
  };
  Buf bufs_[kSlots];
  bool over_ = false;  // the last operation went past kKeepBytes
};

}  // namespace tutti::detail
