/* peer_common.h: what mpi_bench.c and gloo_bench.cc share with tutti-bench
 * (tools/tutti-bench): options, the sweep of message sizes, the shape of a
 * row, the buffers of each collective, input data, the correctness check,
 * bus-bandwidth factors, and the table and JSON-lines output.
 *
 * Written in the common subset of C11 and C++ (static functions, explicit
 * casts) so that one header serves the C MPI benchmark and the C++ Gloo one.
 *
 * Rules copied from tutti-bench:
 *  - sizes: MIN, MIN*F, ... while <= MAX; "blocked" collectives (all_gather,
 *    gather, scatter, reduce_scatter, all_to_all) round the size down to a
 *    multiple of n * 4 bytes (n equal blocks), the others to 4 bytes; a row
 *    that rounds to 0 elements is skipped; barrier has one row of 0 bytes;
 *  - timing: fill inputs, WARMUP iterations, a barrier, ITERS iterations back
 *    to back; time = elapsed / ITERS on each rank, reported = max over ranks;
 *  - algbw = bytes / time, busbw = algbw * factor (nccl-tests);
 *  - check (-c 1): one more iteration after the timed ones, on fresh inputs
 *    (iteration number 1 + WARMUP + ITERS), outputs poisoned first, every
 *    output element compared: copies bit-exactly, sums and products within
 *    (n + 1) * eps * magnitude + n * denorm_min (tests/common/reference.h),
 *    min/max exactly; #wrong is summed over ranks.
 * Inputs: float32 in [-4, 4] (never 0; [0.5, 1.5] for product), a function
 * of (rank, iteration, bytes, element index), so every rank can regenerate
 * any other rank's input for the check.
 */
#ifndef TUTTI_PEER_COMMON_H
#define TUTTI_PEER_COMMON_H

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum pb_coll {
  PB_ALL_REDUCE,
  PB_BROADCAST,
  PB_REDUCE,
  PB_ALL_GATHER,
  PB_GATHER,
  PB_SCATTER,
  PB_REDUCE_SCATTER,
  PB_ALL_TO_ALL,
  PB_BARRIER,
  PB_SENDRECV,
  PB_NUM_COLLS
};

struct pb_coll_info {
  const char* name;
  int reduces, rooted, blocked;
};

static const struct pb_coll_info pb_colls[PB_NUM_COLLS] = {
    /* name             reduces rooted blocked */
    {"all_reduce", 1, 0, 0}, {"broadcast", 0, 1, 0}, {"reduce", 1, 1, 0},         {"all_gather", 0, 0, 1},
    {"gather", 0, 1, 1},     {"scatter", 0, 1, 1},   {"reduce_scatter", 1, 0, 1}, {"all_to_all", 0, 0, 1},
    {"barrier", 0, 0, 0},    {"sendrecv", 0, 0, 0},
};

enum pb_op { PB_SUM, PB_PRODUCT, PB_MIN, PB_MAX, PB_NUM_OPS };
static const char* const pb_op_names[PB_NUM_OPS] = {"sum", "product", "min", "max"};

enum { PB_EXIT_WRONG = 1, PB_EXIT_USAGE = 2 };

struct pb_options {
  int coll;
  size_t min_bytes, max_bytes;
  int factor, iters, warmup, check;
  int op;
  int root;
  const char* json_path;
};

/* ---- small helpers ------------------------------------------------------- */

/* Rank before the library is up: what the launcher set, else 0. */
static inline int pb_env_rank(void) {
  const char* names[] = {"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    const char* v = getenv(names[i]);
    if (v != NULL && *v != '\0') return atoi(v);
  }
  return 0;
}

static double pb_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec * 1e-3;
}

static uint64_t pb_mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* "64M" -> 67108864 (K, M, G: powers of 1024). 0 on success, -1 if bad. */
static int pb_parse_size(const char* text, size_t* out) {
  unsigned long long v = 0;
  size_t i = 0;
  int shift = 0;
  while (text[i] >= '0' && text[i] <= '9') {
    unsigned d = (unsigned)(text[i] - '0');
    if (v > (~0ull - d) / 10) return -1;
    v = v * 10 + d;
    ++i;
  }
  if (i == 0) return -1;
  switch (text[i]) {
    case '\0':
      break;
    case 'k':
    case 'K':
      shift = 10;
      ++i;
      break;
    case 'm':
    case 'M':
      shift = 20;
      ++i;
      break;
    case 'g':
    case 'G':
      shift = 30;
      ++i;
      break;
    default:
      return -1;
  }
  if (text[i] != '\0') return -1;
  if (v > (~0ull >> shift) || (v << shift) > (1ull << 50)) return -1;
  *out = (size_t)(v << shift);
  return 0;
}

