#include "shm/shared_buffers.h"

#include <unistd.h>

#include <algorithm>

namespace tutti::detail {

std::vector<std::size_t> SharedBuffers::part_offsets(const std::vector<std::uint64_t>& sizes, std::size_t* total) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto round_up = [&](std::size_t v) { return (v + page - 1) / page * page; };
  std::vector<std::size_t> offsets(sizes.size());
  // After the segment's header, a byte a member (owned allocations' flags).
  std::size_t at = round_up(SharedSegment::kHeaderBytes + sizes.size());
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    offsets[r] = at;
    at += round_up(std::max<std::size_t>(sizes[r], 1));  // sizes[r] <= kMaxPartBytes: no overflow
  }
  *total = at;
  return offsets;
}

char* SharedBuffers::add(std::unique_ptr<SharedSegment> seg, std::vector<std::uint64_t> bases,
                         std::vector<std::size_t> offsets, std::vector<std::uint64_t> sizes, int me,
                         std::uint64_t serial) {
  me_ = me;
  char* part = seg->base() + offsets[static_cast<std::size_t>(me)];
  live_.push_back({std::move(seg), std::move(bases), std::move(offsets), std::move(sizes), part, serial});
  ++made_;
  return part;
}

std::shared_ptr<void> SharedBuffers::add_owned(std::unique_ptr<SharedSegment> seg, std::vector<std::uint64_t> bases,
                                               std::vector<std::size_t> offsets, std::vector<std::uint64_t> sizes,
                                               int me, std::uint64_t serial) {
  char* part = add(std::move(seg), std::move(bases), std::move(offsets), std::move(sizes), me, serial);
  Allocation& a = live_.back();
  a.owned = true;
  ++owned_made_;
  // The handle keeps the segment mapped; dropping it sets this member's flag.
  return std::shared_ptr<void>(part,
                               [seg = a.seg, me](void*) { let_go(*seg, me)->store(1, std::memory_order_release); });
}

void SharedBuffers::collect() {
  std::erase_if(live_, [&](const Allocation& a) {
    if (!a.owned) return false;
    for (int r = 0; r < static_cast<int>(a.sizes.size()); ++r)
      if (!let_go(*a.seg, r)->load(std::memory_order_acquire)) return false;
    return true;
  });
}

std::uint64_t SharedBuffers::serial_of(const void* p) const {
  for (const Allocation& a : live_)
    if (a.part == p && !a.owned) return a.serial;
  return 0;
}

void SharedBuffers::remove(std::uint64_t serial) {
  std::erase_if(live_, [&](const Allocation& a) { return a.serial == serial; });
}

bool SharedBuffers::contains(const void* p, std::size_t bytes) const {
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  const auto me = static_cast<std::size_t>(me_);
  for (const Allocation& a : live_)
    if (within(at, bytes, reinterpret_cast<std::uintptr_t>(a.part), a.sizes[me]) &&
        !(a.owned && let_go(*a.seg, me_)->load(std::memory_order_relaxed)))
      return true;
  return false;
}

char* SharedBuffers::view(int peer, std::uint64_t remote, std::size_t bytes) const {
  const auto p = static_cast<std::size_t>(peer);
  // The newest first: a member may map a new segment where it had one it freed.
  for (auto it = live_.rbegin(); it != live_.rend(); ++it) {
    const std::uint64_t lo = it->bases[p] + it->offsets[p];
    if (within(remote, bytes, lo, it->sizes[p])) return it->seg->base() + it->offsets[p] + (remote - lo);
  }
  return nullptr;
}

}  // namespace tutti::detail
