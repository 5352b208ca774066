#pragma once
// A shared-memory segment that a fixed set of processes on one host map
// together: member 0 creates it, the others wait for it, and the last member
// to map it removes its name, so nothing stays in /dev/shm once every member
// has it, even if members are killed afterwards.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/completion.h"

namespace tutti::detail {

class SharedSegment {
 public:
  // Collective over `size` members. The first kHeaderBytes bytes belong to
  // the segment itself; `layout` (a hash of whatever determines the layout)
  // must be the same on every member, else Mismatch. Timeout at `deadline`
  // when member 0 never creates it.
  static constexpr std::size_t kHeaderBytes = 1024;
  // A waiting member also gives up (Aborted) once *abort_flag is set.
  // `reserve`: member 0 allocates every page at creation (posix_fallocate),
  // so a /dev/shm too small for it fails here, not with SIGBUS at a first
  // touch later.
  // `creator_pid`: member 0's process (0: unknown); a member waiting for it
  // fails with PeerLost naming `creator` once that process is gone.
  SharedSegment(const std::string& name, int rank, int size, std::size_t bytes, std::uint64_t layout,
                TimePoint deadline, const std::atomic<bool>* abort_flag = nullptr, bool reserve = false,
                int creator_pid = 0, const std::string& creator = "rank 0");
  ~SharedSegment();
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;

  char* base() const { return base_; }
  // A word and a message every member can see, for failures that must
  // reach every member (ShmGroup::broadcast_failure).
  struct Failure {
    std::atomic<std::uint32_t> by;  // failing rank + 1, or 0
    std::uint32_t kind;
    char message[960];  // room for a message naming two operations
  };
  Failure* failure() const;
  std::size_t bytes() const { return bytes_; }
  // The group failed: on destruction, remove the name if some member never
  // mapped it (it may never come).
  void abandon() { abandoned_ = true; }
  // Removes the names of segments under `name_prefix` (a name as given
  // above, without the part that tells segments apart) whose creator's
  // process is gone and that some member never mapped: a creator killed
  // after it made a segment that the others then never came to (a group
  // that failed first) leaves nothing else to take the name away. Survivors
  // of a failure call it (Communicator::shrink). Returns how many it removed.
  static int remove_orphans(const std::string& name_prefix);

 private:
  std::string name_;
  int size_;
  std::size_t bytes_;
  char* base_ = nullptr;
  bool abandoned_ = false;
};

}  // namespace tutti::detail
