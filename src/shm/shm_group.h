#pragma once
// ShmGroup: one shared-memory segment per communicator whose members all
// share a host, and the synchronization every shared-memory collective uses.
//
// Layout: a header, then one area per rank: kLines control lines (a
// progress counter and a small inline payload each), a sleeper count, the
// pid, and two parities of an input slot and an output slot (slot_bytes
// each). Rank r writes only its own area; everyone reads everyone's.
//
// Protocol. Work is cut into rounds, numbered per communicator across
// operations, so every rank agrees on them. Round k uses slot parity k % 2
// and control line k % kLines. A rank publishes 2k+1 on the counter of line
// k % kLines when its input for round k is in place, 2k+2 when its output
// (if the algorithm has one) is in place. Before writing slot parity k % 2 a
// rank waits until every peer has published at least 2(k-1)+1: a peer that
// began round k-1 has finished reading round k-2, the last user of that
// parity. A round whose payload fits the inline line only waits for peers to
// have finished round k - kLines, the last user of that line, so a root may
// run several small rounds ahead. A rank that finds a peer has not finished
// the round it needs waits for a quarter of the lag more (see
// begin_round_waiting), so it runs at most kLines - kLines / 4 - 1 rounds
// ahead (47), kRing - kRing / 4 - 1 in the ring (11).
//
// Waiting spins briefly, yields the core for a while, then sleeps on a futex
// (the counter itself), so oversubscribed ranks give their core away. A
// waiter also checks that the peer process still exists, and fails with
// PeerLost when it does not.
//
// Lifetime. Comm rank 0 creates the segment, every member maps it, and the
// last one to map it unlinks the name, so nothing stays in /dev/shm even if
// ranks are killed later. A member of a failed communicator removes the name
// when the group never completed.

#include <atomic>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "common/completion.h"
#include "common/thresholds.h"
#include "shm/segment.h"
#include "shm/shared_buffers.h"
#include "tutti/error.h"

namespace tutti::detail {

class ShmGroup {
 public:
  // Collective over the members (every member calls it). `name` must be the
  // same on every member and unique on the host.
  ShmGroup(const std::string& name, int rank, int size, std::size_t slot_bytes, TimePoint deadline,
           const std::atomic<bool>* abort_flag = nullptr, int creator_pid = 0, const std::string& creator = "rank 0");
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  // Each member's process, known before it attaches (the job's table): a
  // wait for a member that exited before it ever attached fails at once too.
  void set_member_pids(std::vector<int> pids) { member_pids_ = std::move(pids); }

  // Throws the failure another member recorded in the segment, if any. Run
  // at the end of every operation too: a member that was stopped (SIGSTOP)
  // may wake to find every input it needs published and finish the
  // operation the others already gave up on (Timeout); it must fail it too.
  void check_remote_failure();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::size_t slot_bytes() const { return slot_bytes_; }
  std::size_t mapped_bytes() const { return map_bytes_; }

  char* in_slot(int r, std::uint64_t round) const { return area(r) + kCtrlBytes + (round & 1) * 2 * slot_bytes_; }
  // Small payloads travel in the control line that carries the round's
  // counter (four cache lines): a reader of up to 40 bytes gets flag and
  // data in one transfer.
  static constexpr std::size_t kInlineBytes = 232;
  char* inline_slot(int r, std::uint64_t round) const { return ctrl(r)->line[round % kLines].data; }
  char* out_slot(int r, std::uint64_t round) const { return in_slot(r, round) + slot_bytes_; }
  // Payloads of up to kRingBytes may also travel in a ring of kRing slots
  // per rank (round k in slot k % kRing): such a round only waits for peers
  // to have finished round k - kRing, so a root may run kRing - kRing / 4 - 1
  // rounds of up to 8 KiB ahead of its readers, where the data slots' two parities
  // allow one.
  static constexpr int kRing = 16;
  static constexpr std::size_t kRingBytes = 8192;
  char* ring_slot(int r, std::uint64_t round) const {
    return area(r) + kCtrlBytes + 4 * slot_bytes_ + (round % kRing) * kRingBytes;
  }
  // Where a round's payload travels: its control line, the ring or the data
  // slots (cut to slot_bytes), by size.
  enum class Space : std::uint8_t { Line, Ring, Slots };
  static Space space_for(std::size_t bytes) {
    return bytes <= kInlineBytes ? Space::Line : bytes <= kRingBytes ? Space::Ring : Space::Slots;
  }
  std::uint64_t begin_round(Space s) {
    return begin_round_lag(s == Space::Line ? kLines : s == Space::Ring ? kRing : 2);
  }
  // Rank r's input of round k in space s.
  char* input(int r, std::uint64_t round, Space s) const {
    return s == Space::Line ? inline_slot(r, round) : s == Space::Ring ? ring_slot(r, round) : in_slot(r, round);
  }

