#include "placement.h"

#include <sched.h>

#include <cstddef>

namespace tuttirun {

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

std::vector<int> rank_cpus(const std::vector<int>& allowed, int local, int local_size) {
  const std::size_t m = allowed.size();
  if (m == 0 || local_size <= 0 || local < 0) return {};
  const auto n = static_cast<std::size_t>(local_size), i = static_cast<std::size_t>(local) % n;
  if (m < n) return {allowed[i % m]};
  const std::size_t base = m / n, extra = m % n;
  const std::size_t lo = i * base + (i < extra ? i : extra);
  const std::size_t count = base + (i < extra ? 1 : 0);
  return std::vector<int>(allowed.begin() + static_cast<std::ptrdiff_t>(lo),
                          allowed.begin() + static_cast<std::ptrdiff_t>(lo + count));
}

}  // namespace tuttirun
