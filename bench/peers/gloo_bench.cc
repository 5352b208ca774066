// gloo_bench: tutti-bench's loop against Gloo's C++ API (Debian's
// libgloo-dev, gloo 0.5.0 of 2022-05-18), TCP transport on 127.0.0.1,
// rendezvous through gloo::rendezvous::FileStore in a directory shared by
// the ranks. Built by build.sh into build/peers/gloo_bench.
//
//   gloo_bench --np N COLL [-b MIN] [-e MAX] [-f F] [-n ITERS] [-w WARMUP] [-c 0|1] [-d float32]
//              [-o sum|product|min|max] [-r ROOT] [--json FILE]
//       starts N ranks itself (fork + exec of itself with RANK, WORLD_SIZE and
//       GLOO_BENCH_STORE set; the store is a fresh mkdtemp directory, removed
//       at the end);
//   tuttirun -n N gloo_bench COLL ...      (or any launcher that sets RANK and WORLD_SIZE)
//       every rank uses --store DIR, else $GLOO_BENCH_STORE, else
//       /tmp/gloo_bench.<uid>.<MASTER_PORT>; rank 0 removes it at the end.
//
// Sizes, timing, bus-bandwidth factors, check and output: peer_common.h (the
// rules of tools/tutti-bench). Collectives: gloo::allreduce, broadcast,
// reduce, allgather, gather, scatter, alltoall, barrier (the options-based
// API, all out of place except broadcast, which is one buffer as in
// tutti-bench), sendrecv with unbound buffers (send to rank+1, recv from
// rank-1), and reduce_scatter with the older algorithm class
// gloo::ReduceScatterHalvingDoubling, which works in place on a full-size
// buffer: each operation copies the input into a scratch buffer, runs, and
// copies this rank's block out (the algorithm leaves it at the start of the
// buffer) (both copies are timed; they are the cost of
// an out-of-place reduce_scatter on that API).
// Exit status: 0 all rows correct, 1 wrong elements or a Gloo error, 2 bad
// options.
#include <fcntl.h>
#include <ftw.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "gloo/algorithm.h"
#include "gloo/allgather.h"
#include "gloo/allreduce.h"
#include "gloo/alltoall.h"
#include "gloo/barrier.h"
#include "gloo/broadcast.h"
#include "gloo/common/error.h"
#include "gloo/config.h"
#include "gloo/gather.h"
#include "gloo/math.h"
#include "gloo/reduce.h"
#include "gloo/reduce_scatter.h"
#include "gloo/rendezvous/context.h"
#include "gloo/rendezvous/file_store.h"
#include "gloo/scatter.h"
#include "gloo/transport/tcp/device.h"
#include "peer_common.h"
#include "placement.h"

namespace {

using Func = void (*)(void*, const void*, const void*, size_t);

constexpr uint64_t kSendRecvSlot = 0x7475747469ull;
constexpr auto kTimeout = std::chrono::seconds(120);

// Options of this program besides tutti-bench's.
int g_np = 0;
std::string g_store;

int extra_option(const char* flag, const char* value) {
  if (std::strcmp(flag, "--np") == 0) {
    if (value == nullptr || pb_parse_int(value, 1, 1024, &g_np) != 0) {
      pb_set_error("--np needs a number of ranks in [1, 1024]");
      g_np = -1;
    }
    return 1;
  }
  if (std::strcmp(flag, "--store") == 0) {
    if (value != nullptr) g_store = value;
    return 1;
  }
  return 0;
}

Func float_fn(int op) {
  switch (op) {
    case PB_PRODUCT:
      return static_cast<Func>(&gloo::product<float>);
    case PB_MIN:
      return static_cast<Func>(&gloo::min<float>);
    case PB_MAX:
      return static_cast<Func>(&gloo::max<float>);
    default:
      return static_cast<Func>(&gloo::sum<float>);
  }
}

const gloo::ReductionFunction<float>* float_rf(int op) {
  switch (op) {
    case PB_PRODUCT:
      return gloo::ReductionFunction<float>::product;
    case PB_MIN:
      return gloo::ReductionFunction<float>::min;
    case PB_MAX:
      return gloo::ReductionFunction<float>::max;
    default:
      return gloo::ReductionFunction<float>::sum;
  }
}

// The collective of one row; reduce_scatter keeps its algorithm object
// (built outside the timing: it sets up its buffers with every peer).
class Runner {
 public:
  Runner(std::shared_ptr<gloo::Context> ctx, const pb_options& opt, const pb_shape& s, pb_bufs& bu)
      : ctx_(std::move(ctx)), opt_(opt), s_(s), bu_(bu) {
    if (opt.coll == PB_REDUCE_SCATTER) {
      scratch_.resize(s.count);
      rs_ = std::make_unique<gloo::ReduceScatterHalvingDoubling<float>>(
          ctx_, std::vector<float*>{scratch_.data()}, static_cast<int>(s.count),
          std::vector<int>(static_cast<size_t>(ctx_->size), static_cast<int>(s.block)), float_rf(opt.op));
    }
  }