static int pb_parse_int(const char* text, int lo, int hi, int* out) {
  char* end = NULL;
  long v;
  errno = 0;
  v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return -1;
  *out = (int)v;
  return 0;
}

/* ---- options ---------------------------------------------------------------- */

/* Set by pb_parse_options on a usage error (the caller reports it on rank 0
 * and exits with PB_EXIT_USAGE), or when --help was asked (pb_help). */
static char pb_usage_error[512];
static int pb_help;

static void pb_set_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pb_usage_error, sizeof pb_usage_error, fmt, ap);
  va_end(ap);
}

static void pb_print_usage(const char* prog, const char* extra) {
  printf(
      "Usage: %s COLL [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1]\n"
      "       [-d float32] [-o sum|product|min|max] [-r ROOT] [--json FILE]%s\n"
      "COLL: all_reduce broadcast reduce all_gather gather scatter reduce_scatter all_to_all barrier "
      "sendrecv\n",
      prog, extra != NULL ? extra : "");
}

/* `extra(flag, value)` may claim options of the caller: it returns 1 when it
 * took `flag` with `value`, 0 when `flag` is not its own. Returns 0 on
 * success, -1 on a usage error (pb_usage_error says which) or --help. */
static int pb_parse_options(int argc, char** argv, struct pb_options* opt,
                            int (*extra)(const char* flag, const char* value)) {
  const char* coll = NULL;
  const char* min_text = "8";
  const char* max_text = "64M";
  int i;
  opt->coll = -1;
  opt->factor = 2;
  opt->iters = 20;
  opt->warmup = 5;
  opt->check = 1;
  opt->op = PB_SUM;
  opt->root = 0;
  opt->json_path = NULL;
  pb_usage_error[0] = '\0';
  for (i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
      pb_help = 1;
      return -1;
    }
    if (a[0] != '-') {
      if (coll != NULL) {
        pb_set_error("unexpected argument '%s'", a);
        return -1;
      }
      coll = a;
      continue;
    }
    if (extra != NULL && extra(a, v)) {
      ++i;
      continue;
    }
    if (v == NULL) {
      pb_set_error("%s needs a value", a);
      return -1;
    }
    ++i;
    if (strcmp(a, "-b") == 0 || strcmp(a, "--minbytes") == 0) {
      min_text = v;
    } else if (strcmp(a, "-e") == 0 || strcmp(a, "--maxbytes") == 0) {
      max_text = v;
    } else if (strcmp(a, "-f") == 0 || strcmp(a, "--stepfactor") == 0) {
      if (pb_parse_int(v, 2, 1 << 20, &opt->factor) != 0) {
        pb_set_error("-f: bad factor '%s'", v);
        return -1;
      }
    } else if (strcmp(a, "-n") == 0 || strcmp(a, "--iters") == 0) {
      if (pb_parse_int(v, 1, 1 << 30, &opt->iters) != 0) {
        pb_set_error("-n: bad count '%s'", v);
        return -1;
      }
    } else if (strcmp(a, "-w") == 0 || strcmp(a, "--warmup_iters") == 0) {
      if (pb_parse_int(v, 0, 1 << 30, &opt->warmup) != 0) {
        pb_set_error("-w: bad count '%s'", v);
        return -1;
      }
    } else if (strcmp(a, "-c") == 0 || strcmp(a, "--check") == 0) {
      if (pb_parse_int(v, 0, 1, &opt->check) != 0) {
        pb_set_error("-c: must be 0 or 1, not '%s'", v);
        return -1;
      }
    } else if (strcmp(a, "-d") == 0 || strcmp(a, "--datatype") == 0) {
      if (strcmp(v, "float32") != 0) {
        pb_set_error("-d: only float32 is supported, not '%s'", v);
        return -1;
      }
    } else if (strcmp(a, "-o") == 0 || strcmp(a, "--op") == 0) {
      int k, found = -1;
      for (k = 0; k < PB_NUM_OPS; ++k)
        if (strcmp(v, pb_op_names[k]) == 0) found = k;
      if (found < 0) {
        pb_set_error("-o: unknown op '%s' (sum, product, min, max)", v);
        return -1;
      }
      opt->op = found;
    } else if (strcmp(a, "-r") == 0 || strcmp(a, "--root") == 0) {
      if (pb_parse_int(v, 0, 1 << 30, &opt->root) != 0) {
        pb_set_error("-r: bad root '%s'", v);
        return -1;
      }
    } else if (strcmp(a, "--json") == 0) {
      opt->json_path = v;
    } else {
      pb_set_error("unknown option '%s'", a);
      return -1;
    }
  }
  if (coll == NULL) {
    pb_set_error("COLL is required");
    return -1;
  }
  for (i = 0; i < PB_NUM_COLLS; ++i)
    if (strcmp(coll, pb_colls[i].name) == 0) opt->coll = i;
  if (opt->coll < 0) {
    pb_set_error("unknown collective '%s'", coll);
    return -1;
  }
  if (pb_parse_size(min_text, &opt->min_bytes) != 0) {
    pb_set_error("-b: bad size '%s'", min_text);
    return -1;
  }
  if (pb_parse_size(max_text, &opt->max_bytes) != 0) {
    pb_set_error("-e: bad size '%s'", max_text);
    return -1;
  }
  if (opt->min_bytes > opt->max_bytes) {
    pb_set_error("-b (%zu) is larger than -e (%zu)", opt->min_bytes, opt->max_bytes);
    return -1;
  }
  if (opt->min_bytes == 0 && opt->coll != PB_BARRIER) {
    pb_set_error("-b must be at least 1 byte");
    return -1;
  }
  return 0;
}

