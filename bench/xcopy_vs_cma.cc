// Is single-copy reading between processes (process_vm_readv, "CMA") worth
// it on this machine? A reader copies a buffer that a writer process has
// just written, once from shared memory with memcpy and once straight from
// the writer's private memory with process_vm_readv; sizes 64 KiB - 64 MiB.
//   build/bin/tutti_xcopy_vs_cma
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>
int main() {
  const size_t maxb = 64 << 20;
  auto* ctl =
      static_cast<std::atomic<int>*>(mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  char* shared = static_cast<char*>(mmap(nullptr, maxb, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  char* priv = static_cast<char*>(malloc(maxb));  // writer's private buffer (same address in child after fork)
  memset(priv, 1, maxb);
  memset(shared, 1, maxb);
  ctl[0] = 0;
  ctl[1] = 0;
  pid_t writer = fork();
  if (writer == 0) {
    for (int it = 1;; ++it) {
      while (ctl[0].load() != 2 * it - 1) {
        if (ctl[0].load() < 0) _exit(0);
      }
      size_t b = ctl[2].load();
      memset(shared, it, b);
      memset(priv, it, b);
      ctl[0].store(2 * it);
    }
  }
  std::vector<char> local(maxb, 1);
  int it = 0;
  for (size_t b = 64 << 10; b <= maxb; b *= 4) {
    double t_shm = 0, t_cma = 0;
    int reps = 20;
    for (int r = 0; r < reps; ++r) {
      ++it;
      ctl[2].store(b);
      ctl[0].store(2 * it - 1);
      while (ctl[0].load() != 2 * it) {
      }
      auto t0 = std::chrono::steady_clock::now();
      memcpy(local.data(), shared, b);
      auto t1 = std::chrono::steady_clock::now();
      ++it;
      ctl[2].store(b);
      ctl[0].store(2 * it - 1);
      while (ctl[0].load() != 2 * it) {
      }
      iovec l{local.data(), b}, rm{priv, b};
      auto t2 = std::chrono::steady_clock::now();
      ssize_t n = process_vm_readv(writer, &l, 1, &rm, 1, 0);
      auto t3 = std::chrono::steady_clock::now();
      if (n != (ssize_t)b) {
        perror("pvr");
        return 1;
      }
      if (r) {
        t_shm += std::chrono::duration<double>(t1 - t0).count();
        t_cma += std::chrono::duration<double>(t3 - t2).count();
      }
    }
    printf("%9zu B  shm memcpy %6.2f GB/s  process_vm_readv %6.2f GB/s\n", b, b * (reps - 1) / t_shm / 1e9,
           b * (reps - 1) / t_cma / 1e9);
  }
  ctl[0].store(-1);
  waitpid(writer, nullptr, 0);
}
