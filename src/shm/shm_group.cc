#include "shm/shm_group.h"

#include <sched.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

#include "common/log.h"
#include "common/process.h"
#include "common/ticks.h"
#include "shm/futex.h"
#include "tutti/error.h"

namespace tutti::detail {

namespace {
// Members up to which a new group faults in the peers' control lines and
// rings as well as its own (ShmGroup's constructor).
constexpr int kFaultInPeersMax = 64;
}  // namespace
namespace {

std::size_t round_up(std::size_t v, std::size_t a) { return (v + a - 1) / a * a; }

}  // namespace

int ShmGroup::spin_limit(int local_ranks) {
  // Microseconds of pure spinning before yielding: enough for a peer that is
  // running on another core to finish a small step; none at all when there
  // are more ranks than cores (the peer most likely waits for our core). Beyond that the peer may
  // share our core (the scheduler often starts processes forked together on
  // one CPU), and only yielding lets it run.
  unsigned cores = std::thread::hardware_concurrency();
  if (cores == 0) cores = 1;
  return static_cast<unsigned>(local_ranks) > cores ? 0 : 5;
}

ShmGroup::ShmGroup(const std::string& name, int rank, int size, std::size_t slot_bytes, TimePoint deadline,
                   const std::atomic<bool>* abort_flag, int creator_pid, const std::string& creator)
    : rank_(rank),
      size_(size),
      slot_bytes_(round_up(std::max<std::size_t>(slot_bytes, 16 * size), 64)),
      area_bytes_(kCtrlBytes + 4 * slot_bytes_ + kRing * kRingBytes),
      map_bytes_(SharedSegment::kHeaderBytes + static_cast<std::size_t>(size) * area_bytes_),
      segment_(name, rank, size, map_bytes_, slot_bytes_, deadline, abort_flag, false, creator_pid, creator),
      base_(segment_.base()) {
  spins_ = spin_limit(size);
  begun_seen_.assign(static_cast<std::size_t>(size), 0);
  yield_us_ = 200;
  ctrl(rank)->pid = static_cast<std::int32_t>(::getpid());
  // Not where members outnumber the cores: there waits often end in a
  // sleep, and each membarrier interrupts the ranks running on the other
  // CPUs, which slows mid-size operations down markedly (tuttirun -n 8
  // tutti-bench all_reduce -b 128K -e 1M on 2 cores, against a build that
  // fences here too).
  sleeps_fenced_ = spins_ > 0 && membarrier_registered();
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) == 1) {
    for (int i = 0; i < CPU_SETSIZE; ++i) {
      if (CPU_ISSET(i, &set)) {
        my_cpu_ = i + 1;
        break;
      }
    }
  }
  ctrl(rank)->cpu.store(my_cpu_, std::memory_order_relaxed);
  // Fault the control lines and the ring in now (this rank's for writing,
  // the peers' for reading): otherwise the first rounds of the first
  // operations each pay page faults (64 lines are five pages per rank, the
  // ring 32). Without this, the ring's faults make the first couple of dozen
  // all_gathers of 8 KiB blocks on 4 ranks sharing 2 cores far slower than
  // warm ones (tuttirun -n 4 tutti-bench all_gather -b 32K -e 32K -w 0 -n 30
  // on 2 cores, against a build without it). The peers' pages only up to
  // kFaultInPeersMax members: beyond, n * 37 pages a rank, n^2 * 37 in all,
  // would dominate a large job's start (bench/startup/run.sh 512).
  auto fault_in = [this](std::size_t begin, std::size_t bytes) {
    for (int r = 0; r < size_; ++r) {
      if (r != rank_ && size_ > kFaultInPeersMax) continue;
      volatile char* a = area(r) + begin;
      for (std::size_t off = 0; off < bytes; off += 4096) {
        if (r == rank_)
          a[off] = a[off];
        else
          (void)a[off];
      }
      if (r == rank_)
        a[bytes - 1] = a[bytes - 1];
      else
        (void)a[bytes - 1];
    }
  };
  fault_in(0, kCtrlBytes);
  fault_in(ring_slot(0, 0) - area(0), kRing * kRingBytes);
}

ShmGroup::~ShmGroup() = default;

