// The correctness checks of the multi-rank suite, run by every rank of a job
// that tuttirun started across the hosts of the test-bed (tests/netbed):
//
//   tuttirun --hosts h0:2,h1:2,... --exec-prefix "bash netbed.sh exec {host}"
//            --master-addr 198.18.0.1 tutti_netbed_suite
//
// Each rank joins the job once (tutti::init from RANK, WORLD_SIZE,
// MASTER_ADDR, ...) and runs the gtest cases below on that communicator, in
// the same order on every rank; any failed check fails the rank, and with it
// the job. The checks are those of tests/multirank (collective_checks.h):
// every element of every output compared with a reference each rank computes
// itself.
#include <gtest/gtest.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "multirank/collective_checks.h"
#include "reduce/reduce.h"
#include "reduce/reproducible.h"
#include "tutti/tutti.h"

namespace tutti::testing {
namespace {

Communicator* g_world = nullptr;

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// Host names of every rank, gathered from every rank.
std::vector<std::string> host_names(Communicator& comm) {
  char mine[64] = {0};
  ::gethostname(mine, sizeof mine - 1);
  std::vector<char> all(64 * static_cast<std::size_t>(comm.size()));
  comm.all_gather(mine, all.data(), 64, DataType::UInt8);
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.emplace_back(all.data() + 64 * r);
  return out;
}

// The ranks sit where tuttirun put them: LOCAL_WORLD_SIZE ranks per host,
// node by node; tutti tells the hosts apart by itself (hostname, boot id,
// IPC namespace), not only from LOCAL_RANK.
TEST(Netbed, RanksKnowTheirHosts) {
  Communicator& world = *g_world;
  const int n = world.size(), r = world.rank();
  const int per_host = env_int("LOCAL_WORLD_SIZE", 1);
  const int node = env_int("GROUP_RANK", 0);
  ASSERT_EQ(n % per_host, 0);
  std::vector<std::string> names = host_names(world);
  std::set<std::string> distinct(names.begin(), names.end());
  EXPECT_EQ(static_cast<int>(distinct.size()), n / per_host);
  for (int p = 0; p < n; ++p) EXPECT_EQ(names[p] == names[r], p / per_host == node) << "rank " << p;
  // A copy of the world computes local rank and size from the hosts it saw.
  std::vector<int> all(n);
  for (int i = 0; i < n; ++i) all[i] = i;
  std::optional<Communicator> copy = world.new_group(all);
  ASSERT_TRUE(copy.has_value());
  EXPECT_EQ(copy->local_size(), per_host);
  EXPECT_EQ(copy->local_rank(), r % per_host);
  if (r == 0) std::printf("netbed: %d ranks on %zu hosts\n", n, distinct.size());
}

constexpr std::size_t kChunkBytes = 256;  // must match TUTTI_CHUNK_BYTES of the run

std::vector<std::size_t> small_counts(DataType dt) { return {0, 1, 7, kChunkBytes / dtype_size(dt) + 1}; }

// Every collective x dtype x reduce op x root x count on the world, across
// the hosts.
TEST(Netbed, EveryCollectiveAcrossHosts) {
  std::size_t cases = run_collective_sweep(*g_world, small_counts, 1000);
  if (g_world->rank() == 0) std::printf("netbed: world of %d: %zu cases\n", g_world->size(), cases);
  // Hosts with equal ranks each: all_reduce, broadcast, all_gather and
  // reduce_scatter ran in two levels (the flight record names the algorithm).
  g_world->all_reduce(&cases, &cases, 1, DataType::UInt64, ReduceOp::MAX);
  g_world->broadcast(&cases, 1, DataType::UInt64, 0);
  const std::string trace = g_world->trace_json();
  EXPECT_NE(trace.find("\"two_level\""), std::string::npos) << trace.substr(0, 2000);
}

// The same on sub-communicators: one per host (its ranks share memory) and
// one per local rank (one rank on each host).
TEST(Netbed, EveryCollectiveOnSubgroups) {
  Communicator& world = *g_world;
  const int per_host = env_int("LOCAL_WORLD_SIZE", 1);
  std::optional<Communicator> host = world.split(world.rank() / per_host, world.rank());
  ASSERT_TRUE(host.has_value());
  EXPECT_EQ(host->size(), per_host);
  EXPECT_EQ(host->local_size(), per_host);
  run_collective_sweep(*host, small_counts, 200000);
  std::optional<Communicator> across = world.split(world.rank() % per_host, world.rank());
  ASSERT_TRUE(across.has_value());
  EXPECT_EQ(across->size(), world.size() / per_host);
  EXPECT_EQ(across->local_size(), 1);
  run_collective_sweep(*across, small_counts, 300000);
}

// Larger messages through the chunked network pipelines.
TEST(Netbed, LargeMessages) {
  Communicator& comm = *g_world;
  const int n = comm.size();
  const std::size_t bytes = std::size_t(1) << 20;
  std::uint64_t id = 900000;
  for (DataType dt : {DataType::Float32, DataType::Int64}) {
    CaseInfo c;
    c.dtype = dt;
    c.count = bytes / dtype_size(dt) + 3;
    c.op = ReduceOpKind::Sum;
    c.id = ++id;
    check_all_reduce(comm, c);
    c.root = n - 1;
    c.id = ++id;
    check_reduce(comm, c);
    c.id = ++id;
    check_broadcast(comm, c);
    c.count = bytes / dtype_size(dt) / n + 1;
    c.id = ++id;
    check_all_gather(comm, c);
    c.id = ++id;
    check_reduce_scatter(comm, c);
    c.id = ++id;
    check_all_to_all(comm, c);
    c.id = ++id;
    check_gather(comm, c);
    c.id = ++id;
    check_scatter(comm, c);
  }
}

// Two-level all_to_all (equal blocks) on the world, whose ranks run host by
// host (the step across hosts receives in place), and on a copy of it whose
// ranks run local index by local index (every block placed from scratch);
// every element checked. all_to_all_v, and all_to_all above 8 KiB a peer
// (which runs as all_to_all_v), stay pairwise.
TEST(Netbed, TwoLevelAllToAll) {
  Communicator& world = *g_world;
  const int per_host = env_int("LOCAL_WORLD_SIZE", 1);
  const int hosts = world.size() / per_host;
  std::optional<Communicator> by_local = world.split(0, (world.rank() % per_host) * hosts + world.rank() / per_host);
  ASSERT_TRUE(by_local.has_value());
  std::uint64_t id = 960000;
  for (Communicator* comm : {&world, &*by_local}) {
    // Up to 8 KiB a peer in two levels (2,048 float32s), pairwise above.
    for (std::size_t count :
         {std::size_t(1), std::size_t(7), std::size_t(300), std::size_t(2048), std::size_t(64) << 10}) {
      for (DataType dt : {DataType::Float32, DataType::Int8}) {
        CaseInfo c;
        c.dtype = dt;
        c.count = count;
        c.id = ++id;
        check_all_to_all(*comm, c);
        c.id = ++id;
        check_all_to_all_v(*comm, c);
      }
    }
    const std::vector<std::string> algos = algorithms_in_trace(comm->trace_json(), "all_to_all");
    ASSERT_FALSE(algos.empty());
    for (const std::string& a : algos) EXPECT_EQ(a, "two_level");
    for (const std::string& a : algorithms_in_trace(comm->trace_json(), "all_to_all_v")) EXPECT_EQ(a, "pairwise");
  }
}

// Two-level all_reduce on both sides of the leader form's limit (128 KiB by
// default; check_netbed.py runs it again with TUTTI_TWO_LEVEL_LEADER_BYTES=1M).
TEST(Netbed, TwoLevelAllReduceAroundTheLeaderCut) {
  Communicator& comm = *g_world;
  std::uint64_t id = 950000;
  for (std::size_t bytes : {std::size_t(128) << 10, (std::size_t(128) << 10) + 8, std::size_t(256) << 10,
                            std::size_t(1) << 20, (std::size_t(1) << 20) + 8}) {
    for (auto [dt, op] :
         {std::pair{DataType::Float32, ReduceOpKind::Sum}, std::pair{DataType::Int64, ReduceOpKind::Max}}) {
      CaseInfo c;
      c.dtype = dt;
      c.count = bytes / dtype_size(dt);
      c.op = op;
      c.id = ++id;
      check_all_reduce(comm, c);
    }
  }
  const std::string trace = comm.trace_json();
  EXPECT_NE(trace.find("\"two_level\""), std::string::npos) << trace.substr(0, 2000);
}

// Two-level all_reduce large enough to go in pieces (slices of more than
// 512 KiB a rank: each piece's step across hosts overlaps the host's steps
// of its neighbours), with a short last piece and a tail of fewer elements
// than ranks per host; in place and not, blocking and not, Avg's final
// division, every element checked. Up to slices of 4 MiB the slices run
// whole or in pieces as timed (Hierarchy::pieces), above in pieces of an
// 8th or a 32nd of the slice as timed (Hierarchy::piece_size: the last two
// cases): each case runs twice, and the first operations of a size class
// run both ways (the table's, then the other, then trials of each in turn).
TEST(Netbed, TwoLevelAllReduceInPieces) {
  Communicator& comm = *g_world;
  std::uint64_t id = 960000;
  struct Case {
    DataType dt;
    ReduceOpKind op;
    std::size_t count;
    bool inplace, async;
  };
  const Case cases[] = {
      {DataType::Float32, ReduceOpKind::Sum, (std::size_t(4) << 20) / 4 + 3, false, false},
      {DataType::Int64, ReduceOpKind::Max, (std::size_t(6) << 20) / 8 + 1, true, false},
      {DataType::Float64, ReduceOpKind::Avg, (std::size_t(3) << 20) / 8 + 5, false, true},
      {DataType::BFloat16, ReduceOpKind::Sum, (std::size_t(2) << 20) / 2 + 7, true, true},
      {DataType::Float32, ReduceOpKind::Sum, (std::size_t(17) << 20) / 4 + 5, true, true},
      {DataType::Float64, ReduceOpKind::Avg, (std::size_t(12) << 20) / 8 + 3, false, false},
  };
  for (const Case& k : cases) {
    // Twice up to 8 MiB (a timed size's second run takes the other form,
    // the pieces tuner's at 6 MiB included), once above: the suite's
    // 256-byte chunks make these the suite's longest.
    const int runs = k.count * dtype_size(k.dt) <= (std::size_t(8) << 20) ? 2 : 1;
    for (int i = 0; i < runs; ++i) {
      CaseInfo c;
      c.dtype = k.dt;
      c.op = k.op;
      c.count = k.count;
      c.inplace = k.inplace;
      c.async = k.async;
      c.id = ++id;
      check_all_reduce(comm, c);
      if (::testing::Test::HasFailure()) return;
    }
  }
  const std::string trace = comm.trace_json();
  EXPECT_NE(trace.find("\"two_level\""), std::string::npos) << trace.substr(0, 2000);
}

// The timed choices (algorithms/tuner.h) across hosts, on by default: the
// two-level forms on the world (16 KiB to 1 MiB) and recursive doubling
// against Rabenseifner among one rank per host (8-64 KiB, also the leaders'
// and the slices' own all_reduce), through the first epoch and the next
// one's trials, every element checked.
TEST(Netbed, TunedAllReduceAcrossHosts) {
  Communicator& world = *g_world;
  const int per_host = env_int("LOCAL_WORLD_SIZE", 1);
  std::optional<Communicator> across = world.split(world.rank() % per_host, world.rank());
  ASSERT_TRUE(across.has_value());
  std::uint64_t id = 970000;
  const std::size_t sizes[] = {12004, 20000, 40000, 100000};
  for (int i = 0; i < 4 * 46; ++i) {
    CaseInfo c;
    c.dtype = i % 2 ? DataType::Float32 : DataType::Int64;
    c.count = sizes[i % 4] / dtype_size(c.dtype);
    c.op = i % 3 ? ReduceOpKind::Sum : ReduceOpKind::Max;
    c.async = i % 5 == 0;
    c.id = ++id;
    check_all_reduce(world, c);
    if (i % 4 != 3) {
      c.id = ++id;
      check_all_reduce(*across, c);
    }
    if (::testing::Test::HasFailure()) return;
  }
}

// Up to an eighth of the leader form's limit (16 KiB), the two-level
// all_reduce times its leader form against recursive doubling over every
// rank (Hierarchy::flat: runs of five of each, the first untimed), on by
// default: two size classes through the first epoch and the next one's
// trials, Avg's final division, in place and not, blocking and not, every
// element checked; the flight recorder shows both ran.
TEST(Netbed, SmallTwoLevelAllReduceTimedAgainstFlat) {
  Communicator& world = *g_world;
  std::uint64_t id = 990000;
  const std::size_t counts[] = {1, 301};  // 8 B and 2,408 B of 8-byte elements
  for (int i = 0; i < 2 * 50; ++i) {
    CaseInfo c;
    c.dtype = i % 4 < 2 ? DataType::Int64 : DataType::Float64;
    c.count = counts[i % 2];
    c.op = i % 3 == 0                                   ? ReduceOpKind::Max
           : c.dtype == DataType::Float64 && i % 3 == 1 ? ReduceOpKind::Avg
                                                        : ReduceOpKind::Sum;
    c.inplace = i % 5 == 0;
    c.async = i % 7 == 0;
    c.id = ++id;
    check_all_reduce(world, c);
    if (::testing::Test::HasFailure()) return;
  }
  const std::string trace = world.trace_json();
  EXPECT_NE(trace.find("\"recursive_doubling\""), std::string::npos) << trace.substr(0, 2000);
  EXPECT_NE(trace.find("\"two_level\""), std::string::npos) << trace.substr(0, 2000);
}

// Every ordered pair, blocking and not, and messages from any source.
// Reproducible sums across the hosts (two levels): every result is, bit for
// bit, the exact sum rounded once that each rank computes alone from all the
// contributions (detail::repro_sum, the function every medium and algorithm
// of the mode gives), whichever rank holds which contribution; float32,
// bfloat16, float64 and complex64, all_reduce, reduce and reduce_scatter,
// SUM and AVG, one element to past the gathered form's size.
TEST(Netbed, ReproducibleSumsAreTheExactSumRoundedOnce) {
  Communicator& comm = *g_world;
  const int n = comm.size(), r = comm.rank();
  comm.set_reproducible(true);
  const auto value = [](std::uint64_t id, int who, std::size_t i) {
    std::uint64_t z = id * 0x9e3779b97f4a7c15ull + static_cast<std::uint64_t>(who) * 0xbf58476d1ce4e5b9ull + i;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const double v = std::ldexp(1.0 + static_cast<double>(z % 1000003) / 1000003.0, static_cast<int>(z >> 58) - 32);
    return z >> 57 & 1 ? -v : v;
  };
  std::uint64_t id = 990000;
  for (DataType dt : {DataType::Float32, DataType::BFloat16, DataType::Float64, DataType::Complex64})
    for (int coll = 0; coll < 3; ++coll)
      for (std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{70001}}) {
        ++id;
        const std::size_t es = dtype_size(dt), in_count = coll == 2 ? count * n : count;
        const std::size_t reals = in_count * (dt == DataType::Complex64 ? 2 : 1);
        const ReduceOp op(id % 2 ? ReduceOpKind::Sum : ReduceOpKind::Avg);
        const int root = static_cast<int>(id % static_cast<std::uint64_t>(n));
        // Every contribution, as the dtype holds it.
        std::vector<std::vector<char>> held(n, std::vector<char>(in_count * es));
        for (int q = 0; q < n; ++q)
          for (std::size_t j = 0; j < reals; ++j) {
            const double v = value(id, q, j);
            char* at = held[q].data();
            if (dt == DataType::BFloat16) {
              const std::uint16_t b = detail::float_to_bfloat16(static_cast<float>(v));
              std::memcpy(at + 2 * j, &b, 2);
            } else if (dt == DataType::Float64) {
              std::memcpy(at + 8 * j, &v, 8);
            } else {
              const float f = static_cast<float>(v);
              std::memcpy(at + 4 * j, &f, 4);
            }
          }
        // The expected result, alone.
        std::vector<const void*> ins;
        for (int q = 0; q < n; ++q) ins.push_back(held[q].data());
        std::vector<char> want(in_count * es);
        detail::repro_sum(want.data(), ins.data(), n, in_count, dt, op.kind == ReduceOpKind::Avg);
        for (int how = 0; how < 2; ++how) {
          const int who = how == 0 ? r : n - 1 - r;
          std::vector<char> out(count * es, 0);
          if (coll == 0) {
            comm.all_reduce(held[who].data(), out.data(), count, dt, op);
          } else if (coll == 1) {
            comm.reduce(held[who].data(), out.data(), count, dt, op, root);
          } else {
            comm.reduce_scatter(held[who].data(), out.data(), count, dt, op);
          }
          if (coll == 1 && r != root) continue;
          const char* expect = want.data() + (coll == 2 ? static_cast<std::size_t>(r) * count * es : 0);
          ASSERT_EQ(std::memcmp(out.data(), expect, count * es), 0)
              << "rank " << r << ", case " << id << " (" << dtype_name(dt) << ", " << count << " elements, "
              << (coll == 0   ? "all_reduce"
                  : coll == 1 ? "reduce"
                              : "reduce_scatter")
              << ", arrangement " << how << "): not the exact sum rounded once";
        }
      }
  comm.set_reproducible(false);
  const std::string trace = comm.trace_json();
  EXPECT_NE(trace.find("\"algo\":\"reproducible\""), std::string::npos) << trace.substr(0, 2000);
}

TEST(Netbed, PointToPoint) {
  Communicator& comm = *g_world;
  const int n = comm.size(), r = comm.rank();
  CaseInfo c;
  c.dtype = DataType::Float64;
  for (int count : {0, 1, 5000, 300000}) {
    c.count = static_cast<std::size_t>(count);
    for (int src = 0; src < n; ++src) {
      for (int dst = 0; dst < n; ++dst) {
        if (src == dst) continue;
        c.id = 7000 + static_cast<std::uint64_t>(src * 64 + dst) + 100000u * count;
        if (r == src) {
          Buf b = input_of(c, src);
          comm.send(b.data(), c.count, c.dtype, dst, src * 64 + dst);
        } else if (r == dst) {
          Buf b = input_of(c, dst, 77);
          EXPECT_EQ(comm.recv(b.data(), c.count, c.dtype, src, src * 64 + dst), src);
          EXPECT_TRUE(b == input_of(c, src)) << "from " << src << " count " << count;
        }
      }
    }
  }
  c.count = 100000;
  c.id = 8001;
  Buf mine = input_of(c, r);
  Buf from_prev(mine.size()), from_next(mine.size());
  Work w1 = comm.irecv(from_prev.data(), c.count, c.dtype, (r + n - 1) % n, 1);
  Work w2 = comm.irecv(from_next.data(), c.count, c.dtype, (r + 1) % n, 2);
  Work s1 = comm.isend(mine.data(), c.count, c.dtype, (r + 1) % n, 1);
  Work s2 = comm.isend(mine.data(), c.count, c.dtype, (r + n - 1) % n, 2);
  for (Work* w : {&w1, &w2, &s1, &s2}) w->wait();
  EXPECT_TRUE(input_of(c, (r + n - 1) % n) == from_prev);
  EXPECT_TRUE(input_of(c, (r + 1) % n) == from_next);
  if (r == 0) {
    std::vector<bool> seen(n, false);
    for (int i = 1; i < n; ++i) {
      std::int64_t v = 0;
      int from = comm.recv(&v, 1, DataType::Int64, kAnySource, 9);
      ASSERT_GT(from, 0);
      EXPECT_EQ(v, 1000 + from);
      EXPECT_FALSE(seen[from]);
      seen[from] = true;
    }
  } else {
    std::int64_t v = 1000 + r;
    comm.send(&v, 1, DataType::Int64, 0, 9);
  }
  comm.barrier();
}

// ---- carrying on after a failure (check_netbed.py survive) ----------------------

std::int64_t wall_ns() {
  timespec t{};
  ::clock_gettime(CLOCK_REALTIME, &t);  // one clock for every namespace of the machine
  return static_cast<std::int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

// The ranks of the last host are killed between collectives in two levels;
// the survivors revoke, shrink within 2 s of the kill to a communicator of
// the other hosts, which is again two-level (hosts with equal ranks each),
// and pass the whole collective sweep on it. The victims write when they
// die to $TUTTI_NETBED_KILL_FILE.
TEST(NetbedSurvive, KillAHostThenShrinkToTwoLevel) {
  Communicator& world = *g_world;
  const int n = world.size(), per_host = env_int("LOCAL_WORLD_SIZE", 1);
  const char* kill_file = std::getenv("TUTTI_NETBED_KILL_FILE");
  ASSERT_NE(kill_file, nullptr);
  ASSERT_GE(n / per_host, 3);
  const bool victim = world.rank() >= n - per_host;
  std::int64_t t0 = 0;
  try {
    for (int round = 0; round < 1000; ++round) {
      if (victim && round == 3) {
        if (world.rank() == n - per_host)
          if (FILE* f = std::fopen(kill_file, "w")) {
            std::fprintf(f, "%lld\n", static_cast<long long>(wall_ns()));
            std::fclose(f);
          }
        ::raise(SIGKILL);
      }
      CaseInfo c;
      c.id = 7000 + static_cast<std::uint64_t>(round);
      c.dtype = DataType::Float32;
      c.count = 1 + static_cast<std::size_t>(round % 5) * 300;
      c.op = ReduceOp(ReduceOpKind::Sum);
      c.root = round % n;
      check_all_reduce(world, c);
      check_broadcast(world, c);
      check_all_gather(world, c);
      check_reduce_scatter(world, c);
    }
    ADD_FAILURE() << "1000 rounds without the last host";
    return;
  } catch (const Error& e) {
    t0 = wall_ns();
    ASSERT_TRUE(e.kind() == ErrorKind::PeerLost || e.kind() == ErrorKind::Revoked) << e.what();
  }
  EXPECT_NE(world.trace_json().find("\"two_level\""), std::string::npos);
  world.revoke();
  Communicator s = world.shrink();
  const std::int64_t shrunk = wall_ns();
  long long killed = 0;
  if (FILE* f = std::fopen(kill_file, "r")) {
    if (std::fscanf(f, "%lld", &killed) != 1) killed = 0;
    std::fclose(f);
  }
  ASSERT_NE(killed, 0);
  EXPECT_LT(shrunk - killed, 2000000000LL) << "shrunk " << (shrunk - killed) / 1000000 << " ms after the kill";
  ASSERT_EQ(s.size(), n - per_host);
  for (int r = 0; r < s.size(); ++r) EXPECT_EQ(s.world_ranks()[static_cast<std::size_t>(r)], r);
  const std::size_t cases = run_collective_sweep(s, small_counts, 9000);
  EXPECT_NE(s.trace_json().find("\"two_level\""), std::string::npos) << s.trace_json().substr(0, 2000);
  std::printf("survive: rank %d: error %.0f ms, shrunk %.0f ms after the kill; %zu cases on %d ranks after\n",
              world.rank(), (t0 - killed) / 1e6, (shrunk - killed) / 1e6, cases, s.size());
  s.barrier();  // nobody leaves before the others are done
}

}  // namespace
}  // namespace tutti::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  // --survive: the survival check alone (ranks are killed: no final
  // barrier on the world); otherwise everything else.
  const bool survive = argc > 1 && std::strcmp(argv[1], "--survive") == 0;
  std::string filter = ::testing::GTEST_FLAG(filter);
  ::testing::GTEST_FLAG(filter) =
      survive ? "NetbedSurvive.*" : filter + (filter.find('-') == std::string::npos ? "-" : ":") + "NetbedSurvive.*";
  tutti::Communicator world = tutti::init();
  tutti::testing::g_world = &world;
  int rc = RUN_ALL_TESTS();
  if (survive) return rc;
  // Every rank finishes its checks before any leaves: a rank that leaves
  // early would look like a lost peer to the others.
  try {
    world.barrier();
  } catch (const tutti::Error& e) {
    std::fprintf(stderr, "rank %d: final barrier: %s\n", world.rank(), e.what());
    rc = 1;
  }
  return rc;
}