/* Message sizes of the sweep (barrier: one row of 0). Returns the count;
 * `sizes` has room for 64. */
static int pb_sweep(const struct pb_options* opt, size_t sizes[64]) {
  int k = 0;
  size_t s = opt->min_bytes;
  if (opt->coll == PB_BARRIER) {
    sizes[0] = 0;
    return 1;
  }
  for (;;) {
    sizes[k++] = s;
    if (k == 64 || s > opt->max_bytes / (size_t)opt->factor) break;
    s *= (size_t)opt->factor;
  }
  return k;
}

/* bytes: the row's size rounded down; count: elements; block: per-rank
 * elements of the blocked collectives (count / n), else count. */
struct pb_shape {
  size_t bytes, count, block;
};

static int pb_make_shape(int coll, size_t requested, int n, struct pb_shape* s) {
  const size_t es = sizeof(float);
  memset(s, 0, sizeof *s);
  if (coll == PB_BARRIER) return 1;
  if (pb_colls[coll].blocked) {
    s->block = requested / (es * (size_t)n);
    s->count = s->block * (size_t)n;
  } else {
    s->count = requested / es;
    s->block = s->count;
  }
  s->bytes = s->count * es;
  return s->count > 0;
}

static double pb_bus_factor(int coll, int n) {
  const double dn = n;
  switch (coll) {
    case PB_ALL_REDUCE:
      return 2.0 * (dn - 1) / dn;
    case PB_ALL_GATHER:
    case PB_REDUCE_SCATTER:
    case PB_ALL_TO_ALL:
    case PB_GATHER:
    case PB_SCATTER:
      return (dn - 1) / dn;
    default:
      return 1.0;
  }
}

/* ---- buffers ---------------------------------------------------------------- */

/* The buffers of one row on one rank, laid out as tutti-bench's (out of
 * place). Broadcast uses one buffer (send == recv). writes_input: whether
 * this rank's input matters (not on non-roots of broadcast and scatter). */
struct pb_bufs {
  float* send;
  size_t send_len;
  float* recv;
  size_t recv_len;
  int writes_input;
  /* storage, grown and kept between rows */
  float* a;
  size_t a_cap;
  float* b;
  size_t b_cap;
};

static float* pb_grow(float** p, size_t* cap, size_t elems) {
  if (elems == 0) elems = 1;
  if (*cap < elems) {
    free(*p);
    /* 64-byte aligned, like a typical allocator for large buffers */
    if (posix_memalign((void**)p, 64, elems * sizeof(float)) != 0) {
      fprintf(stderr, "out of memory (%zu floats)\n", elems);
      exit(PB_EXIT_WRONG);
    }
    *cap = elems;
  }
  return *p;
}

