#include "shm/shared_buffers.h"

#include <algorithm>

namespace tutti::detail {

std::vector<std::size_t> SharedBuffers::part_offsets(const std::vector<std::uint64_t>& sizes, std::size_t* total) {
  constexpr std::size_t kPage = 4096;
  auto round_up = [](std::size_t v) { return (v + kPage - 1) / kPage * kPage; };
  std::vector<std::size_t> offsets(sizes.size());
  std::size_t at = round_up(SharedSegment::kHeaderBytes);
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    offsets[r] = at;
    at += round_up(std::max<std::size_t>(sizes[r], 1));
  }
  *total = at;
  return offsets;
}

char* SharedBuffers::add(std::unique_ptr<SharedSegment> seg, std::vector<std::uint64_t> bases, std::size_t part_offset,
                         std::uint64_t serial) {
  char* part = seg->base() + part_offset;
  live_.push_back({std::move(seg), std::move(bases), part, serial});
  ++made_;
  return part;
}

std::uint64_t SharedBuffers::serial_of(const void* p) const {
  for (const Allocation& a : live_)
    if (a.part == p) return a.serial;
  return 0;
}

void SharedBuffers::remove(std::uint64_t serial) {
  std::erase_if(live_, [&](const Allocation& a) { return a.serial == serial; });
}

bool SharedBuffers::contains(const void* p, std::size_t bytes) const {
  const auto lo = reinterpret_cast<std::uintptr_t>(p);
  for (const Allocation& a : live_) {
    const auto base = reinterpret_cast<std::uintptr_t>(a.seg->base());
    if (lo >= base && bytes <= a.seg->bytes() && lo - base <= a.seg->bytes() - bytes) return true;
  }
  return false;
}

char* SharedBuffers::view(int peer, std::uint64_t remote, std::size_t bytes) const {
  // The newest first: a member may map a new segment where it had one it freed.
  for (auto it = live_.rbegin(); it != live_.rend(); ++it) {
    const std::uint64_t base = it->bases[static_cast<std::size_t>(peer)];
    if (remote >= base && bytes <= it->seg->bytes() && remote - base <= it->seg->bytes() - bytes)
      return it->seg->base() + (remote - base);
  }
  return nullptr;
}

}  // namespace tutti::detail
