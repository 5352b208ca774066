#include "shm_cleanup.h"

#include <dirent.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

namespace tuttirun {

std::string job_shm_prefix() { return "tutti-run" + std::to_string(::getpid()); }

int remove_job_segments(const std::string& prefix) {
  const std::string head = prefix + "-";
  int removed = 0;
  DIR* d = ::opendir("/dev/shm");
  if (!d) return 0;
  while (dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, head.c_str(), head.size()) != 0) continue;
    if (::shm_unlink(std::string("/").append(e->d_name).c_str()) == 0) ++removed;
  }
  ::closedir(d);
  return removed;
}

}  // namespace tuttirun