  void run() {
    const size_t count = s_.count, block = s_.block;
    const int rank = ctx_->rank, n = ctx_->size;
    switch (opt_.coll) {
      case PB_ALL_REDUCE: {
        gloo::AllreduceOptions o(ctx_);
        o.setInput(bu_.send, count);
        o.setOutput(bu_.recv, count);
        o.setReduceFunction(float_fn(opt_.op));
        gloo::allreduce(o);
        break;
      }
      case PB_BROADCAST: {
        gloo::BroadcastOptions o(ctx_);
        o.setOutput(bu_.recv, count);  // the root's input too
        o.setRoot(opt_.root);
        gloo::broadcast(o);
        break;
      }
      case PB_REDUCE: {
        gloo::ReduceOptions o(ctx_);
        o.setInput(bu_.send, count);
        o.setOutput(bu_.recv, count);
        o.setRoot(opt_.root);
        o.setReduceFunction(float_fn(opt_.op));
        gloo::reduce(o);
        break;
      }
      case PB_ALL_GATHER: {
        gloo::AllgatherOptions o(ctx_);
        o.setInput(bu_.send, block);
        o.setOutput(bu_.recv, count);
        gloo::allgather(o);
        break;
      }
      case PB_GATHER: {
        gloo::GatherOptions o(ctx_);
        o.setInput(bu_.send, block);
        if (rank == opt_.root) o.setOutput(bu_.recv, count);
        o.setRoot(opt_.root);
        gloo::gather(o);
        break;
      }
      case PB_SCATTER: {
        gloo::ScatterOptions o(ctx_);
        if (rank == opt_.root) {
          std::vector<float*> in(static_cast<size_t>(n));
          for (int b = 0; b < n; ++b) in[static_cast<size_t>(b)] = bu_.send + static_cast<size_t>(b) * block;
          o.setInputs(in, block);
        }
        o.setOutput(bu_.recv, block);
        o.setRoot(opt_.root);
        gloo::scatter(o);
        break;
      }
      case PB_REDUCE_SCATTER:
        std::memcpy(scratch_.data(), bu_.send, count * sizeof(float));
        rs_->run();
        std::memcpy(bu_.recv, scratch_.data(), block * sizeof(float));  // this rank's block ends up first
        break;
      case PB_ALL_TO_ALL: {
        gloo::AlltoallOptions o(ctx_);
        o.setInput(bu_.send, count);
        o.setOutput(bu_.recv, count);
        gloo::alltoall(o);
        break;
      }
      case PB_BARRIER: {
        gloo::BarrierOptions o(ctx_);
        gloo::barrier(o);
        break;
      }
      case PB_SENDRECV: {
        auto sb = ctx_->createUnboundBuffer(bu_.send, count * sizeof(float));
        auto rb = ctx_->createUnboundBuffer(bu_.recv, count * sizeof(float));
        rb->recv((rank - 1 + n) % n, kSendRecvSlot);
        sb->send((rank + 1) % n, kSendRecvSlot);
        sb->waitSend();
        rb->waitRecv();
        break;
      }
      default:
        break;
    }
  }

 private:
  std::shared_ptr<gloo::Context> ctx_;
  const pb_options& opt_;
  const pb_shape& s_;
  pb_bufs& bu_;
  std::vector<float> scratch_;
  std::unique_ptr<gloo::ReduceScatterHalvingDoubling<float>> rs_;
};

double max_over_ranks(const std::shared_ptr<gloo::Context>& ctx, double v) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(&v, 1);
  o.setReduceFunction(static_cast<Func>(&gloo::max<double>));
  gloo::allreduce(o);
  return v;
}