  // Starts the next round and returns its number. A round that uses the
  // data slots waits until their parity is free (every peer began the
  // previous round); a round whose data fits its inline line only waits
  // until that line is free (every peer finished the round kLines earlier),
  // so a rank may run up to kLines - kLines / 4 - 1 small rounds ahead (a
  // broadcast root).
  std::uint64_t begin_round(bool uses_slots = true) { return begin_round_lag(uses_slots ? 2 : kLines); }
  // A round that may only overwrite what peers finished `lag` rounds ago.
  std::uint64_t begin_round_lag(std::uint64_t lag) {
    const std::uint64_t k = next_round_;
    // Every peer already seen to have begun round k - lag + 1: no read.
    if (k < lag || min_begun_seen_ > k - lag + 1) {
      next_round_ = k + 1;
      return k;
    }
    return begin_round_waiting(lag);
  }
  // This rank's input / output of the current round is in place.
  void publish_input(std::uint64_t round) { publish(2 * round + 1); }
  void publish_output(std::uint64_t round) { publish(2 * round + 2); }
  // Broadcasts of up to kPackedBytes also travel in a record of 16 bytes,
  // four rounds to a cache line (Ctrl::packed, round k in record k % kLines),
  // so that receivers behind a root that runs ahead get four rounds per line
  // transfer, and the root writes a line its readers last read once per four
  // rounds. The round still publishes its counter and signature on its
  // control line (for sleepers, later signature checks and flow control);
  // receivers read that line only when they must wait.
  static constexpr std::size_t kPackedBytes = 8;
  // The root of the current round (begun with Space::Line): puts `bytes`
  // (1..kPackedBytes) of `src` in this rank's record, then publishes its input.
  void publish_packed(std::uint64_t round, const void* src, std::size_t bytes);
  // A receiver of that round: waits for the root's record of `round` and
  // copies its `bytes` into `dst`. Same checks as wait_input(root, round).
  void wait_packed(int root, std::uint64_t round, void* dst, std::size_t bytes) {
    const std::uint64_t want = packed_stamp(round, bytes);
    const Packed& rec = ctrl(root)->packed[round % kLines];
    if (rec.stamp.load(std::memory_order_acquire) != want || !packed_previous_checked(root, round)) {
      wait_packed_slow(root, round, want);
    }
    const std::uint64_t d = rec.data.load(std::memory_order_relaxed);
    std::memcpy(dst, &d, bytes);
    packed_checked_peer_ = root;
    packed_checked_round_ = round;
  }
  // The stamp a record of `round` carries: the round (low 32 bits, plus one)
  // over the signature's kind / dtype / reduce op hash with the byte count
  // in its low four bits. A root is implied: only the rank that thinks itself
  // the root writes a record, and a receiver reads the record of the rank it
  // thinks is the root.
  std::uint64_t packed_stamp(std::uint64_t round, std::size_t bytes) const {
    const auto tag = (static_cast<std::uint32_t>(sig_ >> 32) & ~0xFu) | static_cast<std::uint32_t>(bytes);
    return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(round + 1)) << 32) | tag;
  }

  // One round in which every member brings `flags` and gets the AND of all
  // members' (collective; thresholds().flat_members_max says how they meet).
  // A barrier too: no member returns before every member has called it.
  std::uint64_t and_over_members(std::uint64_t flags);

  // Waits until peer's input / output of `round` is in place.
  // Both check that the peer's round belongs to an operation with the same
  // signature, else Mismatch naming both operations.
  void wait_input(int peer, std::uint64_t round) { wait_for(peer, 2 * round + 1, true); }
  void wait_output(int peer, std::uint64_t round) { wait_for(peer, 2 * round + 2, true); }

  // The running operation's signature: what must be equal on every member
  // (kind, dtype, reduce op, root) and its byte count (kAnyBytes where
  // members may differ, as in all_to_all_v). `describe` turns a signature
  // into words for the Mismatch message.
  static constexpr std::uint64_t kAnyBytes = ~std::uint64_t(0);
  using DescribeSignature = std::string (*)(std::uint64_t sig, std::uint64_t bytes);
  void set_signature(std::uint64_t sig, std::uint64_t bytes, DescribeSignature describe) {
    sig_ = sig;
    sig_bytes_ = bytes;
    describe_sig_ = describe;
  }

  // This communicator failed here (not on purpose): every member's waits
  // fail with `kind` and this message within 100 ms, whatever they wait for.
  // The first failure wins.
  void broadcast_failure(ErrorKind kind, const std::string& message);

  // Each wait is bounded by this deadline (the running op's).
  void set_deadline(TimePoint d) { deadline_ = d; }
  // The same, for an op that began at tick `start` (common/ticks.h) and may
  // take `timeout`: the deadline is worked out only if a wait has to sleep,
  // which keeps clock reads off the latency path.
  void set_start(std::int64_t start, std::chrono::milliseconds timeout) {
    deadline_ = kLazyDeadline;
    start_tick_ = start;
    timeout_ = timeout;
  }
  // A sleeping waiter checks this flag at least every 100 ms and fails with
  // Aborted once it is set (Communicator::abort from another thread).
  void set_abort_flag(const std::atomic<bool>* flag) { abort_flag_ = flag; }
  // Prefix for error messages ("rank 2: all_reduce #5 (...): "), built only
  // when an error is raised.
  using Describe = std::string (*)(const void* arg);
  void set_context(Describe describe, const void* arg) {
    describe_ = describe;
    describe_arg_ = arg;
  }

  // The communicator failed: on destruction, remove the name if some member
  // never mapped the segment (it may never come). A healthy communicator
  // keeps the name until the last member maps it, even after this rank has
  // moved on: a slow member may still need the data published here.
  void abandon() {
    segment_.abandon();
    shared_.abandon();
  }

  // Memory every member can address (Communicator::alloc_shared).
  SharedBuffers& shared() { return shared_; }
  const SharedBuffers& shared() const { return shared_; }

  // How long (microseconds) a waiter spins before sleeping.
  static int spin_limit(int local_ranks);
  // More members than this host has cores.
  bool oversubscribed() const { return spins_ == 0; }
  // The sizes at which the collectives change the way they copy (the
  // planner's, set when the group is made).
  const ShmThresholds& thresholds() const { return thresholds_; }
  void set_thresholds(const ShmThresholds& t) { thresholds_ = t; }

  // Single copy between processes. Collective (every member calls it at the
  // same point, once, before the first collective): every member checks that
  // it may read and write every peer's memory with process_vm_readv and
  // process_vm_writev (same user, no
  // ptrace restriction, same PID namespace), and all agree. Afterwards
  // cma_min_bytes() is `min_bytes` if every member allows it and wants it
  // (min_bytes > 0), else SIZE_MAX. It also tells every member whether all
  // run membarrier_global() before they sleep; if so, each publishes its
  // later rounds without a fence (see publish()).
  void negotiate_cma(std::size_t min_bytes);
  std::size_t cma_min_bytes() const { return cma_min_bytes_; }
  // Whether this member publishes without a fence (negotiate_cma()).
  bool light_publish() const { return light_publish_; }
  // Whether negotiate_cma() agreed on single copy at some size.
  bool single_copy_agreed() const { return cma_agreed_ != SIZE_MAX; }
  // Copying through the segment only (on), or single copy as agreed (off),
  // for the operations that follow: a tuner times the two (algorithms/tuner.h).
  void set_copy_only(bool on) {
    cma_min_bytes_ = on ? SIZE_MAX : cma_agreed_;
    declined_ = false;
  }
  // Whether blocks of `bytes` go by single copy now. A collective asks once
  // its other conditions for single copy hold; in copy-only mode a block
  // that single copy would have taken is noted (declined()), so that an
  // operation is said to have copied only where the rules would not have.
  bool single_copy_for(std::size_t bytes) const {
    if (bytes >= cma_min_bytes_) return true;
    if (bytes >= cma_agreed_) declined_ = true;
    return false;
  }
  // Since set_copy_only: copying was chosen where single copy was agreed.
  bool declined() const { return declined_; }
  // Whether this rank is bound to one CPU and every other member bound to
  // it has reached `value` on its counter of that value's line (published
  // that input or output). A waiter for that value then spins rather than
  // yield to them: in these collectives a mate that reached the same point
  // can do little before members on other CPUs move on (it waits for them
  // too, or copies out what is there), and yielding passes the CPU around
  // among waiters, a context switch each. A mate that has work left loses
  // at most the 20 us the spin lasts. False where a member may run on
  // several CPUs (or has not said yet).
  bool cpu_mates_reached(std::uint64_t value) const;
  // Copies `bytes` from address `remote` of `peer`'s process into `dst`.
  // Fails with PeerLost if the peer has exited.
  void read_peer(int peer, void* dst, std::uint64_t remote, std::size_t bytes);
  // Copies `bytes` from `src` to address `remote` of `peer`'s process.
  void write_peer(int peer, std::uint64_t remote, const void* src, std::size_t bytes);

 private:
  static constexpr int kLines = 64;
  static constexpr std::size_t kCtrlBytes = kLines * 256 + 256 + kLines * 16;
  // Rounds k use line k % kLines: its counter carries the progress of those
  // rounds (the futex word), its data their inline payload.
  struct alignas(64) Line {  // four cache lines
    std::atomic<std::uint32_t> counter;
    std::uint32_t pad;
    // The signature of the operation the round belongs to (see
    // set_signature), written before the counter.
    std::atomic<std::uint64_t> sig, sig_bytes;
    char data[kInlineBytes];
  };
  // A packed round's record (publish_packed): data first, then the stamp.
  struct alignas(16) Packed {
    std::atomic<std::uint64_t> stamp;
    std::atomic<std::uint64_t> data;
  };
  struct Ctrl {
    alignas(64) Line line[kLines];
    alignas(64) Packed packed[kLines];
    alignas(64) std::atomic<std::uint32_t> sleepers;  // waiters sleeping on a counter
    std::int32_t pid;
    // 1 + the only CPU the rank may run on, 0 when it may run on several
    // (or has not said yet). Apart from `sleepers`, which waiters update.
    alignas(64) std::atomic<std::int32_t> cpu;
  };
  static std::atomic<std::uint32_t>& counter_for(Ctrl* c, std::uint64_t value) {
    return c->line[((value - 1) / 2) % kLines].counter;
  }
  char* area(int r) const { return base_ + SharedSegment::kHeaderBytes + r * area_bytes_; }
  Ctrl* ctrl(int r) const { return reinterpret_cast<Ctrl*>(area(r)); }
  // A member's process: as it wrote it on attaching, else the job's table.
  int peer_pid(int r) const {
    const std::int32_t pid = ctrl(r)->pid;
    if (pid > 0 || static_cast<std::size_t>(r) >= member_pids_.size()) return pid;
    return member_pids_[static_cast<std::size_t>(r)];
  }
  void publish(std::uint64_t value) {
    Ctrl* c = ctrl(rank_);
    Line& line = c->line[((value - 1) / 2) % kLines];
    // The round's input value (2k+1): an output may be published without it
    // (and_over_members' member 0).
    const auto input = static_cast<std::uint32_t>((value - 1) / 2 * 2 + 1);
    if ((value & 1) || line.counter.load(std::memory_order_relaxed) != input) {
      // A new round on this line: first a value between the old round's
      // and the new one's (reached for waiters of the old, not of the new),
      // so that check_previous_round never pairs the old counter with the
      // new signature.
      line.counter.store(input - 1, std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_release);
    }
    line.sig.store(sig_, std::memory_order_relaxed);
    line.sig_bytes.store(sig_bytes_, std::memory_order_relaxed);
    // Where every member runs membarrier_global() before it sleeps, a
    // compiler barrier suffices between the store and the sleepers' load;
    // otherwise a full fence (futex.h). The fence makes the publisher wait
    // for the line, which its peers read last, every round.
    if (light_publish_) {
      line.counter.store(static_cast<std::uint32_t>(value), std::memory_order_release);
      std::atomic_signal_fence(std::memory_order_seq_cst);
      if (c->sleepers.load(std::memory_order_relaxed) != 0) wake(line.counter);
    } else {
      line.counter.store(static_cast<std::uint32_t>(value), std::memory_order_seq_cst);
      if (c->sleepers.load(std::memory_order_seq_cst) != 0) wake(line.counter);
    }
  }
  static void wake(std::atomic<std::uint32_t>& counter);
  std::uint64_t begin_round_waiting(std::uint64_t lag);
  void copy_with_peer(int peer, void* local, std::uint64_t remote, std::size_t bytes, bool write);
  // The common cases (already reached, same signature) inline; waiting and
  // failing out of line.
  // `spun`: the caller spent the spin budget already (wait_packed_slow).
  void wait_for(int peer, std::uint64_t value, bool check = false, bool spun = false) {
    const auto target = static_cast<std::uint32_t>(value);
    if (static_cast<std::int32_t>(counter_for(ctrl(peer), value).load(std::memory_order_acquire) - target) < 0)
      wait_until_reached(peer, value, check, spun);
    if (check) {
      check_signature(peer, value);
      if (value > 2) check_previous_round(peer, (value - 1) / 2 - 1);
    }
  }
  void check_signature(int peer, std::uint64_t value) {
    const Line& line = ctrl(peer)->line[((value - 1) / 2) % kLines];
    const std::uint64_t sig = line.sig.load(std::memory_order_relaxed);
    const std::uint64_t bytes = line.sig_bytes.load(std::memory_order_relaxed);
    if (sig == sig_ && (bytes == sig_bytes_ || bytes == kAnyBytes || sig_bytes_ == kAnyBytes)) return;
    signature_mismatch(peer, sig, bytes, sig_, sig_bytes_, false);
  }
  // Having waited for a peer's round, its previous round must be the same
  // operation as this rank's previous round: an operation in which neither
  // read the other's rounds (a gather's sender against a scatter's root)
  // is caught at the next one that does. The peer may be overwriting that
  // line already (a root running ahead): publish() marks the counter first,
  // so a signature read between two equal counter reads is that round's.
  void check_previous_round(int peer, std::uint64_t round) {
    const Line& theirs = ctrl(peer)->line[round % kLines];
    const auto input = static_cast<std::uint32_t>(2 * round + 1);
    const std::uint32_t c = theirs.counter.load(std::memory_order_acquire);
    if (c - input > 1) return;  // a later round of that line
    const std::uint64_t sig = theirs.sig.load(std::memory_order_relaxed);
    const std::uint64_t bytes = theirs.sig_bytes.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (theirs.counter.load(std::memory_order_relaxed) != c) return;
    const Line& mine = ctrl(rank_)->line[round % kLines];
    const std::uint64_t my_sig = mine.sig.load(std::memory_order_relaxed);
    const std::uint64_t my_bytes = mine.sig_bytes.load(std::memory_order_relaxed);
    if (sig == my_sig && (bytes == my_bytes || bytes == kAnyBytes || my_bytes == kAnyBytes)) return;
    signature_mismatch(peer, sig, bytes, my_sig, my_bytes, true);
  }
  // A receiver that read `root`'s record of the previous round checked it
  // then: that round was the same operation on both. Otherwise the previous
  // round is checked on the root's control line.
  bool packed_previous_checked(int root, std::uint64_t round) const {
    return packed_checked_round_ + 1 == round && packed_checked_peer_ == root;
  }
  // The record is not there yet, or shows another operation, or the previous
  // round needs its check: wait on the control line as wait_input does (which
  // fails with Mismatch naming both operations), then read the record.
  void wait_packed_slow(int root, std::uint64_t round, std::uint64_t want);
  [[noreturn]] void signature_mismatch(int peer, std::uint64_t sig, std::uint64_t bytes, std::uint64_t my_sig,
                                       std::uint64_t my_bytes, bool previous);
  // `in_flow`: a wait for a peer's input or output of a round this rank is
  // in (not for a slot to come free), where CPU mates that reached the same
  // point may make the waiter spin (see cpu_mates_reached). `spun`: skip
  // the first phase, pure spinning (the caller did it).
  void wait_until_reached(int peer, std::uint64_t value, bool in_flow, bool spun = false);
  enum class WaitFailure { Timeout, Dead, Aborted };
  // Whether the communicator is aborted now or within a short grace period
  // (a peer that vanished may have left because of a failure elsewhere).
  bool abort_soon() const;
  [[noreturn]] void fail_wait(int peer, std::uint64_t value, WaitFailure why);

  int rank_, size_;
  std::size_t slot_bytes_, area_bytes_, map_bytes_;
  SharedSegment segment_;
  char* base_;
  std::uint64_t next_round_ = 0;
  // Per peer, 1 + the latest round it was seen to have begun: begin_round
  // reads a peer's counter only when this does not already show the lag it
  // needs (a root running ahead would otherwise fetch a line the peer keeps
  // writing at every round).
  std::vector<std::uint64_t> begun_seen_;
  std::vector<int> member_pids_;
  std::uint64_t min_begun_seen_ = 0;  // over the peers
  static constexpr TimePoint kLazyDeadline = TimePoint::min();
  TimePoint deadline_ = TimePoint::max();
  std::int64_t start_tick_ = 0;
  std::chrono::milliseconds timeout_{0};
  TimePoint deadline();
  const std::atomic<bool>* abort_flag_ = nullptr;
  Describe describe_ = nullptr;
  const void* describe_arg_ = nullptr;
  int spins_;
  int yield_us_;
  std::int32_t my_cpu_ = 0;  // as Ctrl::cpu
  // This rank runs membarrier_global() before it sleeps: its process is
  // registered and the group has no more members than the host has cores.
  bool sleeps_fenced_ = false;
  // Publish without a fence: every member fences before it sleeps (learnt
  // in negotiate_cma).
  bool light_publish_ = false;
  ShmThresholds thresholds_;
  std::size_t cma_min_bytes_ = SIZE_MAX;
  std::size_t cma_agreed_ = SIZE_MAX;  // what negotiate_cma() agreed
  mutable bool declined_ = false;      // see single_copy_for()
  std::uint64_t sig_ = 0, sig_bytes_ = kAnyBytes;
  // The last round whose packed record this rank read, and from whom.
  std::uint64_t packed_checked_round_ = ~std::uint64_t(0);
  int packed_checked_peer_ = -1;
  DescribeSignature describe_sig_ = nullptr;
  SharedBuffers shared_;
};

}  // namespace tutti::detail
