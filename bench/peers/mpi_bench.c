/* mpi_bench: tutti-bench's loop against MPI. One source, built twice by
 * build.sh: with mpicc.openmpi (build/peers/mpi_bench_openmpi) and with
 * mpicc.mpich (build/peers/mpi_bench_mpich).
 *
 *   mpirun.openmpi -np N build/peers/mpi_bench_openmpi COLL [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARMUP]
 *                  [-c 0|1] [-d float32] [-o sum|product|min|max] [-r ROOT] [--json FILE]
 *   mpiexec.mpich -launcher fork -np N build/peers/mpi_bench_mpich COLL ...
 *
 * Sizes, timing, bus-bandwidth factors, check and output: peer_common.h
 * (the rules of tools/tutti-bench). The collectives map to MPI_Allreduce,
 * MPI_Bcast, MPI_Reduce, MPI_Allgather, MPI_Gather, MPI_Scatter,
 * MPI_Reduce_scatter_block, MPI_Alltoall, MPI_Barrier, and MPI_Isend +
 * MPI_Irecv (to rank+1, from rank-1) for sendrecv; all out of place on
 * MPI_FLOAT.
 * Exit status: 0 all rows correct, 1 wrong elements, 2 bad options.
 */
#include <mpi.h>

#include "peer_common.h"

static MPI_Op mpi_op(int op) {
  switch (op) {
    case PB_PRODUCT:
      return MPI_PROD;
    case PB_MIN:
      return MPI_MIN;
    case PB_MAX:
      return MPI_MAX;
    default:
      return MPI_SUM;
  }
}