uint64_t sum_over_ranks(const std::shared_ptr<gloo::Context>& ctx, uint64_t v) {
  gloo::AllreduceOptions o(ctx);
  o.setOutput(&v, 1);
  o.setReduceFunction(static_cast<Func>(&gloo::sum<uint64_t>));
  gloo::allreduce(o);
  return v;
}

void barrier(const std::shared_ptr<gloo::Context>& ctx) {
  gloo::BarrierOptions o(ctx);
  gloo::barrier(o);
}

int remove_entry(const char* path, const struct stat*, int, struct FTW*) { return ::remove(path); }
void remove_tree(const std::string& dir) { ::nftw(dir.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS); }

// PEERS_BIND_CORES=1 (compare.py sets it): this rank binds itself as tuttirun
// binds its ranks (tools/tuttirun/placement.h), so that every system runs
// with the same placement.
void bind_like_tuttirun(int local, int n) {
  const char* want = std::getenv("PEERS_BIND_CORES");
  if (want == nullptr || std::strcmp(want, "1") != 0) return;
  const std::vector<int> cpus = tuttirun::rank_cpus(tuttirun::allowed_cpus(), local, n);
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  ::sched_setaffinity(0, sizeof set, &set);
}

// --np N: starts N copies of this program (without --np) and waits for them;
// when one fails the others are killed. Returns the exit status.
int launch(int np, int argc, char** argv) {
  char tmpl[] = "/tmp/gloo_bench.XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("gloo_bench: mkdtemp");
    return PB_EXIT_WRONG;
  }
  const std::string store = tmpl;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--np") == 0) {
      ++i;
      continue;
    }
    args.push_back(argv[i]);
  }
  args.push_back(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < np; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("gloo_bench: fork");
      for (pid_t p : pids) ::kill(p, SIGKILL);
      break;
    }
    if (pid == 0) {
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(np).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("GLOO_BENCH_STORE", store.c_str(), 1);
      ::setenv("GLOO_BENCH_CHILD", "1", 1);
      if (r != 0) {  // only rank 0 reads stdin
        const int fd = ::open("/dev/null", O_RDONLY);
        if (fd >= 0) ::dup2(fd, 0);
      }
      ::execv("/proc/self/exe", args.data());
      std::perror("gloo_bench: exec");
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int result = pids.size() == static_cast<size_t>(np) ? 0 : PB_EXIT_WRONG;
  size_t left = pids.size();
  double kill_at = -1;  // once a rank failed: when the others are killed
  while (left > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, kill_at < 0 ? 0 : WNOHANG);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (pid == 0) {  // a rank failed and others still run: give them a moment to report, then kill
      if (pb_now_us() >= kill_at) {
        for (pid_t p : pids)
          if (p != 0) ::kill(p, SIGKILL);  // they would wait for the failed rank until Gloo's timeout
        kill_at = 1e300;
      }
      ::usleep(10000);
      continue;
    }
    --left;
    for (pid_t& p : pids)
      if (p == pid) p = 0;
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (code != 0 && result == 0) {
      result = code;
      kill_at = pb_now_us() + 2e6;
    }
  }
  remove_tree(store);
  return result;
}

