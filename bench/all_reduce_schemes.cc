// What bounds a 2-rank all_reduce on one host, without the library: two
// processes (bound to CPUs 0 and 1) run a float32-sum all_reduce by one of
// these schemes, every element checked, beside the cross-process copy the
// issue measures against (one process copies out a buffer the other has just
// written in shared memory). docs/performance.md "shared buffers".
//
//   build/bin/tutti_all_reduce_schemes BYTES SCHEME [ROUND_BYTES] [ITERS]
//
//   xcopy    the cross-process copy of BYTES (the reader's time)
//   copy     copying two-shot through shared slots, ROUND_BYTES a round: each
//            rank copies the peer's half of its input into its slot, reduces
//            its half (reading the peer's slot) into its output, copies that
//            into its slot, and copies the peer's result out; prints the
//            share of time of each pass
//   slot     the same, the reduction stored straight into the slot
//   cma      process_vm_readv of the peer's half of its input, reduce,
//            process_vm_writev of the result into the peer's output
//   shared   inputs and outputs in shared memory: each rank reduces its half
//            of both inputs into a ROUND_BYTES stage and copies it into both
//            outputs
#include <immintrin.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>
#include <x86intrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

namespace {

struct alignas(64) Flag {
  std::atomic<long> v{0};
};
struct Control {
  Flag in_ready[2], out_ready[2], consumed[2], barrier[2], pid[2];
};

void pin(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  sched_setaffinity(0, sizeof s, &s);
}

void wait_at_least(const std::atomic<long>& a, long v) {
  while (a.load(std::memory_order_acquire) < v) _mm_pause();
}

void add(float* d, const float* a, const float* b, std::size_t n) {
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 x0 = _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i));
    const __m256 x1 = _mm256_add_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8));
    _mm256_storeu_ps(d + i, x0);
    _mm256_storeu_ps(d + i + 8, x1);
  }
  for (; i < n; ++i) d[i] = a[i] + b[i];
}

