#pragma once
// Scratch memory kept from one operation to the next.

#include <cstddef>
#include <memory>

namespace tutti::detail {

// Memory an algorithm works in, kept by its communicator (or hierarchy) from one operation
// to the next (one operation runs at a time). Fresh memory costs a page
// fault per 4 KiB when first touched (2,048 for 8 MiB: on these machines
// more than moving the bytes), and a std::vector zeroes it besides. A
// buffer's contents are undefined when handed out; the slots are distinct
// buffers of one operation. After an operation, buffers holding more than
// kKeepBytes together are freed.
class Scratch {
 public:
  static constexpr int kSlots = 4;
  static constexpr std::size_t kKeepBytes = std::size_t(64) << 20;
  char* get(int slot, std::size_t bytes) {
    Buf& b = bufs_[slot];
    if (b.size < bytes) {
      b.p.reset();  // before the new one: at most one buffer of a slot at a time
      b.p.reset(new char[bytes]);
      b.size = bytes;
    }
    return b.p.get();
  }
  // After an operation.
  void trim() {
    std::size_t total = 0;
    for (const Buf& b : bufs_) total += b.size;
    if (total <= kKeepBytes) return;
    for (Buf& b : bufs_) {
      b.p.reset();
      b.size = 0;
    }
  }

 private:
  struct Buf {
    std::unique_ptr<char[]> p;
    std::size_t size = 0;
  };
  Buf bufs_[kSlots];
};

}  // namespace tutti::detail