int run(int argc, char** argv) {
  pb_options opt;
  const int env_rank = pb_env_rank();
  if (pb_parse_options(argc, argv, &opt, extra_option) != 0 || g_np < 0) {
    if (pb_help) {
      if (env_rank == 0) pb_print_usage("gloo_bench", " [--np N] [--store DIR]");
      return 0;
    }
    if (env_rank == 0) std::fprintf(stderr, "gloo_bench: error: %s\n", pb_usage_error);
    return PB_EXIT_USAGE;
  }
  if (g_np > 0 && std::getenv("GLOO_BENCH_CHILD") == nullptr) return launch(g_np, argc, argv);

  const char* ws = std::getenv("WORLD_SIZE");
  const int rank = env_rank, n = ws != nullptr ? std::atoi(ws) : 1;
  if (n < 1 || rank < 0 || rank >= n) {
    std::fprintf(stderr, "gloo_bench: error: bad RANK %d / WORLD_SIZE %d\n", rank, n);
    return PB_EXIT_USAGE;
  }
  bind_like_tuttirun(rank, n);
  if (pb_colls[opt.coll].rooted && opt.root >= n) {
    if (rank == 0) std::fprintf(stderr, "gloo_bench: error: -r: root %d is not a rank of a world of %d\n", opt.root, n);
    return PB_EXIT_USAGE;
  }
  if (opt.coll == PB_SENDRECV && n < 2) {
    if (rank == 0) std::fprintf(stderr, "gloo_bench: error: sendrecv needs at least 2 ranks\n");
    return PB_EXIT_USAGE;
  }

  std::string store_dir = g_store;
  bool remove_store = false;
  if (store_dir.empty()) {
    if (const char* s = std::getenv("GLOO_BENCH_STORE")) {
      store_dir = s;
    } else {
      const char* port = std::getenv("MASTER_PORT");
      store_dir = "/tmp/gloo_bench." + std::to_string(::getuid()) + "." + (port != nullptr ? port : "0");
      remove_store = true;
    }
  }
  ::mkdir(store_dir.c_str(), 0700);  // EEXIST is fine: another rank made it

  gloo::transport::tcp::attr attr;
  attr.hostname = "127.0.0.1";
  auto dev = gloo::transport::tcp::CreateDevice(attr);
  gloo::rendezvous::FileStore store(store_dir);
  auto rctx = std::make_shared<gloo::rendezvous::Context>(rank, n);
  rctx->setTimeout(std::chrono::duration_cast<std::chrono::milliseconds>(kTimeout));
  rctx->connectFullMesh(store, dev);
  std::shared_ptr<gloo::Context> ctx = rctx;

  FILE* json = nullptr;
  int json_failed = 0;
  if (rank == 0 && opt.json_path != nullptr) {
    json = std::fopen(opt.json_path, "w");
    if (json == nullptr) {
      std::fprintf(stderr, "gloo_bench: error: cannot open --json file '%s' for writing\n", opt.json_path);
      json_failed = 1;
    }
  }
  if (max_over_ranks(ctx, json_failed) != 0) return PB_EXIT_USAGE;

  char system[64];
  std::snprintf(system, sizeof system, "gloo_bench (gloo %d.%d.%d, tcp)", GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR,
                GLOO_VERSION_PATCH);
  if (rank == 0) pb_print_header(system, &opt, n);

  pb_bufs bu;
  std::memset(&bu, 0, sizeof bu);
  size_t sizes[64];
  const int nsizes = pb_sweep(&opt, sizes);
  uint64_t total_wrong = 0;
  double busbw_sum = 0;
  int rows = 0;
  for (int k = 0; k < nsizes; ++k) {
    pb_shape s;
    if (!pb_make_shape(opt.coll, sizes[k], n, &s)) continue;
    pb_layout(&bu, opt.coll, &s, rank, opt.root);
    Runner runner(ctx, opt, s, bu);
    pb_fill(&bu, &opt, &s, rank, 0);
    for (int i = 0; i < opt.warmup; ++i) runner.run();
    barrier(ctx);
    const double t0 = pb_now_us();
    for (int i = 0; i < opt.iters; ++i) runner.run();
    const double t1 = pb_now_us();
    const double time_us = max_over_ranks(ctx, (t1 - t0) / opt.iters);

    uint64_t wrong = 0;
    if (opt.check) {
      const uint64_t iter = 1 + static_cast<uint64_t>(opt.warmup) + static_cast<uint64_t>(opt.iters);
      char first[256];
      pb_fill(&bu, &opt, &s, rank, iter);
      runner.run();
      wrong = pb_check(&bu, &opt, &s, rank, n, iter, first, sizeof first);
      if (wrong > 0) {
        std::fprintf(stderr, "gloo_bench: rank %d: %s of %zu bytes: %llu wrong elements; first: %s\n", rank,
                     pb_colls[opt.coll].name, s.bytes, static_cast<unsigned long long>(wrong), first);
        std::fflush(stderr);
      }
      wrong = sum_over_ranks(ctx, wrong);
    }
    total_wrong += wrong;

    pb_row row;
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
    if (json != nullptr && std::fclose(json) != 0) {
      std::fprintf(stderr, "gloo_bench: error: writing '%s' failed\n", opt.json_path);
      total_wrong += 1;
    }
  }
  pb_free_bufs(&bu);
  barrier(ctx);  // nobody leaves (and closes its connections) before everyone is done
  if (rank == 0 && remove_store) remove_tree(store_dir);
  return total_wrong > 0 ? PB_EXIT_WRONG : 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_bench: rank %d: error: %s\n", pb_env_rank(), e.what());
    return PB_EXIT_WRONG;
  }
}
