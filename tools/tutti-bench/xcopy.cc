#include "xcopy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace tutti_bench {

CrossCopy cross_process_copy(tutti::Communicator& comm, std::size_t bytes, int iters) {
  if (comm.size() < 2 || bytes == 0) return {};
  const int r = comm.rank();
  const bool pair = r < 2;
  // Rank 0 names the segment (a buffer per rank of the pair); rank 1 learns
  // the name by broadcast.
  char name[64] = {0};
  if (r == 0) std::snprintf(name, sizeof name, "/tutti-bench-xcopy-%d-%zu", static_cast<int>(getpid()), bytes);
  comm.broadcast(name, sizeof name, tutti::DataType::UInt8, 0);
  char* shared = nullptr;
  auto map = [&](int flags) {
    int fd = shm_open(name, flags, 0600);
    if (fd < 0 || ((flags & O_CREAT) && ftruncate(fd, static_cast<off_t>(2 * bytes)) != 0)) {
      if (fd >= 0) close(fd);
      throw std::runtime_error("xcopy: shm_open failed");
    }
    void* p = mmap(nullptr, 2 * bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) throw std::runtime_error("xcopy: mmap failed");
    shared = static_cast<char*>(p);
  };
  if (r == 0) map(O_CREAT | O_EXCL | O_RDWR);
  comm.barrier();
  if (r == 1) map(O_RDWR);
  comm.barrier();
  if (r == 0) shm_unlink(name);
  char* const mine = pair ? shared + static_cast<std::size_t>(r) * bytes : nullptr;
  const char* const theirs = pair ? shared + static_cast<std::size_t>(1 - r) * bytes : nullptr;
  std::vector<char> local(pair ? bytes : 0, 1);  // touched: no page faults in the timing
  // One round: the writers fill their buffers (dirty in their caches), then
  // the readers copy the other's; the first round of each kind is a warm-up.
  auto round = [&](int i, bool writes, bool reads) -> double {
    const char stamp = static_cast<char>(0x5a ^ i ^ r);
    if (writes) std::memset(mine, stamp, bytes);
    comm.barrier();
    double us = 0;
    if (reads) {
      const auto t0 = std::chrono::steady_clock::now();
      std::memcpy(local.data(), theirs, bytes);
      const auto t1 = std::chrono::steady_clock::now();
      us = std::chrono::duration<double, std::micro>(t1 - t0).count();
      if (local[bytes - 1] != static_cast<char>(0x5a ^ i ^ (1 - r))) throw std::runtime_error("xcopy: stale data");
    }
    comm.barrier();
    return us;
  };
  double copy_us = 0, exchange_us = 0;
  for (int i = 0; i < iters + 1; ++i) {
    const double us = round(i, r == 0, r == 1);
    if (i > 0) copy_us += us;
  }
  for (int i = 0; i < iters + 1; ++i) {
    const double us = round(i, pair, pair);
    if (i > 0) exchange_us += us;
  }
  if (shared) munmap(shared, 2 * bytes);
  auto gbps = [&](double us) { return us > 0 ? static_cast<double>(bytes) * iters / (us * 1e3) : 0.0; };
  // The reader's copy rate; the slower rank's exchange rate (the minimum
  // over ranks of the pair; the others report a large number).
  double figures[2] = {r == 1 ? gbps(copy_us) : 0.0, pair ? gbps(exchange_us) : 1e300};
  comm.all_reduce(&figures[0], &figures[0], 1, tutti::DataType::Float64, tutti::ReduceOpKind::Max);
  comm.all_reduce(&figures[1], &figures[1], 1, tutti::DataType::Float64, tutti::ReduceOpKind::Min);
  return {figures[0], figures[1]};
}

}  // namespace tutti_bench
