// Under ThreadSanitizer only: operator new keeps freed blocks of 128 KiB and
// more for the next request of their size class.
//
// The runtime's allocator hands such blocks back to the kernel on delete and
// drops their shadow, so the next test buffer of that size faults in its
// pages and twice as many shadow pages again: in the multi-rank tests, whose
// ranks build every member's input for the reference (tests/common), page
// faults were half of the stage's time. (mallopt, which does this for the
// plain build in tests/harness/spawn.cc, does not reach the runtime's
// allocator.)
//
// What the race checks keep: blocks come from malloc, which the runtime
// sees; a block passes from one owner to the next through the free list's
// mutex, as through free and malloc, so the last owner's accesses happen
// before the next owner's; an access to a block after its delete, from a
// thread that did not synchronize with the next owner, still races with the
// next owner's first write and is reported. Use after free as such is the
// AddressSanitizer stage's check, which keeps its own allocator.
#if defined(__SANITIZE_THREAD__)

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <new>

namespace {

constexpr std::size_t kHeader = 64;  // holds the size class; keeps new's alignment
constexpr std::size_t kSmallest = std::size_t{128} << 10;
constexpr int kClasses = 10;                              // 128 KiB to 64 MiB, doubling
constexpr int kPerClass = 16;                             // blocks kept per class
constexpr std::size_t kKeptMax = std::size_t{128} << 20;  // bytes kept per process
constexpr long kUncached = -1;

struct Heap {
  std::mutex mu;
  char* blocks[kClasses][kPerClass];
  int count[kClasses];
  std::size_t kept;
};
// Constant-initialized; its destructor does nothing (std::mutex's is
// trivial in effect), so a delete run after static destructors still works.
Heap heap;

std::size_t class_bytes(long c) { return kSmallest << c; }

void* allocate(std::size_t n) noexcept {
  if (n > SIZE_MAX - kHeader) return nullptr;
  const std::size_t total = n + kHeader;
  long c = kUncached;
  if (total >= kSmallest) {
    for (long k = 0; k < kClasses; ++k)
      if (class_bytes(k) >= total) {
        c = k;
        break;
      }
  }
  char* base = nullptr;
  if (c != kUncached) {
    std::lock_guard<std::mutex> lock(heap.mu);
    if (heap.count[c] > 0) {
      base = heap.blocks[c][--heap.count[c]];
      heap.kept -= class_bytes(c);
    }
  }
  if (base == nullptr) base = static_cast<char*>(std::malloc(c != kUncached ? class_bytes(c) : total));
  if (base == nullptr) return nullptr;
  *reinterpret_cast<long*>(base) = c;
  return base + kHeader;
}

void release(void* p) noexcept {
  if (p == nullptr) return;
  char* base = static_cast<char*>(p) - kHeader;
  const long c = *reinterpret_cast<long*>(base);
  if (c != kUncached) {
    std::lock_guard<std::mutex> lock(heap.mu);
    if (heap.count[c] < kPerClass && heap.kept + class_bytes(c) <= kKeptMax) {
      heap.blocks[c][heap.count[c]++] = base;
      heap.kept += class_bytes(c);
      return;
    }
  }
  std::free(base);
}

void* allocate_or_throw(std::size_t n) {
  void* p = allocate(n);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}

}  // namespace

void* operator new(std::size_t n) { return allocate_or_throw(n); }
void* operator new[](std::size_t n) { return allocate_or_throw(n); }
void* operator new(std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](std::size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void operator delete(void* p) noexcept { release(p); }
void operator delete[](void* p) noexcept { release(p); }
void operator delete(void* p, std::size_t) noexcept { release(p); }
void operator delete[](void* p, std::size_t) noexcept { release(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { release(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { release(p); }

#endif
