/* Start-up of a job under MPI: MPI_Init, a barrier and one 8-byte
   MPI_Allreduce, checked; the peer of startup.cc (bench/startup/run.sh). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>

int main(int argc, char** argv) {
  int rank = 0, size = 0;
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Barrier(MPI_COMM_WORLD);
  int64_t v = rank + 1, sum = 0;
  MPI_Allreduce(&v, &sum, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  const int64_t n = size;
  int bad = sum != n * (n + 1) / 2;
  if (bad)
    fprintf(stderr, "rank %d: MPI_Allreduce gave %lld, expected %lld\n", rank, (long long)sum,
            (long long)(n * (n + 1) / 2));
  else if (rank == 0)
    printf("startup ok: %lld ranks\n", (long long)n);
  MPI_Finalize();
  return bad;
}