static void pb_layout(struct pb_bufs* bu, int coll, const struct pb_shape* s, int rank, int root) {
  bu->writes_input = 1;
  bu->send_len = bu->recv_len = 0;
  bu->send = bu->recv = NULL;
  switch (coll) {
    case PB_ALL_REDUCE:
    case PB_REDUCE:
      bu->send_len = bu->recv_len = s->count;
      bu->send = pb_grow(&bu->a, &bu->a_cap, s->count);
      bu->recv = pb_grow(&bu->b, &bu->b_cap, s->count);
      break;
    case PB_BROADCAST:
      bu->send_len = bu->recv_len = s->count;
      bu->send = bu->recv = pb_grow(&bu->a, &bu->a_cap, s->count);
      bu->writes_input = rank == root;
      break;
    case PB_ALL_GATHER:
    case PB_GATHER:
      bu->recv_len = s->count;
      bu->send_len = s->block;
      bu->recv = pb_grow(&bu->a, &bu->a_cap, s->count);
      bu->send = pb_grow(&bu->b, &bu->b_cap, s->block);
      break;
    case PB_SCATTER:
    case PB_REDUCE_SCATTER:
      bu->send_len = s->count;
      bu->recv_len = s->block;
      bu->send = pb_grow(&bu->a, &bu->a_cap, s->count);
      bu->recv = pb_grow(&bu->b, &bu->b_cap, s->block);
      if (coll == PB_SCATTER) bu->writes_input = rank == root;
      break;
    case PB_ALL_TO_ALL:
    case PB_SENDRECV:
      bu->send_len = bu->recv_len = s->count;
      bu->send = pb_grow(&bu->a, &bu->a_cap, s->count);
      bu->recv = pb_grow(&bu->b, &bu->b_cap, s->count);
      break;
    default: /* barrier */
      bu->send = pb_grow(&bu->a, &bu->a_cap, 1);
      bu->recv = pb_grow(&bu->b, &bu->b_cap, 1);
      break;
  }
}

static void pb_free_bufs(struct pb_bufs* bu) {
  free(bu->a);
  free(bu->b);
  memset(bu, 0, sizeof *bu);
}

/* ---- input data ------------------------------------------------------------- */

static uint64_t pb_seed(int rank, uint64_t iter, size_t bytes) {
  uint64_t h = pb_mix(0x7065657273ull ^ (uint64_t)(unsigned)rank);
  h = pb_mix(h ^ iter);
  return pb_mix(h ^ (uint64_t)bytes);
}

/* Element i of an input seeded by `seed`: uniform in [-4, 4] rounded to
 * float, never 0 (for_product: [0.5, 1.5]). */
static float pb_value(uint64_t seed, size_t i, int for_product) {
  uint64_t h = pb_mix(seed + (uint64_t)i * 0xd1b54a32d192ed03ull);
  for (;;) {
    const double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
    const float f = (float)(for_product ? 0.5 + u : (2 * u - 1) * 4.0);
    if (f != 0.0f) return f;
    h = pb_mix(h);
  }
}

static void pb_generate(float* dst, int rank, uint64_t iter, size_t bytes, size_t off, size_t m, int for_product) {
  const uint64_t seed = pb_seed(rank, iter, bytes);
  size_t k;
  for (k = 0; k < m; ++k) dst[k] = pb_value(seed, off + k, for_product);
}

/* Output poison: bytes alternate 0x00 / 0xa5 (as tutti-bench's). */
static void pb_poison(void* p, size_t bytes) {
  unsigned char* c = (unsigned char*)p;
  size_t i;
  for (i = 0; i < bytes; ++i) c[i] = (i & 1) ? 0xa5 : 0x00;
}

/* Poisons the outputs and writes this rank's inputs of iteration `iter`. */
static void pb_fill(struct pb_bufs* bu, const struct pb_options* opt, const struct pb_shape* s, int rank,
                    uint64_t iter) {
  if (bu->recv_len > 0) pb_poison(bu->recv, bu->recv_len * sizeof(float));
  if (bu->writes_input && bu->send_len > 0)
    pb_generate(bu->send, rank, iter, s->bytes, 0, bu->send_len, pb_colls[opt->coll].reduces && opt->op == PB_PRODUCT);
}

/* ---- the check ---------------------------------------------------------------- */

/* Number of wrong output elements of this rank; the first is described in
 * `first` (size `first_len`). */