float input_value(std::size_t i, int rank) {
  return static_cast<float>((i * 7 + static_cast<std::size_t>(rank) * 3) % 101);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s BYTES xcopy|copy|slot|cma|shared [ROUND_BYTES] [ITERS]\n", argv[0]);
    return 2;
  }
  const std::size_t bytes = std::strtoull(argv[1], nullptr, 0) / 8 * 8;
  const std::string scheme = argv[2];
  const std::size_t round_bytes = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : std::size_t{512} << 10;
  const int iters = argc > 4 ? std::atoi(argv[4]) : 100;
  if (bytes == 0 || round_bytes < 64 || iters < 1) return 2;
  constexpr int kSlots = 4;  // slots per rank, round k in slot k % kSlots
  auto* ctl = new (mmap(nullptr, sizeof(Control), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Control;
  const std::size_t seg_bytes = 2 * kSlots * round_bytes + 4 * bytes;
  auto* seg = static_cast<char*>(mmap(nullptr, seg_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  std::memset(seg, 0, seg_bytes);
  const pid_t child = fork();
  const int r = child == 0 ? 1 : 0, p = 1 - r;
  pin(r);
  ctl->pid[r].v = getpid();
  const std::size_t n = bytes / 4, cn = round_bytes / 4;
  std::vector<float> in(n), out(n, 0.f), stage(cn);
  for (std::size_t i = 0; i < n; ++i) in[i] = input_value(i, r);
  // Shared inputs and outputs (scheme "shared") after the slots.
  float* sin[2] = {reinterpret_cast<float*>(seg + 2 * kSlots * round_bytes),
                   reinterpret_cast<float*>(seg + 2 * kSlots * round_bytes + bytes)};
  float* sout[2] = {reinterpret_cast<float*>(seg + 2 * kSlots * round_bytes + 2 * bytes),
                    reinterpret_cast<float*>(seg + 2 * kSlots * round_bytes + 3 * bytes)};
  std::memcpy(sin[r], in.data(), bytes);
  long barrier_count = 0;
  auto barrier = [&] {
    ++barrier_count;
    ctl->barrier[r].v.store(barrier_count, std::memory_order_release);
    wait_at_least(ctl->barrier[p].v, barrier_count);
  };
  barrier();
  const pid_t peer = static_cast<pid_t>(ctl->pid[p].v.load());
  char* my_slots = seg + static_cast<std::size_t>(r) * kSlots * round_bytes;
  char* peer_slots = seg + static_cast<std::size_t>(p) * kSlots * round_bytes;
  long round = 0;
  double pass[6] = {};  // copy in, wait, reduce, result into slot, wait, copy out (cycles)
  auto all_reduce = [&] {
    if (scheme == "copy" || scheme == "slot") {
      for (std::size_t off = 0; off < n; off += cn) {
        const std::size_t c = std::min(cn, n - off), h = c / 2;
        const std::size_t my_lo = r == 0 ? 0 : h, my_count = r == 0 ? h : c - h;
        const std::size_t peer_lo = r == 0 ? h : 0, peer_count = r == 0 ? c - h : h;
        ++round;
        const std::size_t s = static_cast<std::size_t>(round % kSlots);
        auto* mine = reinterpret_cast<float*>(my_slots + s * round_bytes);
        auto* theirs = reinterpret_cast<float*>(peer_slots + s * round_bytes);
        wait_at_least(ctl->consumed[p].v, round - kSlots);  // the peer is done with this slot
        const auto t0 = __rdtsc();
        std::memcpy(mine + peer_lo, in.data() + off + peer_lo, peer_count * 4);
        const auto t1 = __rdtsc();
        ctl->in_ready[r].v.store(round, std::memory_order_release);
        wait_at_least(ctl->in_ready[p].v, round);
        const auto t2 = __rdtsc();
        if (scheme == "slot") {
          add(mine + my_lo, in.data() + off + my_lo, theirs + my_lo, my_count);
        } else {
          add(out.data() + off + my_lo, in.data() + off + my_lo, theirs + my_lo, my_count);
        }
        const auto t3 = __rdtsc();
        if (scheme == "slot") {
          std::memcpy(out.data() + off + my_lo, mine + my_lo, my_count * 4);
        } else {
          std::memcpy(mine + my_lo, out.data() + off + my_lo, my_count * 4);
        }
        const auto t4 = __rdtsc();
        ctl->out_ready[r].v.store(round, std::memory_order_release);
        wait_at_least(ctl->out_ready[p].v, round);
        const auto t5 = __rdtsc();
        std::memcpy(out.data() + off + peer_lo, theirs + peer_lo, peer_count * 4);
        const auto t6 = __rdtsc();
        ctl->consumed[r].v.store(round, std::memory_order_release);
        const unsigned long long t[7] = {t0, t1, t2, t3, t4, t5, t6};
        for (int i = 0; i < 6; ++i) pass[i] += static_cast<double>(t[i + 1] - t[i]);
      }
    } else if (scheme == "cma") {
      const std::size_t h = n / 2, my_lo = r == 0 ? 0 : h, my_count = r == 0 ? h : n - h;
      barrier();  // both inside: inputs ready, outputs writable
      for (std::size_t off = 0; off < my_count; off += cn) {
        const std::size_t c = std::min(cn, my_count - off);
        // The peer's buffers are at the same addresses (forked after nothing moved them).
        iovec local{stage.data(), c * 4}, remote{in.data() + my_lo + off, c * 4};
        if (process_vm_readv(peer, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(c * 4)) std::abort();
        add(out.data() + my_lo + off, in.data() + my_lo + off, stage.data(), c);
        iovec local2{out.data() + my_lo + off, c * 4}, remote2{out.data() + my_lo + off, c * 4};
        if (process_vm_writev(peer, &local2, 1, &remote2, 1, 0) != static_cast<ssize_t>(c * 4)) std::abort();
      }
      barrier();
    } else if (scheme == "shared") {
      const std::size_t h = n / 2, my_lo = r == 0 ? 0 : h, my_count = r == 0 ? h : n - h;
      ++round;
      ctl->in_ready[r].v.store(round, std::memory_order_release);
      wait_at_least(ctl->in_ready[p].v, round);
      for (std::size_t off = 0; off < my_count; off += cn) {
        const std::size_t c = std::min(cn, my_count - off);
        add(stage.data(), sin[0] + my_lo + off, sin[1] + my_lo + off, c);
        for (float* o : {sout[r], sout[p]}) std::memcpy(o + my_lo + off, stage.data(), c * 4);
      }
      ctl->consumed[r].v.store(round, std::memory_order_release);
      wait_at_least(ctl->consumed[p].v, round);
    }
  };
  char* xbuf = seg + 2 * kSlots * round_bytes;
  double us = 0;
  if (scheme == "xcopy") {
    for (int i = 0; i < iters + 1; ++i) {
      if (r == 0) std::memset(xbuf, i & 0x7f, bytes);
      barrier();
      const auto t0 = std::chrono::steady_clock::now();
      if (r == 1) std::memcpy(out.data(), xbuf, bytes);
      const auto t1 = std::chrono::steady_clock::now();
      barrier();
      if (i > 0) us += std::chrono::duration<double, std::micro>(t1 - t0).count();
    }
  } else if (scheme == "copy" || scheme == "slot" || scheme == "cma" || scheme == "shared") {
    for (int i = 0; i < 5; ++i) all_reduce();
    std::fill(std::begin(pass), std::end(pass), 0.0);
    barrier();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) all_reduce();
    const auto t1 = std::chrono::steady_clock::now();
    us = std::chrono::duration<double, std::micro>(t1 - t0).count();
    const float* result = scheme == "shared" ? sout[r] : out.data();
    for (std::size_t i = 0; i < n; ++i) {
      if (result[i] != input_value(i, 0) + input_value(i, 1)) {
        std::fprintf(stderr, "rank %d: element %zu is %g, expected %g\n", r, i, static_cast<double>(result[i]),
                     static_cast<double>(input_value(i, 0) + input_value(i, 1)));
        return 1;
      }
    }
  } else {
    std::fprintf(stderr, "unknown scheme %s\n", scheme.c_str());
    return 2;
  }
  barrier();
  if (r == 1) {
    const double t = us / iters;
    std::printf("%-6s %10zu B, rounds of %zu B: %10.2f us, %6.2f GB/s\n", scheme.c_str(), bytes, round_bytes, t,
                static_cast<double>(bytes) / t / 1e3);
    double total = 0;
    for (double v : pass) total += v;
    if (total > 0)
      std::printf(
          "  passes: copy in %.2f, wait %.2f, reduce %.2f, result into slot / out %.2f, wait %.2f, copy out %.2f\n",
          pass[0] / total, pass[1] / total, pass[2] / total, pass[3] / total, pass[4] / total, pass[5] / total);
  }
  if (child) waitpid(child, nullptr, 0);
  return 0;
}