static void run_op(const struct pb_options* opt, const struct pb_shape* s, struct pb_bufs* bu, int rank, int n) {
  const int count = (int)s->count, block = (int)s->block;
  switch (opt->coll) {
    case PB_ALL_REDUCE:
      MPI_Allreduce(bu->send, bu->recv, count, MPI_FLOAT, mpi_op(opt->op), MPI_COMM_WORLD);
      break;
    case PB_BROADCAST:
      MPI_Bcast(bu->recv, count, MPI_FLOAT, opt->root, MPI_COMM_WORLD);
      break;
    case PB_REDUCE:
      MPI_Reduce(bu->send, bu->recv, count, MPI_FLOAT, mpi_op(opt->op), opt->root, MPI_COMM_WORLD);
      break;
    case PB_ALL_GATHER:
      MPI_Allgather(bu->send, block, MPI_FLOAT, bu->recv, block, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case PB_GATHER:
      MPI_Gather(bu->send, block, MPI_FLOAT, bu->recv, block, MPI_FLOAT, opt->root, MPI_COMM_WORLD);
      break;
    case PB_SCATTER:
      MPI_Scatter(bu->send, block, MPI_FLOAT, bu->recv, block, MPI_FLOAT, opt->root, MPI_COMM_WORLD);
      break;
    case PB_REDUCE_SCATTER:
      MPI_Reduce_scatter_block(bu->send, bu->recv, block, MPI_FLOAT, mpi_op(opt->op), MPI_COMM_WORLD);
      break;
    case PB_ALL_TO_ALL:
      MPI_Alltoall(bu->send, block, MPI_FLOAT, bu->recv, block, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case PB_BARRIER:
      MPI_Barrier(MPI_COMM_WORLD);
      break;
    case PB_SENDRECV: {
      MPI_Request req[2];
      MPI_Status st[2];
      MPI_Isend(bu->send, count, MPI_FLOAT, (rank + 1) % n, 0, MPI_COMM_WORLD, &req[0]);
      MPI_Irecv(bu->recv, count, MPI_FLOAT, (rank - 1 + n) % n, 0, MPI_COMM_WORLD, &req[1]);
      MPI_Waitall(2, req, st);
      break;
    }
    default:
      break;
  }
}

static int usage_exit(int rank, const char* prog) {
  if (rank == 0) {
    if (pb_help) {
      pb_print_usage(prog, "");
    } else {
      fprintf(stderr, "%s: error: %s\n", prog, pb_usage_error);
    }
  }
  MPI_Finalize();
  return pb_help ? 0 : PB_EXIT_USAGE;
}

int main(int argc, char** argv) {
  struct pb_options opt;
  struct pb_bufs bu;
  size_t sizes[64];
  int rank, n, nsizes, k, rows = 0, json_failed = 0;
  uint64_t total_wrong = 0;
  double busbw_sum = 0;
  FILE* json = NULL;
  char system[MPI_MAX_LIBRARY_VERSION_STRING + 32];
  char libver[MPI_MAX_LIBRARY_VERSION_STRING];
  int libver_len = 0;

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  if (pb_parse_options(argc, argv, &opt, NULL) != 0) return usage_exit(rank, "mpi_bench");
  if (pb_colls[opt.coll].rooted && opt.root >= n) {
    pb_set_error("-r: root %d is not a rank of a world of %d", opt.root, n);
    return usage_exit(rank, "mpi_bench");
  }
  if (opt.coll == PB_SENDRECV && n < 2) {
    pb_set_error("sendrecv needs at least 2 ranks");
    return usage_exit(rank, "mpi_bench");
  }
  if (rank == 0 && opt.json_path != NULL) {
    json = fopen(opt.json_path, "w");
    if (json == NULL) {
      fprintf(stderr, "mpi_bench: error: cannot open --json file '%s' for writing\n", opt.json_path);
      json_failed = 1;
    }
  }
  MPI_Allreduce(MPI_IN_PLACE, &json_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (json_failed) {
    MPI_Finalize();
    return PB_EXIT_USAGE;
  }

  MPI_Get_library_version(libver, &libver_len);
  for (k = 0; libver[k] != '\0'; ++k)
    if (libver[k] == '\t')
      libver[k] = ' ';
    else if (libver[k] == '\n' || libver[k] == ',') {
      libver[k] = '\0';
      break;
    }
  snprintf(system, sizeof system, "mpi_bench (%s)", libver);
  if (rank == 0) pb_print_header(system, &opt, n);

  memset(&bu, 0, sizeof bu);
  nsizes = pb_sweep(&opt, sizes);
  for (k = 0; k < nsizes; ++k) {
    struct pb_shape s;
    struct pb_row row;
    double t0, t1, time_us;
    uint64_t wrong = 0;
    int i;
    if (!pb_make_shape(opt.coll, sizes[k], n, &s)) continue;
    pb_layout(&bu, opt.coll, &s, rank, opt.root);
    pb_fill(&bu, &opt, &s, rank, 0);
    for (i = 0; i < opt.warmup; ++i) run_op(&opt, &s, &bu, rank, n);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = pb_now_us();
    for (i = 0; i < opt.iters; ++i) run_op(&opt, &s, &bu, rank, n);
    t1 = pb_now_us();
    time_us = (t1 - t0) / opt.iters;
    MPI_Allreduce(MPI_IN_PLACE, &time_us, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

    if (opt.check) {
      const uint64_t iter = 1 + (uint64_t)opt.warmup + (uint64_t)opt.iters;
      char first[256];
      pb_fill(&bu, &opt, &s, rank, iter);
      run_op(&opt, &s, &bu, rank, n);
      wrong = pb_check(&bu, &opt, &s, rank, n, iter, first, sizeof first);
      if (wrong > 0) {
        fprintf(stderr, "mpi_bench: rank %d: %s of %zu bytes: %llu wrong elements; first: %s\n", rank,
                pb_colls[opt.coll].name, s.bytes, (unsigned long long)wrong, first);
        fflush(stderr);
      }
      MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    }
    total_wrong += wrong;

    row.bytes = s.bytes;
    row.count = s.count;
    row.time_us = time_us;
    row.wrong = wrong;
    pb_finish_row(&row, opt.coll, n);
    busbw_sum += row.busbw;
    ++rows;
    if (rank == 0) {
      pb_print_row(&opt, &row);
      pb_write_json(json, &opt, n, &row);
    }
  }
  if (rank == 0) {
    pb_print_footer(&opt, total_wrong, busbw_sum, rows);
    if (json != NULL && fclose(json) != 0) {
      fprintf(stderr, "mpi_bench: error: writing '%s' failed\n", opt.json_path);
      total_wrong += 1;
    }
  }
  pb_free_bufs(&bu);
  MPI_Barrier(MPI_COMM_WORLD);
  MPI_Finalize();
  return total_wrong > 0 ? PB_EXIT_WRONG : 0;
}
