// Shared memory: segments never outlive a job, and a rank that dies in the
// middle of a shared-memory collective is reported, not waited for.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "harness/spawn.h"
#include "shm/futex.h"
#include "shm/segment.h"
#include "shm/shm_group.h"

namespace tutti::testing {
namespace {

TEST(Shm, SegmentsAreUnlinkedOnceMapped) {
  const std::string prefix = shm_prefix_for("unlinked");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  spawn(
      4,
      [&](Communicator& world) {
        float v = 1;
        world.all_reduce(&v, &v, 1, DataType::Float32, ReduceOp::SUM);  // maps the world's segment
        EXPECT_EQ(v, 4.f);
        auto half = world.split(world.rank() / 2, 0);
        half->barrier();  // and the split's
        world.barrier();
        // Every member has mapped both: no name is left while the job still runs.
        for (const auto& name : shm_segments(prefix)) ADD_FAILURE() << "left in /dev/shm while the job runs: " << name;
      },
      o);
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// Whether the page holding p is in this process's page table
// (/proc/self/pagemap, bit 63; readable without privileges).
bool page_present(int pagemap, const void* p) {
  const std::uint64_t page = reinterpret_cast<std::uintptr_t>(p) / 4096;
  std::uint64_t entry = 0;
  if (::pread(pagemap, &entry, sizeof entry, static_cast<off_t>(page * sizeof entry)) != sizeof entry) return false;
  return (entry >> 63) & 1;
}

// A group maps in the control lines and the ring, where operations of up to
// 8 KiB travel, on every member for every member's area, when it is created:
// otherwise the first operations each pay the page faults (on 4 ranks
// sharing 2 cores, the first 16-22 all_gathers of 8 KiB blocks took 100-600
// us each instead of 2-15).
TEST(Shm, ControlLinesAndRingAreMappedInAtCreation) {
  const std::string prefix = shm_prefix_for("mapped");
  spawn(3, [&](Communicator& world) {
    detail::ShmGroup g("/" + prefix + "-group", world.rank(), world.size(), 64 << 10,
                       detail::Clock::now() + std::chrono::seconds(30), nullptr);
    const int pagemap = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    ASSERT_GE(pagemap, 0);
    using Space = detail::ShmGroup::Space;
    for (int r = 0; r < world.size(); ++r) {
      for (std::uint64_t k = 0; k < 64; ++k)
        EXPECT_TRUE(page_present(pagemap, g.input(r, k, Space::Line))) << "rank " << r << "'s control line " << k;
      for (std::uint64_t k = 0; k < 16; ++k) {
        const char* slot = g.input(r, k, Space::Ring);
        for (std::size_t off : {std::size_t{0}, std::size_t{4096}, detail::ShmGroup::kRingBytes - 1})
          EXPECT_TRUE(page_present(pagemap, slot + off)) << "rank " << r << "'s ring slot " << k << " byte " << off;
      }
    }
    ::close(pagemap);
  });
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// ShmGroup::and_over_members, the round that barriers and the group's own
// agreements use: every member gets the AND of every member's flags, and
// none returns before every member has called it, whether members wait for
// each other (flat) or meet at member 0 (above flat_members_max). Members
// come late by a random 0-300 us in some rounds.
TEST(Shm, AgreementsAreRightAndNoMemberLeavesEarly) {
  const std::string prefix = shm_prefix_for("agree");
  for (const int flat_max : {64, 1}) {
    spawn(5, [&](Communicator& world) {
      const int r = world.rank(), n = world.size();
      detail::ShmGroup g("/" + prefix + "-" + std::to_string(flat_max), r, n, 64 << 10,
                         detail::Clock::now() + std::chrono::seconds(60), nullptr);
      detail::ShmThresholds t;
      t.flat_members_max = flat_max;
      g.set_thresholds(t);
      constexpr int kRounds = 300;
      auto flags_of = [](int rank, int round) {
        std::mt19937_64 rng(static_cast<std::uint64_t>(round) * 977 + static_cast<std::uint64_t>(rank));
        return rng() | rng();  // mostly ones: ANDs of 5 that are not all zero
      };
      std::mt19937 late(99u + static_cast<unsigned>(r));
      std::vector<std::int64_t> arrived(kRounds), left(kRounds);
      auto now_ns = [] {
        return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count();
      };
      int nonzero = 0;
      for (int i = 0; i < kRounds; ++i) {
        if (late() % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(late() % 300));
        std::uint64_t want = ~std::uint64_t{0};
        for (int p = 0; p < n; ++p) want &= flags_of(p, i);
        arrived[static_cast<std::size_t>(i)] = now_ns();
        const std::uint64_t got = g.and_over_members(flags_of(r, i));
        left[static_cast<std::size_t>(i)] = now_ns();
        ASSERT_EQ(got, want) << "round " << i << " with flat_members_max " << flat_max;
        nonzero += want != 0;
      }
      EXPECT_GT(nonzero, kRounds / 2);
      // Every member's arrival and departure times (one clock: one host).
      std::vector<std::int64_t> all_arrived(static_cast<std::size_t>(n * kRounds)), all_left(all_arrived.size());
      world.all_gather(arrived.data(), all_arrived.data(), kRounds, DataType::Int64);
      world.all_gather(left.data(), all_left.data(), kRounds, DataType::Int64);
      for (int i = 0; i < kRounds; ++i) {
        std::int64_t last_in = 0, first_out = INT64_MAX;
        for (int p = 0; p < n; ++p) {
          last_in = std::max(last_in, all_arrived[static_cast<std::size_t>(p * kRounds + i)]);
          first_out = std::min(first_out, all_left[static_cast<std::size_t>(p * kRounds + i)]);
        }
        ASSERT_GE(first_out, last_in) << "round " << i << ": a member left before the last arrived";
      }
    });
  }
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// Above flat_members_max (64) members, a barrier meets at member 0 and a
// one-shot all_reduce is a reduce to member 0 and a broadcast: 72 ranks on
// one host run both, and a half of them (36, flat) too; every element is
// checked, sums exactly.
TEST(Shm, SeventyTwoRanksReduceAndMeet) {
  const std::string prefix = shm_prefix_for("large");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  spawn(
      72,
      [&](Communicator& world) {
        auto check = [](Communicator& c, int salt) {
          const int n = c.size(), r = c.rank();
          auto value = [&](int rank, std::size_t i) {  // splitmix64 of (salt, rank, i)
            std::uint64_t z = (static_cast<std::uint64_t>(salt) << 48) + (static_cast<std::uint64_t>(rank) << 32) + i;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull + 0x9e3779b97f4a7c15ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            return static_cast<std::int64_t>((z ^ (z >> 31)) % 2000001) - 1000000;
          };
          // Up to 2,048 elements: 16 KiB, the one-shot limit (TUTTI_SHM_ONESHOT_BYTES).
          for (const std::size_t count : {std::size_t{1}, std::size_t{29}, std::size_t{300}, std::size_t{2048}}) {
            std::vector<std::int64_t> sum(count), mx(count);
            std::vector<double> avg(count);
            for (std::size_t i = 0; i < count; ++i) {
              sum[i] = mx[i] = value(r, i);
              avg[i] = static_cast<double>(value(r, i)) / 4;
            }
            c.barrier();
            c.all_reduce(sum.data(), sum.data(), count, DataType::Int64, ReduceOp::SUM);
            c.all_reduce(mx.data(), mx.data(), count, DataType::Int64, ReduceOp::MAX);
            c.all_reduce(avg.data(), avg.data(), count, DataType::Float64, ReduceOp::AVG);
            for (std::size_t i = 0; i < count; ++i) {
              std::int64_t want_sum = 0, want_max = INT64_MIN;
              for (int p = 0; p < n; ++p) {
                want_sum += value(p, i);
                want_max = std::max(want_max, value(p, i));
              }
              ASSERT_EQ(sum[i], want_sum) << n << " ranks, " << count << " elements, element " << i;
              ASSERT_EQ(mx[i], want_max) << n << " ranks, " << count << " elements, element " << i;
              const double want_avg = static_cast<double>(want_sum) / 4 / n;
              ASSERT_NEAR(avg[i], want_avg, 1e-9 * std::max(1.0, std::abs(want_avg)))
                  << n << " ranks, " << count << " elements, element " << i;
            }
          }
        };
        check(world, 1);
        auto half = world.split(world.rank() % 2, world.rank());
        check(*half, 2 + world.rank() % 2);
        world.barrier();
      },
      o);
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// A waiter on a shared CPU yields to the members bound to the same CPU
// until they have all reached the point it waits at; from then on it may
// spin a while (ShmGroup::cpu_mates_reached). This checks that predicate:
// ranks 0 and 1 share a CPU, rank 2 has another where two are allowed; then
// rank 1 unbinds itself.
TEST(Shm, MembersKnowWhenTheirCpuMatesHaveReachedARound) {
  const std::string prefix = shm_prefix_for("mates");
  spawn(3, [&](Communicator& world) {
    cpu_set_t allowed;
    ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
    std::vector<int> cpus;
    for (int i = 0; i < CPU_SETSIZE; ++i)
      if (CPU_ISSET(i, &allowed)) cpus.push_back(i);
    const int r = world.rank();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(r == 2 ? cpus.back() : cpus.front(), &one);
    ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
    const auto deadline = detail::Clock::now() + std::chrono::seconds(30);
    {
      detail::ShmGroup g("/" + prefix + "-bound", r, world.size(), 64 << 10, deadline, nullptr);
      world.barrier();  // every member has said where it runs
      const std::uint64_t k = g.begin_round(detail::ShmGroup::Space::Line);
      const std::uint64_t input = 2 * k + 1, next = 2 * (k + 1) + 1;
      if (r != 1) g.publish_input(k);
      world.barrier();
      if (r == 0) {
        EXPECT_FALSE(g.cpu_mates_reached(input)) << "rank 1 shares its CPU and has not published";
      }
      world.barrier();
      if (r == 1) {
        EXPECT_TRUE(g.cpu_mates_reached(input)) << "rank 0 (and rank 2 where one CPU is allowed) published";
        EXPECT_FALSE(g.cpu_mates_reached(next)) << "rank 0 has not reached the next round";
        g.publish_input(k);
      }
      world.barrier();
      EXPECT_TRUE(g.cpu_mates_reached(input)) << "every member has published";
      if (r == 0) {
        EXPECT_FALSE(g.cpu_mates_reached(next)) << "rank 1 has not reached the next round";
      }
      for (int p = 0; p < world.size(); ++p)
        if (p != r) g.wait_input(p, k);
      world.barrier();
    }
    if (cpus.size() < 2) return;  // nobody can be unbound
    if (r == 1) {
      ASSERT_EQ(::sched_setaffinity(0, sizeof allowed, &allowed), 0);
    }
    detail::ShmGroup g("/" + prefix + "-unbound", r, world.size(), 64 << 10, deadline, nullptr);
    world.barrier();
    const std::uint64_t k = g.begin_round(detail::ShmGroup::Space::Line);
    g.publish_input(k);
    for (int p = 0; p < world.size(); ++p)
      if (p != r) g.wait_input(p, k);
    EXPECT_FALSE(g.cpu_mates_reached(2 * k + 1)) << "rank 1 may run on any CPU, rank " << r << "'s too";
    world.barrier();
  });
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// A creator killed after it made a segment that the other members never
// came to (their group failed first) leaves its name: the survivors' sweep
// (SharedSegment::remove_orphans, run by shrink) takes it away, and only it:
// a segment whose creator lives stays, as does another job's.
TEST(Shm, OrphanedSegmentsOfDeadCreatorsAreRemoved) {
  const std::string prefix = shm_prefix_for("orphan");
  const std::string job = "/" + prefix + "-00000000000000a1-";
  const std::string orphan = job + "0000000000000001", live = job + "0000000000000002";
  const std::string other_job = "/" + prefix + "-00000000000000b2-0000000000000001";
  const auto deadline = detail::Clock::now() + std::chrono::seconds(30);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  std::vector<pid_t> children;
  for (const std::string& name : {orphan, other_job}) {
    const pid_t child = ::fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      detail::SharedSegment seg(name, 0, 2, 64 << 10, 7, deadline);
      const char c = 1;
      if (::write(ready[1], &c, 1) != 1) ::_exit(2);
      ::pause();
      ::_exit(0);
    }
    children.push_back(child);
    char c = 0;
    ASSERT_EQ(::read(ready[0], &c, 1), 1);
  }
  for (pid_t child : children) {
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
  }
  ::close(ready[0]);
  ::close(ready[1]);
  {
    detail::SharedSegment mine(live, 0, 2, 64 << 10, 7, deadline);  // its creator (this process) lives
    EXPECT_EQ(shm_segments(prefix).size(), 3u);
    EXPECT_EQ(detail::SharedSegment::remove_orphans(job), 1);
    const std::set<std::string> left = shm_segments(prefix);
    EXPECT_EQ(left, (std::set<std::string>{live.substr(1), other_job.substr(1)}));
    EXPECT_EQ(detail::SharedSegment::remove_orphans(job), 0);
    mine.abandon();  // takes its name away
  }
  ::shm_unlink(other_job.c_str());
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// Nanoseconds the calling thread has spent runnable but waiting for a CPU
// (/proc/thread-self/schedstat, second field): how long a busy machine
// has kept it from running.
std::int64_t run_queue_ns() {
  std::FILE* f = std::fopen("/proc/thread-self/schedstat", "r");
  if (f == nullptr) return 0;
  long long on_cpu = 0, waiting = 0;
  const int got = std::fscanf(f, "%lld %lld", &on_cpu, &waiting);
  std::fclose(f);
  return got == 2 ? waiting : 0;
}

// A thread that wakes every millisecond and notes each gap of 10 ms or
// more between its wake-ups: times its process went unserved without a
// run queue to show it (the host stalling the machine).
class StallWatch {
 public:
  StallWatch()
      : thread_([this] {
          auto last = detail::Clock::now();
          while (!stop_.load()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
            const auto now = detail::Clock::now();
            if (now - last >= std::chrono::milliseconds(10)) {
              std::lock_guard lock(mutex_);
              gaps_.emplace_back(last.time_since_epoch().count(), now.time_since_epoch().count());
            }
            last = now;
          }
        }) {}
  ~StallWatch() {
    stop_.store(true);
    thread_.join();
  }
  // Nanoseconds of [begin, end) in the gaps.
  std::int64_t within(std::int64_t begin, std::int64_t end) {
    std::lock_guard lock(mutex_);
    std::int64_t sum = 0;
    for (auto [g0, g1] : gaps_) sum += std::max<std::int64_t>(0, std::min(g1, end) - std::max(g0, begin));
    return sum;
  }

 private:
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::vector<std::pair<std::int64_t, std::int64_t>> gaps_;  // never overlapping
  std::thread thread_;
};

// Members publish without a fence once every member runs membarrier before
// it sleeps (ShmGroup::publish). Here each round's publisher is late by a
// random 100-400 us, around the 200 us a waiter yields before it sleeps on
// the futex, so that publications land before, during and after waiters go
// to sleep. A missed wake-up leaves the waiter asleep until its sleep's
// limit, 100 ms after it began to wait: every waiter must be back within
// 50 ms of the publication, less the time a busy machine kept it from
// running (its run queue time and the stalls of its process). Two ranks:
// groups with more members than the host has cores keep the fence (on two
// cores three would). The race itself lasts nanoseconds, too short for a
// test to hit on purpose; this checks that sleepers are woken throughout.
TEST(Shm, PublishersWithoutAFenceWakeEverySleeper) {
  const std::string prefix = shm_prefix_for("light");
  spawn(2, [&](Communicator& world) {
    const int r = world.rank(), n = world.size();
    detail::ShmGroup g("/" + prefix + "-group", r, n, 64 << 10, detail::Clock::now() + std::chrono::seconds(60),
                       nullptr);
    g.negotiate_cma(0);
    // Every process of the test can register, or none can; groups with more
    // members than cores keep the fence.
    EXPECT_EQ(g.light_publish(), detail::membarrier_registered() && !g.oversubscribed());
    std::mt19937 rng(1234u + static_cast<unsigned>(r));
    std::uniform_int_distribution<int> late_us(100, 400);
    constexpr int kRounds = 600;
    // Per round, as the publisher saw it: when it published.
    std::vector<std::int64_t> published(kRounds, 0);
    struct Wait {
      int round;
      std::int64_t begin, end, run_queue;
    };
    std::vector<Wait> waits;
    auto now_ns = [] { return detail::Clock::now().time_since_epoch().count(); };
    StallWatch watch;
    for (int i = 0; i < kRounds; ++i) {
      const std::uint64_t k = g.begin_round(detail::ShmGroup::Space::Line);
      const int publisher = i % n;
      if (r == publisher) {
        std::this_thread::sleep_for(std::chrono::microseconds(late_us(rng)));
        std::memcpy(g.input(r, k, detail::ShmGroup::Space::Line), &i, sizeof i);
        published[static_cast<std::size_t>(i)] = now_ns();
        g.publish_input(k);
      } else {
        g.publish_input(k);  // the others' rounds are there from the start
      }
      for (int p = 0; p < n; ++p) {
        if (p == r) continue;
        const std::int64_t q0 = run_queue_ns(), t0 = now_ns();
        g.wait_input(p, k);
        const std::int64_t t1 = now_ns(), q1 = run_queue_ns();
        if (p == publisher) {
          int got = -1;
          std::memcpy(&got, g.input(p, k, detail::ShmGroup::Space::Line), sizeof got);
          ASSERT_EQ(got, i) << "round " << i << " from rank " << p;
          waits.push_back({i, t0, t1, q1 - q0});
        }
      }
    }
    std::vector<std::int64_t> all(static_cast<std::size_t>(kRounds * n));
    world.all_gather(published.data(), all.data(), published.size(), DataType::Int64);
    int late_rounds = 0;
    for (const Wait& w : waits) {
      const std::int64_t at = all[static_cast<std::size_t>((w.round % n) * kRounds + w.round)];
      // Past the 5 us spin and the 200 us of yields: in the futex sleep.
      if (w.end - w.begin > 250000) ++late_rounds;
      const std::int64_t from = std::max(w.begin, at);
      const std::int64_t kept = w.run_queue + watch.within(from, w.end);
      EXPECT_LT(w.end - from - kept, 50000000)
          << "round " << w.round << ": a waiter slept through a publication (waited " << (w.end - w.begin) / 1000000
          << " ms, " << (w.end - at) / 1000000 << " ms from the publication, kept from running " << kept / 1000000
          << " ms)";
    }
    // Some waits must have reached the futex sleep, else this checked nothing.
    EXPECT_GT(late_rounds, 0);
  });
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// Broadcasts of up to 8 bytes travel in packed records, four rounds to a
// cache line (ShmGroup::publish_packed). A root runs up to 63 such rounds
// ahead of a receiver that sleeps, and no further; every byte of every
// round arrives, in order, while roots change, sizes change (1 to 8 bytes,
// and broadcasts of the ring and the data slots in between) and either side
// is late. On 2 ranks receivers spin on the records, on 3 (more ranks than
// this machine's cores, or as many) they may go straight to the control
// line's wait.
void check_packed_broadcasts(Communicator& world) {
  const int r = world.rank(), n = world.size();
  auto byte_of = [](int op, int rank, std::size_t j) {
    return static_cast<std::uint8_t>((op * 131 + rank * 17 + static_cast<int>(j) * 29 + 7) % 251 + 1);
  };
  // Every byte of broadcast `op` from `root` (1 to 8 bytes, or a larger one
  // every 13th); `late`: this rank first sleeps for a while.
  auto run = [&](int op, int root, bool late) {
    const std::size_t bytes = op >= 70 && op % 13 == 12 ? (op % 2 ? 1000 : 70000) : 1 + op % 8;
    std::vector<std::uint8_t> buf(bytes, 0);
    if (r == root) {
      for (std::size_t j = 0; j < bytes; ++j) buf[j] = byte_of(op, root, j);
    }
    if (late) std::this_thread::sleep_for(std::chrono::microseconds(300));
    world.broadcast(buf.data(), bytes, DataType::Int8, root);
    for (std::size_t j = 0; j < bytes; ++j) {
      ASSERT_EQ(buf[j], byte_of(op, root, j)) << "broadcast " << op << " from " << root << ", byte " << j;
    }
  };
  world.barrier();
  // The root runs ahead of a receiver that sleeps 300 ms: 40 broadcasts go
  // at once, the 70th waits for the receiver (at most 47 rounds ahead:
  // ShmGroup::begin_round_waiting).
  const auto t0 = std::chrono::steady_clock::now();
  if (r == 0) {
    for (int op = 0; op < 70; ++op) {
      run(op, 0, false);
      if (op == 39) {
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(200));
      }
    }
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250)) << "ran 70 rounds ahead";
  } else {
    if (r == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    for (int op = 0; op < 70; ++op) run(op, 0, false);
  }
  // Roots change every 400 broadcasts; now and then a rank is late.
  std::mt19937 rng(77u + static_cast<unsigned>(r));
  for (int op = 70; op < 3000; ++op) run(op, (op / 400) % n, rng() % 97 == 0);
  world.barrier();
}

TEST(Shm, PackedBroadcastsRunAheadBoundedAndArriveInOrder) {
  const std::string prefix = shm_prefix_for("packed");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  spawn(2, check_packed_broadcasts, o);
  spawn(3, check_packed_broadcasts, o);
  EXPECT_TRUE(shm_segments(prefix).empty());
}

TEST(Shm, KilledRankIsReportedAndNoSegmentIsLeft) {
  const std::string prefix = shm_prefix_for("killed");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  o.may_die = {2};
  o.op_timeout = std::chrono::seconds(60);
  spawn(
      3,
      [](Communicator& world) {
        std::vector<float> buf(4096, 1.f);
        for (int i = 0; i < 20; ++i)
          world.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::SUM);
        if (world.rank() == 2) ::raise(SIGKILL);
        auto t0 = std::chrono::steady_clock::now();
        try {
          for (int i = 0; i < 1000; ++i)
            world.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::MAX);
          ADD_FAILURE() << "all_reduce kept working without rank 2";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << e.what();
          EXPECT_NE(e.message().find("rank 2"), std::string::npos) << e.what();
          // Inside an all_reduce, or (when the loss was noticed between two
          // calls) at the next call.
          EXPECT_TRUE(e.message().find("all_reduce #") != std::string::npos ||
                      e.message().find("aborted earlier") != std::string::npos)
              << e.what();
        }
        EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
      },
      o);
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// A rank that leaves in order (returns, destroys its communicator, exits 0)
// before the group's first collective is named within a second on every rank
// that waits for it, on shared memory (its process is gone, though it never
// attached to the segment) and over TCP (its goodbye), not after the timeout.
TEST(Shm, ARankThatExitsCleanlyIsNamedWithinASecond) {
  for (const std::string mode : {"auto", "tcp"}) {
    SCOPED_TRACE(mode);
    const std::string prefix = shm_prefix_for("leaves");
    SpawnOptions o;
    o.env = transport_env(mode);
    o.env.emplace_back("TUTTI_SHM_PREFIX", prefix);
    o.op_timeout = std::chrono::seconds(20);
    spawn(
        3,
        [](Communicator& world) {
          if (world.rank() == 2) return;
          std::vector<float> buf(1024, 1.5f);
          const auto t0 = std::chrono::steady_clock::now();
          try {
            world.all_reduce(buf.data(), buf.data(), buf.size(), DataType::Float32, ReduceOp::SUM);
            ADD_FAILURE() << "all_reduce completed without rank 2";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << e.what();
            EXPECT_NE(e.message().find("rank 2"), std::string::npos) << e.what();
          }
          // (ThreadSanitizer slows the leaving rank's exit several times.)
          EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(kSanitized ? 3 : 1));
        },
        o);
    EXPECT_TRUE(shm_segments(prefix).empty());
  }
}

// Point-to-point through shared memory: a receiver waiting for a large
// message (read straight from the sender's memory) from a rank that dies
// gets PeerLost naming it, fast, and the job-wide segment is gone.
TEST(Shm, PointToPointFromAKilledRank) {
  const std::string prefix = shm_prefix_for("p2pkilled");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  o.may_die = {1};
  o.op_timeout = std::chrono::seconds(60);
  spawn(
      3,
      [](Communicator& world) {
        std::vector<float> buf(1 << 18, 2.f);
        // Works first: a large message each way between ranks 0 and 1.
        if (world.rank() < 2) {
          const int peer = 1 - world.rank();
          std::vector<float> in(buf.size());
          Work w = world.irecv(in.data(), in.size(), DataType::Float32, peer, 1);
          world.send(buf.data(), buf.size(), DataType::Float32, peer, 1);
          w.wait();
          EXPECT_EQ(in, buf);
        }
        world.barrier();
        if (world.rank() == 1) ::raise(SIGKILL);
        if (world.rank() == 0) {
          auto t0 = std::chrono::steady_clock::now();
          try {
            world.recv(buf.data(), buf.size(), DataType::Float32, 1, 2);
            ADD_FAILURE() << "recv from a dead rank returned";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << e.what();
            EXPECT_NE(e.message().find("rank 1"), std::string::npos) << e.what();
            // Inside the recv, or (when the loss was noticed before the call)
            // at the call.
            EXPECT_TRUE(e.message().find("recv #") != std::string::npos ||
                        e.message().find("aborted earlier") != std::string::npos)
                << e.what();
          }
          EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
        }
      },
      o);
  EXPECT_TRUE(shm_segments(prefix).empty());
}

}  // namespace
}  // namespace tutti::testing
