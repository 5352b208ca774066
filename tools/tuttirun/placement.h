// Where tuttirun places the ranks of one node: each rank gets an even share
// of the CPUs tuttirun itself may run on (its affinity mask, which a batch
// system or taskset may have narrowed).
#pragma once

#include <vector>

namespace tuttirun {

// The CPUs this process may run on, in increasing order (empty if unknown).
std::vector<int> allowed_cpus();

// The CPUs of local rank `local` of `local_size` over `allowed`: with at
// least as many CPUs as ranks, a contiguous block of about
// allowed.size() / local_size of them (the first allowed.size() % local_size
// ranks get one more), so threads of a rank stay together and ranks never
// share a CPU; with fewer, the one CPU allowed[local % allowed.size()]
// (round robin), so that ranks sharing a CPU always share it with the same
// peers instead of being moved around. Empty `allowed`: empty.
std::vector<int> rank_cpus(const std::vector<int>& allowed, int local, int local_size);

}  // namespace tuttirun