std::uint64_t ShmGroup::begin_round_waiting(std::uint64_t lag) {
  static_assert(sizeof(Ctrl) <= kCtrlBytes, "control block fits its reserved bytes");
  const std::uint64_t k = next_round_++;
  // Peers must have finished round `done` (published 2(done+1)+1, i.e. begun
  // round done+1), the last user of what this round overwrites.
  const std::uint64_t begun = k - lag + 1;
  std::uint64_t least = UINT64_MAX;
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    if (begun_seen_[p] <= begun) {
      // Wait until the peer has begun a quarter of the lag more: a rank
      // that runs ahead (a broadcast's root) would otherwise read that
      // peer's counter at every round once it is at the edge, a line
      // transfer each way per round (the peer then writes a line the reader
      // has just fetched), which makes small broadcasts on 2 ranks markedly
      // slower (tuttirun -n 2 tutti-bench broadcast -b 8 -e 8 -n 200000,
      // against a build without this wait). So such a rank runs at most
      // lag - lag / 4 - 1 rounds ahead. The peer reaches that round without
      // this rank: it lies before round k.
      const std::uint64_t value = 2 * (begun + lag / 4) + 1;
      wait_for(p, value);
      // The counter may show a later round (of that line): progress is
      // monotonic, so the peer has begun every round up to it.
      const std::uint32_t now = counter_for(ctrl(p), value).load(std::memory_order_acquire);
      const std::uint64_t reached = value + static_cast<std::uint32_t>(now - static_cast<std::uint32_t>(value));
      begun_seen_[p] = (reached - 1) / 2 + 1;
    }
    least = std::min(least, begun_seen_[p]);
  }
  min_begun_seen_ = least;
  return k;
}

void ShmGroup::wake(std::atomic<std::uint32_t>& counter) { futex_wake_all(&counter); }

TimePoint ShmGroup::deadline() {
  if (deadline_ == kLazyDeadline) deadline_ = deadline_from_ticks(start_tick_, timeout_);
  return deadline_;
}