static uint64_t pb_check(const struct pb_bufs* bu, const struct pb_options* opt, const struct pb_shape* s, int rank,
                         int n, uint64_t iter, char* first, size_t first_len) {
  const int coll = opt->coll, root = opt->root;
  const int for_product = pb_colls[coll].reduces && opt->op == PB_PRODUCT;
  const size_t count = s->count, block = s->block, r = (size_t)rank;
  uint64_t wrong = 0;
  /* segments: out[out_off, +len) = input of rank src at src_off (src < 0: the reduction) */
  struct seg {
    size_t out_off;
    int src;
    size_t src_off, len;
  };
  struct seg* segs = (struct seg*)malloc(sizeof(struct seg) * (size_t)(n + 1));
  int nseg = 0, g, b;
  uint64_t* seeds = (uint64_t*)malloc(sizeof(uint64_t) * (size_t)n);
  first[0] = '\0';
  for (g = 0; g < n; ++g) seeds[g] = pb_seed(g, iter, s->bytes);
#define PB_SEG(o, sr, so, l)   \
  do {                         \
    segs[nseg].out_off = (o);  \
    segs[nseg].src = (sr);     \
    segs[nseg].src_off = (so); \
    segs[nseg].len = (l);      \
    ++nseg;                    \
  } while (0)
  switch (coll) {
    case PB_ALL_REDUCE:
      PB_SEG(0, -1, 0, count);
      break;
    case PB_REDUCE:
      if (rank == root) PB_SEG(0, -1, 0, count);
      break;
    case PB_REDUCE_SCATTER:
      PB_SEG(0, -1, r * block, block);
      break;
    case PB_BROADCAST:
      PB_SEG(0, root, 0, count);
      break;
    case PB_ALL_GATHER:
    case PB_GATHER:
      if (coll == PB_GATHER && rank != root) break;
      for (b = 0; b < n; ++b) PB_SEG((size_t)b * block, b, 0, block);
      break;
    case PB_SCATTER:
      PB_SEG(0, root, r * block, block);
      break;
    case PB_ALL_TO_ALL:
      for (b = 0; b < n; ++b) PB_SEG((size_t)b * block, b, r * block, block);
      break;
    case PB_SENDRECV:
      PB_SEG(0, (rank - 1 + n) % n, 0, count);
      break;
    default:
      break;
  }
#undef PB_SEG
  for (g = 0; g < nseg; ++g) {
    const struct seg* sg = &segs[g];
    size_t k;
    for (k = 0; k < sg->len; ++k) {
      const float got = bu->recv[sg->out_off + k];
      const size_t idx = sg->src_off + k;
      if (sg->src >= 0) { /* a copy: bit-exact */
        const float want = pb_value(seeds[sg->src], idx, 0);
        if (memcmp(&got, &want, sizeof got) == 0) continue;
        if (wrong++ == 0)
          snprintf(first, first_len, "output element %zu: got %.9g, expected %.9g (from rank %d)", sg->out_off + k,
                   (double)got, (double)want, sg->src);
      } else { /* the reduction over every rank */
        double acc = 0, mag = for_product ? 1 : 0, tol = 0;
        float want;
        int q;
        for (q = 0; q < n; ++q) {
          const double x = pb_value(seeds[q], idx, for_product);
          switch (opt->op) {
            case PB_SUM:
              acc = q == 0 ? x : acc + x;
              mag += fabs(x);
              break;
            case PB_PRODUCT:
              acc = q == 0 ? x : acc * x;
              mag *= fabs(x);
              break;
            case PB_MIN:
              acc = q == 0 || x < acc ? x : acc;
              break;
            case PB_MAX:
              acc = q == 0 || x > acc ? x : acc;
              break;
          }
        }
        want = (float)acc;
        if (opt->op == PB_SUM || opt->op == PB_PRODUCT)
          tol = (n + 1) * 0x1p-23 * mag + n * 0x1p-149; /* tests/common/reference.h tolerance() */
        if (!isnan(got) && fabs((double)got - (double)want) <= tol) continue;
        if (wrong++ == 0)
          snprintf(first, first_len, "output element %zu: got %.9g, expected %.9g (tolerance %.3g)", sg->out_off + k,
                   (double)got, (double)want, tol);
      }
    }
  }
  free(segs);
  free(seeds);
  return wrong;
}

/* ---- output ------------------------------------------------------------------- */

static void pb_human_bytes(size_t b, char* out, size_t len) {
  const char* units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  snprintf(out, len, "%zu %s", b, units[u]);
}

