// Start-up of a job: init, a barrier and one 8-byte all_reduce, checked.
// bench/startup/run.sh times it from the launcher's start to its end, beside
// the same program written against MPI (startup_mpi.c).
#include <tutti/tutti.h>

#include <cstdint>
#include <cstdio>

int main() {
  try {
    tutti::Communicator c = tutti::init();
    c.barrier();
    std::int64_t v = c.rank() + 1;
    c.all_reduce(&v, &v, 1, tutti::DataType::Int64, tutti::ReduceOp::SUM);
    const std::int64_t n = c.size();
    if (v != n * (n + 1) / 2) {
      std::fprintf(stderr, "rank %d: all_reduce gave %lld, expected %lld\n", c.rank(), static_cast<long long>(v),
                   static_cast<long long>(n * (n + 1) / 2));
      return 1;
    }
    if (c.rank() == 0) {
      std::printf("startup ok: %lld ranks\n", static_cast<long long>(n));
      std::fflush(stdout);
    }
    return 0;
  } catch (const tutti::Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}