void ShmGroup::wait_until_reached(int peer, std::uint64_t value, bool in_flow, bool spun) {
  Ctrl* c = ctrl(peer);
  std::atomic<std::uint32_t>& counter = counter_for(c, value);
  const auto target = static_cast<std::uint32_t>(value);
  auto reached = [&](std::uint32_t cur) { return static_cast<std::int32_t>(cur - target) >= 0; };
  // Spin for spins_ microseconds (the clock is read every 64 pauses: what a
  // pause costs differs widely from one CPU to another).
  if (reached(counter.load(std::memory_order_acquire))) return;
  const auto spin_until = Clock::now() + std::chrono::microseconds(spins_);
  for (unsigned i = 1; spins_ > 0 && !spun; ++i) {
    if (reached(counter.load(std::memory_order_acquire))) return;
    cpu_relax();
    if ((i & 63) == 0 && Clock::now() >= spin_until) break;
  }
  // Then yield for a while: with more ranks than cores the rank we wait for
  // is usually runnable, and handing it the core directly is much cheaper
  // than a futex sleep and wake-up. An idle core makes yield return at once,
  // so this phase is bounded in time too. But where every member bound to
  // this rank's CPU has reached this point of the operation too, spin
  // instead, for at most kMatesSpin of the phase (cpu_mates_reached). Not in
  // waits for a slot to come free: their value is an earlier round's, which
  // the mates passed long ago, busy or not.
  constexpr auto kMatesSpin = std::chrono::microseconds(20);
  const auto yield_start = Clock::now();
  const auto yield_until = yield_start + std::chrono::microseconds(yield_us_);
  const bool may_spin = in_flow && spins_ == 0 && my_cpu_ != 0;
  for (auto now = yield_start; now < yield_until; now = Clock::now()) {
    if (reached(counter.load(std::memory_order_acquire))) return;
    check_remote_failure();
    if (may_spin && now - yield_start < kMatesSpin && cpu_mates_reached(value)) {
      for (int i = 0; i < 64; ++i) {
        if (reached(counter.load(std::memory_order_acquire))) return;
        cpu_relax();
      }
      continue;
    }
    sched_yield();
  }
  while (true) {
    c->sleepers.fetch_add(1, std::memory_order_seq_cst);
    // The peer may have published without a fence (light_publish_ on its
    // side): this makes its store visible, or our increment to its load.
    if (sleeps_fenced_) membarrier_global();
    std::uint32_t cur = counter.load(std::memory_order_seq_cst);
    if (reached(cur)) {
      c->sleepers.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    // Sleep at most 100 ms at a time, to notice a dead peer and the deadline.
    const TimePoint limit = deadline();
    auto now = Clock::now();
    if (now >= limit) {
      c->sleepers.fetch_sub(1, std::memory_order_relaxed);
      fail_wait(peer, value, WaitFailure::Timeout);
    }
    futex_wait(&counter, cur, std::min<Clock::duration>(limit - now, std::chrono::milliseconds(100)));
    c->sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (reached(counter.load(std::memory_order_acquire))) return;
    check_remote_failure();
    if (abort_flag_ && abort_flag_->load()) fail_wait(peer, value, WaitFailure::Aborted);
    if (process_gone(peer_pid(peer))) fail_wait(peer, value, abort_soon() ? WaitFailure::Aborted : WaitFailure::Dead);
  }
}

void ShmGroup::publish_packed(std::uint64_t round, const void* src, std::size_t bytes) {
  Packed& rec = ctrl(rank_)->packed[round % kLines];
  std::uint64_t d = 0;
  std::memcpy(&d, src, bytes);
  rec.data.store(d, std::memory_order_relaxed);
  rec.stamp.store(packed_stamp(round, bytes), std::memory_order_release);
  publish_input(round);
}

void ShmGroup::wait_packed_slow(int root, std::uint64_t round, std::uint64_t want) {
  const Packed& rec = ctrl(root)->packed[round % kLines];
  auto check_previous = [&] {
    if (round > 0 && !packed_previous_checked(root, round)) check_previous_round(root, round - 1);
  };
  // Spin on the record, not on the control line: the root writes the line
  // too, and a line its reader keeps fetching costs the root a transfer.
  std::uint64_t stamp = rec.stamp.load(std::memory_order_acquire);
  bool spun = false;
  if (stamp != want && spins_ > 0 && (stamp >> 32) != (want >> 32)) {
    spun = true;
    const auto spin_until = Clock::now() + std::chrono::microseconds(spins_);
    for (unsigned i = 1; (stamp >> 32) != (want >> 32); ++i) {
      cpu_relax();
      if ((i & 63) == 0 && Clock::now() >= spin_until) break;
      stamp = rec.stamp.load(std::memory_order_acquire);
    }
  }
  if (stamp == want) {
    check_previous();
    return;
  }
  // Not there yet (sleep, deadline, lost peer, abort as every wait), or
  // another operation (Mismatch naming both, from the control line's
  // signature, which the root publishes after the record). A wait that
  // spun on the record goes on to yield at once: spinning on the line as
  // well would spend twice the budget a wait may spin, which slows small
  // operations where ranks share CPUs unseen (the test-bed's hosts, 2 ranks
  // each, on one VM's 2 CPUs: the two-level all_reduce at 4-8 B, whose
  // leader's broadcast is packed, against 16 B; bench/peers/netbed/compare.sh,
  // PER=2).
  wait_for(root, 2 * round + 1, true, spun);
  if (rec.stamp.load(std::memory_order_acquire) != want)
    throw Error(ErrorKind::Internal, "rank " + std::to_string(rank_) + ": rank " + std::to_string(root) +
                                         " published round " + std::to_string(round) +
                                         " of the same operation without its packed record");
}

bool ShmGroup::cpu_mates_reached(std::uint64_t value) const {
  if (my_cpu_ == 0) return false;
  const auto target = static_cast<std::uint32_t>(value);
  for (int p = 0; p < size_; ++p) {
    if (p == rank_) continue;
    Ctrl* c = ctrl(p);
    const std::int32_t cpu = c->cpu.load(std::memory_order_relaxed);
    if (cpu == 0) return false;  // unbound, or not known yet: it may share ours
    if (cpu != my_cpu_) continue;
    if (static_cast<std::int32_t>(counter_for(c, value).load(std::memory_order_acquire) - target) < 0) return false;
  }
  return true;
}

void ShmGroup::signature_mismatch(int peer, std::uint64_t sig, std::uint64_t bytes, std::uint64_t my_sig,
                                  std::uint64_t my_bytes, bool previous) {
  std::string prefix = describe_ ? describe_(describe_arg_) : "rank " + std::to_string(rank_) + ": ";
  if (previous) prefix += "the previous operation did not match: ";
  std::string theirs = describe_sig_ ? describe_sig_(sig, bytes) : "another operation";
  std::string mine = describe_sig_ ? describe_sig_(my_sig, my_bytes) : "this one";
  throw Error(ErrorKind::Mismatch, prefix + "rank " + std::to_string(peer) + " called " + theirs +
                                       " at the same point, where this rank called " + mine);
}

void ShmGroup::broadcast_failure(ErrorKind kind, const std::string& message) {
  SharedSegment::Failure* f = segment_.failure();
  std::uint32_t expected = 0;
  if (f->by.load(std::memory_order_acquire) != 0) return;
  // Claim it, then fill it in; readers wait for the kind to be set.
  if (!f->by.compare_exchange_strong(expected, static_cast<std::uint32_t>(size_ + 1) + 1)) return;
  f->kind = static_cast<std::uint32_t>(kind);
  std::snprintf(f->message, sizeof f->message, "%s", message.c_str());
  f->by.store(static_cast<std::uint32_t>(rank_) + 1, std::memory_order_release);
}

void ShmGroup::check_remote_failure() {
  SharedSegment::Failure* f = segment_.failure();
  const std::uint32_t by = f->by.load(std::memory_order_acquire);
  if (by == 0 || by > static_cast<std::uint32_t>(size_) || by == static_cast<std::uint32_t>(rank_) + 1) return;
  std::string prefix = describe_ ? describe_(describe_arg_) : "rank " + std::to_string(rank_) + ": ";
  throw Error(static_cast<ErrorKind>(f->kind), prefix + "rank " + std::to_string(by - 1) + " failed: " + f->message);
}

namespace {
// What negotiate_cma reads from each peer: a constant at a known address.
const std::uint64_t kCmaProbe = 0x4d43414954545554ull;  // "TUTTIACM"
// What it writes to each peer: a word nobody reads (peers write it at will).
std::uint64_t cma_write_probe;
}  // namespace

void ShmGroup::negotiate_cma(std::size_t min_bytes) {
  if (size_ == 1) return;
  // Round 1: publish where the probe lies; read the two ring neighbours'.
  // What stops one member reading or writing another's memory (another
  // user, a ptrace or seccomp rule) stops a neighbour too, and round 2
  // spreads every verdict: O(1) system calls and waits a member instead of
  // O(n).
  const std::uint64_t k = begin_round(false);
  const std::uint64_t addrs[2] = {reinterpret_cast<std::uint64_t>(&kCmaProbe),
                                  reinterpret_cast<std::uint64_t>(&cma_write_probe)};
  std::memcpy(inline_slot(rank_, k), addrs, sizeof addrs);
  publish_input(k);
  bool ok = min_bytes > 0;
  for (const int p : {(rank_ + 1) % size_, (rank_ + size_ - 1) % size_}) {
    wait_input(p, k);
    if (!ok) continue;
    std::uint64_t remote[2], value = 0;
    std::memcpy(remote, inline_slot(p, k), sizeof remote);
    iovec local_iov{&value, sizeof value}, remote_iov{reinterpret_cast<void*>(remote[0]), sizeof value};
    ok = ::process_vm_readv(ctrl(p)->pid, &local_iov, 1, &remote_iov, 1, 0) == sizeof value && value == kCmaProbe;
    // Writes are checked too (a seccomp filter may allow one and not the other).
    remote_iov.iov_base = reinterpret_cast<void*>(remote[1]);
    ok = ok && ::process_vm_writev(ctrl(p)->pid, &local_iov, 1, &remote_iov, 1, 0) == sizeof value;
    if (!ok)
      TUTTI_LOG(Debug, "single-copy reads and writes with rank "
                           << p << " not possible (" << std::strerror(errno)
                           << "); shared-memory collectives copy through the segment");
  }
  // Round 2: every member's verdict and whether it fences before it sleeps
  // (sleeps_fenced_); all must agree. After it every member's waits make
  // this rank's stores visible before they sleep, if all fence.
  const std::uint64_t all = and_over_members((ok ? 1u : 0u) | (sleeps_fenced_ ? 2u : 0u));
  light_publish_ = (all & 2) != 0;
  cma_agreed_ = cma_min_bytes_ = (all & 1) != 0 ? min_bytes : SIZE_MAX;
}

std::uint64_t ShmGroup::and_over_members(std::uint64_t flags) {
  const std::uint64_t k = begin_round(false);
  auto flags_of = [&](int p) {
    std::uint64_t v;
    std::memcpy(&v, inline_slot(p, k), sizeof v);
    return v;
  };
  if (size_ <= thresholds_.flat_members_max) {
    std::memcpy(inline_slot(rank_, k), &flags, sizeof flags);
    publish_input(k);
    for (int p = 0; p < size_; ++p) {
      if (p == rank_) continue;
      wait_input(p, k);
      flags &= flags_of(p);
    }
    return flags;
  }
  // Member 0 gathers, then publishes the AND as its output; the others wait
  // for that output alone (a counter they all sleep on, one wake-up).
  if (rank_ == 0) {
    for (int p = 1; p < size_; ++p) {
      wait_input(p, k);
      flags &= flags_of(p);
    }
    std::memcpy(inline_slot(0, k), &flags, sizeof flags);
    publish_output(k);
    return flags;
  }
  std::memcpy(inline_slot(rank_, k), &flags, sizeof flags);
  publish_input(k);
  wait_output(0, k);
  return flags_of(0);
}

void ShmGroup::read_peer(int peer, void* dst, std::uint64_t remote, std::size_t bytes) {
  copy_with_peer(peer, dst, remote, bytes, false);
}

void ShmGroup::write_peer(int peer, std::uint64_t remote, const void* src, std::size_t bytes) {
  copy_with_peer(peer, const_cast<void*>(src), remote, bytes, true);
}

void ShmGroup::copy_with_peer(int peer, void* local, std::uint64_t remote, std::size_t bytes, bool write) {
  char* d = static_cast<char*>(local);
  while (bytes > 0) {
    iovec local_iov{d, bytes}, remote_iov{reinterpret_cast<void*>(remote), bytes};
    ssize_t got = write ? ::process_vm_writev(ctrl(peer)->pid, &local_iov, 1, &remote_iov, 1, 0)
                        : ::process_vm_readv(ctrl(peer)->pid, &local_iov, 1, &remote_iov, 1, 0);
    if (got <= 0) {
      const int err = got < 0 ? errno : EIO;
      if (err == EINTR) continue;
      // The peer is gone or has left the operation (its buffer with it):
      // usually because of a failure elsewhere, which reaches this rank as an
      // abort within moments. Report that cause when it comes.
      if (abort_soon()) fail_wait(peer, 0, WaitFailure::Aborted);
      std::string prefix = describe_ ? describe_(describe_arg_) : "rank " + std::to_string(rank_) + ": ";
      if (err == ESRCH)
        throw Error(ErrorKind::PeerLost, prefix + "rank " + std::to_string(peer) + " (pid " +
                                             std::to_string(peer_pid(peer)) +
                                             ") exited before completing its part of a shared-memory step");
      throw Error(ErrorKind::Internal, prefix + (write ? "writing " : "reading ") + std::to_string(bytes) +
                                           (write ? " bytes to rank " : " bytes from rank ") + std::to_string(peer) +
                                           " failed: " + std::strerror(err));
    }
    d += got;
    remote += static_cast<std::uint64_t>(got);
    bytes -= static_cast<std::size_t>(got);
  }
}

bool ShmGroup::abort_soon() const {
  const auto until = Clock::now() + std::chrono::milliseconds(300);
  while (true) {
    if (abort_flag_ && abort_flag_->load()) return true;
    if (Clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ShmGroup::fail_wait(int peer, std::uint64_t value, WaitFailure why) {
  std::string prefix = describe_ ? describe_(describe_arg_) : "rank " + std::to_string(rank_) + ": ";
  if (why == WaitFailure::Aborted)
    throw Error(ErrorKind::Aborted,
                prefix + "the communicator was aborted while waiting for rank " + std::to_string(peer));
  if (why == WaitFailure::Dead)
    throw Error(ErrorKind::PeerLost, prefix + "rank " + std::to_string(peer) + " (pid " +
                                         std::to_string(peer_pid(peer)) +
                                         ") exited before completing its part of a shared-memory step");
  throw Error(ErrorKind::Timeout, prefix + "Timed out waiting for rank " + std::to_string(peer) +
                                      " in a shared-memory step (round " + std::to_string(value / 2) +
                                      "); that rank did not take part in time");
}

}  // namespace tutti::detail
