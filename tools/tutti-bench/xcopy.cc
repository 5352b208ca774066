#include "xcopy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace tutti_bench {

double cross_process_copy_gbps(tutti::Communicator& comm, std::size_t bytes, int iters) {
  if (comm.size() < 2 || bytes == 0) return 0;
  const int r = comm.rank();
  // Rank 0 names the segment; rank 1 learns the name by broadcast.
  char name[64] = {0};
  if (r == 0) std::snprintf(name, sizeof name, "/tutti-bench-xcopy-%d-%zu", static_cast<int>(getpid()), bytes);
  comm.broadcast(name, sizeof name, tutti::DataType::UInt8, 0);
  char* shared = nullptr;
  if (r == 0) {
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(bytes)) != 0) throw std::runtime_error("xcopy: shm_open failed");
    shared = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  comm.barrier();
  if (r == 1) {
    int fd = shm_open(name, O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("xcopy: shm_open failed");
    shared = static_cast<char*>(mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    close(fd);
  }
  comm.barrier();
  if (r == 0) shm_unlink(name);
  std::vector<char> local(r == 1 ? bytes : 0, 1);  // touched: no page faults in the timing
  double total_us = 0;
  for (int i = 0; i < iters + 1; ++i) {
    if (r == 0) std::memset(shared, 0x5a ^ i, bytes);  // dirty in the writer's cache
    comm.barrier();
    if (r == 1) {
      const auto t0 = std::chrono::steady_clock::now();
      std::memcpy(local.data(), shared, bytes);
      const auto t1 = std::chrono::steady_clock::now();
      if (i > 0) total_us += std::chrono::duration<double, std::micro>(t1 - t0).count();  // first: warm-up
      if (local[bytes - 1] != static_cast<char>(0x5a ^ i)) throw std::runtime_error("xcopy: stale data");
    }
    comm.barrier();
  }
  if (shared) munmap(shared, bytes);
  double gbps = r == 1 && total_us > 0 ? static_cast<double>(bytes) * iters / (total_us * 1e3) : 0;
  comm.all_reduce(&gbps, &gbps, 1, tutti::DataType::Float64, tutti::ReduceOpKind::Max);
  return gbps;
}

}  // namespace tutti_bench
