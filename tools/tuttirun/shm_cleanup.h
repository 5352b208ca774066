#pragma once
// Shared-memory segments of a job whose ranks were killed before every member
// had mapped them would stay in /dev/shm. tuttirun gives its ranks a segment
// name prefix of its own (TUTTI_SHM_PREFIX) and removes whatever is left
// under it when the job ends.

#include <string>

namespace tuttirun {

// "tutti-run<pid>": unique on this host while this tuttirun lives.
std::string job_shm_prefix();
// Removes /dev/shm/<prefix>-*; returns how many it removed.
int remove_job_segments(const std::string& prefix);

}  // namespace tuttirun
