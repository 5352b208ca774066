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
// Allocations are collective, in the same order on every member. An
// allocation is freed either collectively (free_shared: every member
// removes it at once) or, where it was made *owned*
// (Communicator::alloc_shared_owned), by each member on its own: the member's
// handle going away sets its flag in the segment, and a member keeps its
// mapping (peers' buffers may still lie in it) until every member's flag is
// set (collect). The handle keeps the memory mapped as long as it lives,
// also after the group is gone.

#include <atomic>
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
  // The same for an owned allocation: the handle to this member's part
  // (safe to drop from any thread).
  std::shared_ptr<void> add_owned(std::unique_ptr<SharedSegment> seg, std::vector<std::uint64_t> bases,
                                  std::vector<std::size_t> offsets, std::vector<std::uint64_t> sizes, int me,
                                  std::uint64_t serial);
  // Forgets the owned allocations every member has let go of (called by
  // the group's operations, never concurrently with the others here).
  void collect();
  // The allocation (not owned) whose part for this member begins at `p`:
  // its serial, or 0 when there is none.
  std::uint64_t serial_of(const void* p) const;
  // Unmaps that allocation.
  void remove(std::uint64_t serial);

  // Whether [p, p + bytes) lies within this member's part of one allocation
  // it has not let go of.
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
  // No allocation lives, and none was ever owned: the same on every member
  // (allocations and collective frees are agreed; owned ones are let go of
  // at each member's own time, so once one was made this stays false).
  bool empty() const { return live_.empty() && !owned_made_; }

 private:
  struct Allocation {
    std::shared_ptr<SharedSegment> seg;
    std::vector<std::uint64_t> bases;  // each member's address of the segment
    std::vector<std::size_t> offsets;  // each member's part: where in the segment
    std::vector<std::uint64_t> sizes;  // and how long
    char* part;                        // this member's part
    std::uint64_t serial;
    bool owned = false;
  };
  // Member r's flag in an owned allocation's segment: set once r let go of its part.
  static std::atomic<std::uint8_t>* let_go(const SharedSegment& seg, int r) {
    return reinterpret_cast<std::atomic<std::uint8_t>*>(seg.base() + SharedSegment::kHeaderBytes + r);
  }
  // Whether [at, at + bytes) lies within [lo, lo + len).
  static bool within(std::uint64_t at, std::size_t bytes, std::uint64_t lo, std::uint64_t len) {
    return at >= lo && bytes <= len && at - lo <= len - bytes;
  }
  int me_ = 0;
  std::vector<Allocation> live_;
  std::uint64_t made_ = 0;
  std::uint64_t owned_made_ = 0;
};

}  // namespace tutti::detail