static void pb_print_line(const char* size, const char* count, const char* type, const char* redop, const char* root,
                          const char* time, const char* algbw, const char* busbw, const char* wrong) {
  char line[256];
  size_t len;
  snprintf(line, sizeof line, "%12s  %12s  %10s  %10s  %6s  %10s  %8s  %8s  %8s", size, count, type, redop, root, time,
           algbw, busbw, wrong);
  len = strlen(line);
  while (len > 0 && line[len - 1] == ' ') line[--len] = '\0';
  printf("%s\n", line);
}

static void pb_print_header(const char* system, const struct pb_options* opt, int n) {
  const struct pb_coll_info* c = &pb_colls[opt->coll];
  char lo[32], hi[32];
  printf("# %s: %s, world size %d, dtype float32", system, c->name, n);
  if (c->reduces) printf(", op %s", pb_op_names[opt->op]);
  if (c->rooted) printf(", root %d", opt->root);
  printf(", out-of-place\n");
  pb_human_bytes(opt->min_bytes, lo, sizeof lo);
  pb_human_bytes(opt->max_bytes, hi, sizeof hi);
  if (opt->coll == PB_BARRIER)
    printf("# iters %d, warmup %d\n", opt->iters, opt->warmup);
  else
    printf("# sizes %s .. %s (factor %d), iters %d, warmup %d, check %s\n", lo, hi, opt->factor, opt->iters,
           opt->warmup, opt->check ? "on" : "off");
  printf("#\n");
  pb_print_line("#       size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong");
  pb_print_line("#        (B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "");
  fflush(stdout);
}

struct pb_row {
  size_t bytes, count;
  double time_us, algbw, busbw;
  uint64_t wrong;
};

static void pb_finish_row(struct pb_row* row, int coll, int n) {
  row->algbw = row->time_us > 0 ? (double)row->bytes / (row->time_us * 1e3) : 0; /* bytes/us -> GB/s */
  row->busbw = row->algbw * pb_bus_factor(coll, n);
}

static void pb_print_row(const struct pb_options* opt, const struct pb_row* row) {
  char size[32], count[32], root[16], time[32], algbw[32], busbw[32], wrong[32];
  const struct pb_coll_info* c = &pb_colls[opt->coll];
  snprintf(size, sizeof size, "%zu", row->bytes);
  snprintf(count, sizeof count, "%zu", row->count);
  snprintf(root, sizeof root, "%d", c->rooted ? opt->root : -1);
  snprintf(time, sizeof time, "%.2f", row->time_us);
  snprintf(algbw, sizeof algbw, "%.2f", row->algbw);
  snprintf(busbw, sizeof busbw, "%.2f", row->busbw);
  if (opt->check)
    snprintf(wrong, sizeof wrong, "%llu", (unsigned long long)row->wrong);
  else
    snprintf(wrong, sizeof wrong, "N/A");
  pb_print_line(size, count, "float32", c->reduces ? pb_op_names[opt->op] : "none", root, time, algbw, busbw, wrong);
  fflush(stdout);
}

/* One JSON line with tutti-bench's fields. */
static void pb_write_json(FILE* f, const struct pb_options* opt, int n, const struct pb_row* row) {
  const struct pb_coll_info* c = &pb_colls[opt->coll];
  char wrong[32];
  if (f == NULL) return;
  if (opt->check)
    snprintf(wrong, sizeof wrong, "%llu", (unsigned long long)row->wrong);
  else
    snprintf(wrong, sizeof wrong, "null");
  fprintf(f,
          "{\"collective\":\"%s\",\"bytes\":%zu,\"count\":%zu,\"dtype\":\"float32\",\"op\":\"%s\",\"root\":%d,"
          "\"world_size\":%d,\"time_us\":%.17g,\"algbw\":%.17g,\"busbw\":%.17g,\"wrong\":%s,\"inplace\":false}\n",
          c->name, row->bytes, row->count, c->reduces ? pb_op_names[opt->op] : "none", c->rooted ? opt->root : -1, n,
          row->time_us, row->algbw, row->busbw, wrong);
  fflush(f);
}

static void pb_print_footer(const struct pb_options* opt, uint64_t total_wrong, double busbw_sum, int rows) {
  if (opt->check)
    printf("# Wrong elements total: %llu %s\n", (unsigned long long)total_wrong, total_wrong == 0 ? "OK" : "FAILED");
  printf("# Avg bus bandwidth    : %.4f GB/s\n", rows > 0 ? busbw_sum / rows : 0.0);
  fflush(stdout);
}

#endif /* TUTTI_PEER_COMMON_H */
