#pragma once
// Memory that the members of a shared-memory group can all address
// (Communicator::alloc_shared): one segment per allocation holding every
// member's part, mapped by every member, so that a collective whose buffers
// lie in it on every member reads its peers' inputs and writes their
// outputs with plain loads and stores (algorithms/shm_collectives.cc,
// "direct").
//
// Each member maps a segment at an address of its own; a member's address
// A of an allocation is this member's base + (A - that member's base).
// Allocations and frees are collective, in the same order on every member,
// so every member holds the same allocations.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "shm/segment.h"

namespace tutti::detail {

class SharedBuffers {
 public:
  // The most one member may ask for.
  static constexpr std::uint64_t kMaxPartBytes = std::uint64_t{1} << 44;
  // Where member r's part of an allocation of parts `sizes` (each at most
  // kMaxPartBytes) begins in the segment (whole pages, after the segment's
  // header), and the segment's size.
  static std::vector<std::size_t> part_offsets(const std::vector<std::uint64_t>& sizes, std::size_t* total);

  // An allocation every member has mapped: `bases` holds every member's
  // address of the segment, `offsets` and `sizes` every member's part.
  // Returns this member's part.
  char* add(std::unique_ptr<SharedSegment> seg, std::vector<std::uint64_t> bases, std::vector<std::size_t> offsets,
            std::vector<std::uint64_t> sizes, int me, std::uint64_t serial);
  // The allocation whose part for this member begins at `p`: its serial, or
  // 0 when there is none.
  std::uint64_t serial_of(const void* p) const;
  // Unmaps that allocation.
  void remove(std::uint64_t serial);

  // Whether [p, p + bytes) lies within this member's part of one allocation.
  bool contains(const void* p, std::size_t bytes) const;
  // This member's address of [remote, remote + bytes) in member `peer`'s
  // address space, or nullptr when that is not within peer's part of one
  // allocation.
  char* view(int peer, std::uint64_t remote, std::size_t bytes) const;

  // The group failed: remove the names of segments some member never mapped.
  void abandon() {
    for (Allocation& a : live_) a.seg->abandon();
  }

  // Allocations ever made (the same on every member: they are collective).
  std::uint64_t made() const { return made_; }
  // Allocations not freed yet (the same on every member after each
  // operation: frees are collective and agreed).
  bool empty() const { return live_.empty(); }

 private:
  struct Allocation {
    std::unique_ptr<SharedSegment> seg;
    std::vector<std::uint64_t> bases;  // each member's address of the segment
    std::vector<std::size_t> offsets;  // each member's part: where in the segment
    std::vector<std::uint64_t> sizes;  // and how long
    char* part;                        // this member's part
    std::uint64_t serial;
  };
  // Whether [at, at + bytes) lies within [lo, lo + len).
  static bool within(std::uint64_t at, std::size_t bytes, std::uint64_t lo, std::uint64_t len) {
    return at >= lo && bytes <= len && at - lo <= len - bytes;
  }
  int me_ = 0;
  std::vector<Allocation> live_;
  std::uint64_t made_ = 0;
};

}  // namespace tutti::detail
