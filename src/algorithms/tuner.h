#pragma once
// A timed choice between two ways of running a collective, for the sizes
// where the better one depends on the network (where each applies:
// plan/planner.cc, Planner::configure; docs/tuning.md "Timed choice").
//
// - Network all_reduce (core/communicator.cc): recursive doubling sends the
//   whole message S at each of log2(n) steps (2S on 4 ranks), Rabenseifner
//   2S(n-1)/n in all (1.5S on 4) in twice the steps: on a fast link the
//   steps cost more than the bytes, on a slow one the bytes do. At 32 KiB
//   between 4 hosts, recursive doubling wins on unshaped veth and
//   Rabenseifner at 1 Gbit/s: no fixed cut fits both. Above 512 KiB up to
//   4 MiB, Rabenseifner (ahead on loopback) against the ring (ahead between
//   the test-bed's hosts at 2 MiB, level from 256 to 512 KiB).
//   bench/peers/netbed/compare.sh, PER=1, unshaped and --rate 1gbit, with
//   VARIANTS naming TUTTI_ALGO=all_reduce:recursive_doubling, :rabenseifner
//   and :ring; on loopback, TUTTI_TRANSPORT=tcp bench/peers/compare.py
//   all_reduce 4 with the same settings (docs/tuning.md "Timed choice").
// - Network broadcast, binomial against scatter + all_gather, and all_to_all,
//   Bruck against pairwise (plan/registry.cc, timed()): each pair trades
//   rounds for bytes, and where they cross depends on the link against the
//   CPUs (common/thresholds.h).
// - Two-level all_reduce (media/two_level.cc): one leader per host, or every
//   local rank with a slice; which is faster depends on the link, the cores
//   and the size alike.
// - Shared-memory collectives (media/shm_medium.h, ShmMedium::run): single
//   copy (process_vm_readv) against copying through the segment, whose
//   costs differ from machine to machine (Figure::Fastest below; the
//   members take the minimum of their figures instead of the sum).
//
// Per size class (bytes rounded up to a power of two), after one untimed
// operation of each, each epoch runs the two samples() times each (by
// Figure: alternately, or in runs) and times them; the next operation
// of the class first sums every member's mean time of each (two integers,
// exchanged inside that operation), and every member then runs the one
// whose sum is lower, unless it saves less than kMargin of the table's
// choice, until the epoch ends. Means, not medians: on a shaped link some
// operations queue at the shaper and take far longer than the median, and
// the mean is what a run of operations costs. Epochs grow fourfold up to
// kMaxQuiet operations, so a link whose speed changes is noticed, and in
// the long run the trials cost under 0.1% of the operations (a run of
// kRunSamples + 1 of the slower per epoch over the network); in a short run
// of 100 operations, eleven with the warm-up. Every member chooses alike:
// the choice depends on the summed figures only, and the communicator's
// operations run in the same order on every member.
//
// Not thread-safe: used by the thread that runs the communicator's
// operations (one at a time).

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace tutti::detail {

class Tuner {
 public:
  static constexpr int kSamples = 2;  // timed runs of each algorithm per epoch
  // With Figure::Fastest: in shared memory the operations right after a
  // switch run on caches the other path left: on 2 ranks at 4 MiB the
  // first single-copy all_reduces after copying ones are much slower than
  // single copy in a row (docs/tuning.md "Timed choice in shared memory";
  // TUTTI_LOG=debug prints each choice's figures from tuttirun -n 2
  // tutti-bench all_reduce -b 4M -e 4M), so each runs four in a row and the
  // fastest counts.
  static constexpr int kFastestSamples = 4;
  // With Figure::MeanAfterFirst: timed runs of each per epoch, after an
  // untimed one.
  static constexpr int kRunSamples = 4;
  int samples() const {
    return figure_ == Figure::Fastest ? kFastestSamples : figure_ == Figure::Mean ? kSamples : kRunSamples;
  }
  static constexpr std::uint64_t kFirstQuiet = 24;  // operations after the first choice
  static constexpr std::uint64_t kMaxQuiet = 6144;
  static constexpr double kMargin = 0.05;  // the other must be this much faster

  // Tunes sizes in (lo, hi] (bytes per rank) between alternatives 0 and 1;
  // the table's choice at a size (`preferred` of next() and decide()) stays unless the other
  // is kMargin faster.
  // What a member reports of each alternative's trials: their mean, or the
  // fastest of them (where a trial is slowed only by others' work, e.g. a
  // rank descheduled on a shared core: in shared memory one slow trial of
  // two can make a 32 KiB all_to_all pick the slower alternative; tuttirun
  // -n 2 tutti-bench all_to_all -b 32K -e 32K, tuned against
  // TUTTI_SHM_CMA_BYTES=0 and =128K).
  // MeanAfterFirst: each runs kRunSamples + 1 in a row, the first
  // untimed, and the mean of the others counts (where an alternative's
  // speed is a rhythm its operations fall into. Over the network: at
  // 32 KiB between 4 test-bed hosts at 1 Gbit/s, alternating single trials
  // choose recursive doubling for most of many runs, where Rabenseifner is
  // faster, and runs of five do not; bench/peers/netbed/compare.sh, PER=1,
  // MINB=MAXB=32K, ITERS=2000, TUTTI_LOG=debug; docs/tuning.md, "Timed
  // choice". Between the test-bed's hosts, recursive doubling over every
  // rank is faster than the leader form at 8 B when run in a row, but slow
  // right after the leader form's operations, so alternating trials would
  // choose the slower leader form;
  // bench/peers/netbed/compare.sh, PER=2, 8 B-16 KiB, against
  // VARIANTS="flat=TUTTI_ALGO=all_reduce:recursive_doubling").
  // SlowestRun: as MeanAfterFirst, but the members meet (a barrier:
  // Step::sync) before each run and the slowest member's mean counts, not
  // the sum. For a broadcast, whose root sends and goes on: back to back,
  // the root runs ahead by many operations, its data waits in the
  // receivers' sockets, and every member times a binomial tree far below
  // what the run takes, so that the members' sums choose it where scatter +
  // all_gather is faster; 4 test-bed hosts at 1 Gbit/s, 4 KiB,
  // bench/peers/netbed/compare.sh with TUTTI_LOG=debug (docs/tuning.md,
  // "Timed choice").
  // After a barrier the receiver last in line waits for each operation's
  // data as the run delivers it.
  enum class Figure { Mean, Fastest, MeanAfterFirst, SlowestRun };
  Tuner(std::size_t lo, std::size_t hi, Figure figure = Figure::Mean) : lo_(lo), hi_(hi), figure_(figure) {}

  bool covers(std::size_t bytes) const { return bytes > lo_ && bytes <= hi_; }

  struct Step {
    int algo = 0;        // valid unless `agree`
    bool timed = false;  // report its time with record()
    bool agree = false;  // combine means() among the members first (slowest()), then decide()
    bool sync = false;   // a barrier of the members first (Figure::SlowestRun)
  };
  // How the members' figures combine: summed, or their maximum (slowest()).
  bool slowest() const { return figure_ == Figure::SlowestRun; }
  // The next operation of `bytes` (covers(bytes) must hold). A class's
  // first two operations run `preferred` (the table's choice), then the
  // other, untimed: each pays for what is new to it at that size (page
  // faults, scratch, TCP windows of connections it is the first to use;
  // the ring's first 256 KiB operations take much longer than later ones,
  // as tutti-bench all_reduce -b 256K -e 256K -w 0 -n 1 against -w 10 with
  // TUTTI_ALGO=all_reduce:ring across hosts shows) and would bias its first
  // trial.
  Step next(std::size_t bytes, int preferred = 0);
  // The time of a timed step.
  void record(std::size_t bytes, int algo, std::int64_t ns);
  // This member's mean (or fastest, by Figure) time of each algorithm in
  // the epoch's trials (ns).
  std::array<std::int64_t, 2> means(std::size_t bytes) const;
  // The members' figures combined (their means summed; in shared memory
  // the least of their fastest): the algorithm to run now and until the
  // epoch ends. `preferred`: the table's choice for `bytes`.
  int decide(std::size_t bytes, const std::array<std::int64_t, 2>& sums, int preferred = 0);
  // The largest size of `bytes`' class (classes are (2^(k-1), 2^k]).
  static std::size_t class_hi(std::size_t bytes);
  // The algorithm chosen for `bytes`' class (-1 before the first choice).
  int chosen(std::size_t bytes) const;

  // One operation of `bytes` (covers(bytes) must hold), the whole step:
  // when the members agree, `sum(sums)` combines their figures in place (an
  // exchange inside this operation, the same on every member) and
  // `chosen(sums, algo)` hears the result; then `run(algo)`, timed and
  // recorded when it is a trial. Returns the algorithm run.
  // `sync()` is the members' barrier of a Step::sync.
  template <class Sum, class Chosen, class Run, class Sync>
  int step(std::size_t bytes, int preferred, Sum&& sum, Chosen&& chosen, Run&& run, Sync&& sync) {
    Step s = next(bytes, preferred);
    if (s.agree) {
      std::array<std::int64_t, 2> sums = means(bytes);
      sum(sums);
      s.algo = decide(bytes, sums, preferred);
      chosen(sums, s.algo);
    }
    if (s.sync) sync();
    const auto t0 = std::chrono::steady_clock::now();
    run(s.algo);
    if (s.timed)
      record(bytes, s.algo,
             std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count());
    return s.algo;
  }

  template <class Sum, class Chosen, class Run>
  int step(std::size_t bytes, int preferred, Sum&& sum, Chosen&& chosen, Run&& run) {
    return step(bytes, preferred, sum, chosen, run, [] {});
  }

  // For tests: nanoseconds added to every time this process records for
  // algorithm 0 and 1, so one member's timings can differ from the
  // others' (the choice must follow the members' sums, not one member).
  static void set_test_penalty(std::int64_t ns0, std::int64_t ns1);

 private:
  struct Class {
    std::uint64_t ops = 0;    // operations so far in this epoch
    std::uint64_t quiet = 0;  // operations after the choice in this epoch
    std::uint64_t epoch = 0;
    int warm = 0;  // untimed first operations run (one of each)
    int choice = -1;
    static constexpr int kMost = kFastestSamples > kRunSamples ? kFastestSamples : kRunSamples;
    std::array<std::array<std::int64_t, kMost>, 2> samples{};
    std::array<int, 2> taken{};
  };
  Class& at(std::size_t bytes);
  const Class* find(std::size_t bytes) const;
  std::size_t lo_, hi_;
  Figure figure_;
  std::array<std::unique_ptr<Class>, 65> classes_;  // by bit_width(bytes - 1)
  static std::array<std::atomic<std::int64_t>, 2> test_penalty_;
};

}  // namespace tutti::detail
