// Each network algorithm forced by TUTTI_ALGO, over TCP, on world sizes
// 1..8: counts {0, 1, 7, n-1, n+1, 3000, one past the chunk}, several dtypes,
// every valid reduce op, every root, in place and not, list and contiguous
// forms; every element checked against the reference. One launch per world
// size and override set, all cases inside.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <iterator>
#include <thread>

#include "algorithms/tuner.h"
#include "harness/spawn.h"
#include "multirank/collective_checks.h"

namespace tutti::testing {
namespace {

constexpr std::size_t kChunkBytes = 256;

// Override sets: each names at most one algorithm per collective; together
// they force every network algorithm the table can pick besides the ones
// the plain TCP sweep (test_collectives.cc) already reaches by default.
const char* const kOverrideSets[] = {
    "all_reduce:rabenseifner,broadcast:chain,reduce:chain,all_gather:bruck,reduce_scatter:recursive_halving,"
    "all_to_all:bruck",
    "all_reduce:ring,broadcast:scatter_all_gather,all_gather:recursive_doubling,reduce_scatter:ring",
};

#if defined(__SANITIZE_THREAD__)
// Under TSan two of them (collective_checks.h, swept_when_sanitized).
const DataType kDtypes[] = {DataType::Float32, DataType::Int8};
#elif defined(__SANITIZE_ADDRESS__)
// Under the sanitizers (scripts/test.sh's second stage) one dtype per element
// size: the schedules' memory accesses depend on sizes, not on the type, and
// the plain build runs all eight. The two largest worlds run one override
// set each (7 ranks the second, 8 the first); 1 to 5 ranks run both.
const DataType kDtypes[] = {DataType::Float32, DataType::Int8, DataType::BFloat16, DataType::Complex64};
#else
const DataType kDtypes[] = {DataType::Float32,  DataType::Float64, DataType::Int32, DataType::Int8,
                            DataType::BFloat16, DataType::Float16, DataType::Bool,  DataType::Complex64};
#endif

std::vector<std::size_t> counts_for(int n, DataType dt) {
  std::vector<std::size_t> c = {0,
                                1,
                                7,
                                static_cast<std::size_t>(n - 1),
                                static_cast<std::size_t>(n + 1),
                                3000,
                                kChunkBytes / dtype_size(dt) + 1};
  std::sort(c.begin(), c.end());
  c.erase(std::unique(c.begin(), c.end()), c.end());
  return c;
}

// all_to_all with sendbuf == recvbuf (the other checks use two buffers).
void check_all_to_all_in_place(Communicator& comm, const CaseInfo& c) {
  const int n = comm.size(), r = comm.rank();
  const std::size_t bytes = c.count * dtype_size(c.dtype);
  Buf buf = input_of(c, r, 0, c.count * n);
  comm.all_to_all(buf.data(), buf.data(), c.count, c.dtype);
  Buf want;
  for (int p = 0; p < n; ++p) {
    Buf theirs = input_of(c, p, 0, c.count * n);
    want.insert(want.end(), theirs.begin() + r * bytes, theirs.begin() + (r + 1) * bytes);
  }
  if (buf != want) ADD_FAILURE() << c.describe("all_to_all in place", r);
}

std::size_t run_cases(Communicator& comm, std::uint64_t id) {
  const int n = comm.size();
  std::size_t cases = 0;
  auto next = [&](DataType dt, std::size_t count) {
    CaseInfo c;
    c.id = ++id;
    c.dtype = dt;
    c.count = count;
    c.async = (id % 5) == 0;
    c.list_form = (id % 4) < 2;
    ++cases;
    return c;
  };
  for (DataType dt : kDtypes) {
    for (std::size_t count : counts_for(n, dt)) {
      for (int k = 0; k < kNumReduceOps; ++k) {
        ReduceOp op(static_cast<ReduceOpKind>(k));
        if (op.kind == ReduceOpKind::PremulSum) op.scalar = dtype_is_integer(dt) ? 3.0 : 0.5;
        if (!reduce_op_invalid_reason(dt, op).empty()) continue;
        for (bool inplace : {false, true}) {
          CaseInfo c = next(dt, count);
          c.op = op;
          c.inplace = inplace;
          check_all_reduce(comm, c);
          c = next(dt, count);
          c.op = op;
          c.inplace = inplace;
          check_reduce_scatter(comm, c);
        }
        CaseInfo c = next(dt, count);
        c.op = op;
        c.inplace = k % 2 == 1;
        c.root = k % n;  // the roots in turn
        check_reduce(comm, c);
      }
      for (int root = 0; root < n; ++root) {
        CaseInfo c = next(dt, count);
        c.root = root;
        check_broadcast(comm, c);
      }
      for (bool inplace : {false, true}) {
        CaseInfo c = next(dt, count);
        c.inplace = inplace;
        check_all_gather(comm, c);
      }
      CaseInfo c = next(dt, count);
      check_all_to_all(comm, c);
      c = next(dt, count);
      check_all_to_all_in_place(comm, c);
      c = next(dt, count);
      check_all_to_all_v(comm, c);
      if (::testing::Test::HasFailure()) return cases;  // stop at the first broken case set
    }
  }
  return cases;
}

class ForcedAlgorithms : public ::testing::TestWithParam<int> {};

TEST_P(ForcedAlgorithms, EveryAlgorithmOverTcp) {
  std::uint64_t id = 700000;
  for (std::size_t k = 0; k < std::size(kOverrideSets); ++k, id += 100000) {
    if (kSanitized && GetParam() >= 7 && k != static_cast<std::size_t>(GetParam() % 2)) continue;
    const char* set = kOverrideSets[k];
    SCOPED_TRACE(set);
    SpawnOptions o;
    o.env = {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_ALGO", set}, {"TUTTI_CHUNK_BYTES", std::to_string(kChunkBytes)}};
    spawn(
        GetParam(),
        [set, id](Communicator& comm) {
          std::size_t cases = run_cases(comm, id);
          if (comm.rank() == 0) std::printf("world %d, %s: %zu cases\n", comm.size(), set, cases);
        },
        o);
    if (HasFailure()) return;
  }
}

INSTANTIATE_TEST_SUITE_P(World, ForcedAlgorithms, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const ::testing::TestParamInfo<int>& p) { return "n" + std::to_string(p.param); });

// The tuned all_reduce (algorithms/tuner.h), turned on over TCP: sizes in
// four of its classes (three where recursive doubling meets Rabenseifner,
// one where Rabenseifner meets the ring), interleaved, through the first
// epoch and the next one's trials, random data in four dtypes, every
// element checked. The flight recorder says which algorithm each operation
// ran: all three ran (the trials), and every rank ran the same one in every
// operation.
class TunedAllReduce : public ::testing::TestWithParam<int> {};

// 'd' (recursive doubling), 'r' (Rabenseifner) or 'g' (ring) per all_reduce in the trace, oldest first.
std::string algorithms_run(const std::string& js) {
  std::string out;
  for (const std::string& name : algorithms_in_trace(js, "all_reduce"))
    out += name == "recursive_doubling" ? 'd' : name == "rabenseifner" ? 'r' : name == "ring" ? 'g' : '?';
  return out;
}

TEST_P(TunedAllReduce, EveryRankRunsTheSameAlgorithmAndEveryResultIsRight) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_ALGO_TUNING", "on"}, {"TUTTI_TRACE_BUFFER", "1024"}};
  // With the signature check before every operation on one world size (its
  // exchange and the tuner's must not meet).
  if (GetParam() == 5) o.env.emplace_back("TUTTI_DEBUG", "detail");
  spawn(
      GetParam(),
      [](Communicator& comm) {
        // Timings skewed so that only the members' sums give the right choice:
        // every rank but the last finds alternative 1 (Rabenseifner, or the ring
        // in the large class) 1 s slower, the last finds alternative 0 2 s x size
        // slower. Summed, 1 wins everywhere; a rank deciding on its own timings
        // would run 0 (the last rank alone 1), and ranks would part ways.
        const std::int64_t s = 1000000000;
        if (comm.rank() == comm.size() - 1) {
          detail::Tuner::set_test_penalty(2 * s * comm.size(), 0);
        } else {
          detail::Tuner::set_test_penalty(0, s);
        }
        // Bytes in (8, 16], (16, 32], (32, 64] KiB and (512 KiB, 1 MiB], default classes.
        const std::size_t class_bytes[] = {12004, 20000, 65536, 1000000};
        const DataType dtypes[] = {DataType::Float32, DataType::Int32, DataType::BFloat16, DataType::Float64};
        const ReduceOpKind ops[] = {ReduceOpKind::Sum, ReduceOpKind::Max, ReduceOpKind::Avg, ReduceOpKind::Min};
        // The warm-up, two epochs' trials (runs of five) and exchanges, the first quiet part, more.
        const int per_class = 2 + 2 * (2 * 5 + 1) + 24 + 4;
        std::uint64_t id = 910000;
        std::vector<int> class_of;  // of each operation run
        for (int i = 0; i < 4 * per_class; ++i) {
          // The large class only through its warm-up, trials, choice and a few
          // more; not under TSan, where the small classes run the same
          // trials and exchanges (spawn.h).
          if (i % 4 == 3 && (kThreadSanitized || i / 4 >= 16)) continue;
          CaseInfo c;
          c.id = ++id;
          c.dtype = dtypes[(i / 4) % 4];
          c.count = class_bytes[i % 4] / dtype_size(c.dtype);
          c.op = ReduceOp(ops[(i / 12) % 4]);
          if (!reduce_op_invalid_reason(c.dtype, c.op).empty()) c.op = ReduceOp::SUM;
          c.inplace = (i % 7) == 0;
          c.async = (i % 5) == 0;
          check_all_reduce(comm, c);
          class_of.push_back(i % 4);
          if (::testing::Test::HasFailure()) return;
        }
        const std::string mine = algorithms_run(comm.trace_json());
        ASSERT_EQ(mine.size(), class_of.size()) << mine;
        // Per class, the tuner's whole course: the table's choice then the other
        // (untimed), trials in runs of five (the first of each untimed), the
        // members' choice (1) from the exchange on, the next epoch's trials
        // starting with the other.
        const std::string small =
            "dr"
            "dddddrrrrr" +
            std::string(1 + 24, 'r') + "rrrrrddddd" + std::string(1 + 4, 'r');
        const std::string expected[4] = {small, small, small,
                                         kThreadSanitized ? std::string()
                                                          : "rg"
                                                            "rrrrrggggg" +
                                                                std::string(4, 'g')};
        for (int k = 0; k < 4; ++k) {
          std::string got;
          for (std::size_t j = 0; j < mine.size(); ++j)
            if (class_of[j] == k) got += mine[j];
          EXPECT_EQ(got, expected[k]) << class_bytes[k] << " B on rank " << comm.rank();
        }
        std::vector<char> all(mine.size() * static_cast<std::size_t>(comm.size()));
        comm.all_gather(mine.data(), all.data(), mine.size(), DataType::UInt8);
        for (int p = 0; p < comm.size(); ++p)
          EXPECT_EQ(std::string(all.data() + p * mine.size(), mine.size()), mine)
              << "rank " << p << " against rank " << comm.rank();
        if (comm.rank() == 0) std::printf("world %d: %s\n", comm.size(), mine.c_str());
        // Above the tuned classes up to 512 KiB the table's Rabenseifner runs its
        // steps in units smaller than the chunk (64 KiB here): several per step,
        // the fold on 5 ranks included.
        for (int i = 0; i < 2; ++i) {
          CaseInfo c;
          c.id = ++id;
          c.dtype = DataType::Float32;
          c.count = 300004 / sizeof(float);
          c.op = ReduceOp(i ? ReduceOpKind::Max : ReduceOpKind::Sum);
          c.inplace = i == 1;
          check_all_reduce(comm, c);
        }
        const std::string after = algorithms_run(comm.trace_json());
        EXPECT_EQ(after.substr(after.size() - 2), "rr") << after;
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(World, TunedAllReduce, ::testing::Values(2, 4, 5),
                         [](const ::testing::TestParamInfo<int>& p) { return "n" + std::to_string(p.param); });

// The tuned broadcast (binomial against scatter + all_gather) and all_to_all
// (Bruck against pairwise), turned on over TCP: two size classes of each,
// interleaved, through the first epoch and the next one's trials, with the
// same skewed timings as above (only the members' combined figures choose
// the alternative: all_to_all's sums, broadcast's slowest member, whose
// trial runs each start with a barrier), roots in turn, random data, every
// element checked, the async and in-place forms included. Every rank ran
// the same algorithm in every operation, each class's whole course as the
// tuner runs it.
class TunedBroadcastAndAllToAll : public ::testing::TestWithParam<int> {};

TEST_P(TunedBroadcastAndAllToAll, EveryRankRunsTheSameAlgorithmAndEveryResultIsRight) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_ALGO_TUNING", "on"}, {"TUTTI_TRACE_BUFFER", "1024"}};
  if (GetParam() == 3) o.env.emplace_back("TUTTI_DEBUG", "detail");
  spawn(
      GetParam(),
      [](Communicator& comm) {
        const int n = comm.size();
        const std::int64_t s = 1000000000;
        if (comm.rank() == n - 1) {
          detail::Tuner::set_test_penalty(2 * s * n, 0);
        } else {
          detail::Tuner::set_test_penalty(0, s);
        }
        // Broadcast: (2, 4] and (64, 128] KiB; all_to_all: (32, 64] B and
        // (512, 1024] B a peer.
        const std::size_t bcast_bytes[] = {3000, 100000}, a2a_bytes[] = {40, 1000};
        const DataType dtypes[] = {DataType::Float32, DataType::Int32, DataType::BFloat16, DataType::Float64};
        const int per_class = 2 + 2 * (2 * 5 + 1) + 24 + 4;
        std::uint64_t id = 930000;
        std::vector<int> bcast_class, a2a_class;
        for (int i = 0; i < 2 * per_class; ++i) {
          const int k = i % 2;
          CaseInfo c;
          c.id = ++id;
          c.dtype = dtypes[(i / 2) % 4];
          c.count = bcast_bytes[k] / dtype_size(c.dtype);
          c.root = (i / 2) % n;
          c.async = (i % 5) == 0;
          check_broadcast(comm, c);
          bcast_class.push_back(k);
          c.id = ++id;
          c.count = a2a_bytes[k] / dtype_size(c.dtype);
          if (i % 7 == 3) {
            check_all_to_all_in_place(comm, c);
          } else {
            check_all_to_all(comm, c);
          }
          a2a_class.push_back(k);
          if (::testing::Test::HasFailure()) return;
        }
        const std::string js = comm.trace_json();
        auto letters = [&](const char* op, const std::vector<int>& class_of) {
          std::array<std::string, 2> out;
          const std::vector<std::string> names = algorithms_in_trace(js, op);
          EXPECT_EQ(names.size(), class_of.size()) << op;
          for (std::size_t j = 0; j < names.size() && j < class_of.size(); ++j)
            out[class_of[j]] += names[j] == "binomial"             ? 'b'
                                : names[j] == "scatter_all_gather" ? 's'
                                : names[j] == "bruck"              ? 'k'
                                : names[j] == "pairwise"           ? 'p'
                                                                   : '?';
          return out;
        };
        // The table's choice then the other (untimed), trials in runs of
        // five (the first of each untimed), the members' choice (1) from the
        // exchange on, the next epoch's trials starting with the other.
        auto course = [](char a, char b) {
          return std::string{a, b} + std::string(5, a) + std::string(5, b) + std::string(1 + 24, b) +
                 std::string(5, b) + std::string(5, a) + std::string(1 + 4, b);
        };
        const auto bcast = letters("broadcast", bcast_class), a2a = letters("all_to_all", a2a_class);
        for (int k = 0; k < 2; ++k) {
          EXPECT_EQ(bcast[k], course('b', 's')) << bcast_bytes[k] << " B broadcast on rank " << comm.rank();
          EXPECT_EQ(a2a[k], course('k', 'p')) << a2a_bytes[k] << " B a peer all_to_all on rank " << comm.rank();
        }
        // Every rank the same, operation by operation.
        const std::string mine = bcast[0] + bcast[1] + a2a[0] + a2a[1];
        std::vector<char> all(mine.size() * static_cast<std::size_t>(n));
        comm.all_gather(mine.data(), all.data(), mine.size(), DataType::UInt8);
        for (int p = 0; p < n; ++p)
          EXPECT_EQ(std::string(all.data() + p * mine.size(), mine.size()), mine)
              << "rank " << p << " against rank " << comm.rank();
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(World, TunedBroadcastAndAllToAll, ::testing::Values(3, 4),
                         [](const ::testing::TestParamInfo<int>& p) { return "n" + std::to_string(p.param); });

// Single copy against copying through the segment in shared memory, timed
// (communicator_impl.h, shm_run): every collective that has both, at a size
// where the rules use single copy, through the first epoch and the next
// one's trials, random data, every element checked, roots and the async
// form varied. The flight recorder shows "shm_copy" for an operation that
// copied where the rules would have copied once.
class TunedSingleCopy : public ::testing::TestWithParam<int> {};

// 160 KB; under the sanitizers 16,400 B (160 KB took 112 s under TSan):
// just past 16 KiB blocks, where the rules' single copy starts for the
// collectives in which every rank reads from every other, with a core per
// rank.
constexpr std::size_t kTunedCount = kSanitized ? 4100 : 40000;

// 's' (single copy as the rules say) or 'c' (copying only) per operation
// `op` in the trace, oldest first.
std::string copies_run(const std::string& js, const std::string& op) {
  std::string out;
  for (const std::string& name : algorithms_in_trace(js, op))
    out += name == "shm" ? 's' : name == "shm_copy" ? 'c' : '?';
  return out;
}

TEST_P(TunedSingleCopy, EveryRankTakesTheMembersChoiceAndEveryResultIsRight) {
  SpawnOptions o;
  // The reductions' forms fixed (TUTTI_SHM_ONESHOT_BYTES set): the single
  // copy choice alone is timed.
  o.env = {{"TUTTI_TRACE_BUFFER", "1024"}, {"TUTTI_SHM_ONESHOT_BYTES", "16384"}};
  spawn(
      GetParam(),
      [](Communicator& comm) {
        using Check = void (*)(Communicator&, const CaseInfo&);
        const struct {
          const char* op;
          Check check;
          bool all_read;  // every rank reads a block from every other
        } colls[] = {{"broadcast", check_broadcast, false},          {"reduce", check_reduce, false},
                     {"all_reduce", check_all_reduce, false},        {"gather", check_gather, false},
                     {"all_gather", check_all_gather, true},         {"scatter", check_scatter, false},
                     {"reduce_scatter", check_reduce_scatter, true}, {"all_to_all", check_all_to_all, true}};
        const int n = comm.size();
        const bool last = comm.rank() == n - 1;
        const std::int64_t s = 1000000000;
        std::uint64_t id = 960000;
        for (std::size_t k = 0; k < std::size(colls); ++k) {
          SCOPED_TRACE(colls[k].op);
          // Trial times skewed so that each member alone would choose otherwise
          // than the members' fastest trials: the others find single copy
          // (alternative 0) faster, the last rank copying, or the reverse; the
          // sum of the members' figures would choose the other way too.
          // Even collectives must end up copying, odd ones with single copy.
          const bool copy = k % 2 == 0;
          if (copy) {
            detail::Tuner::set_test_penalty(last ? 5 * s : s, last ? 0 : 10 * s);
          } else {
            detail::Tuner::set_test_penalty(last ? 0 : 10 * s, last ? 5 * s : s);
          }
          const char x = copy ? 'c' : 's';
          // Warm-up (the rules' choice, then the other), trials in runs of
          // four, the choice and the first quiet part, the next trials starting
          // with the other, the choice again.
          const std::string expected =
              "sc"
              "sssscccc" +
              std::string(1 + 24, x) + "ccccssss" + std::string(1 + 3, x);
          for (std::size_t i = 0; i < expected.size(); ++i) {
            CaseInfo c;
            c.id = ++id;
            c.dtype = i % 3 == 1 ? DataType::Int32 : DataType::Float32;
            c.count = kTunedCount + i % 3;  // one size class
            c.op = ReduceOp(i % 4 == 2 ? ReduceOpKind::Max : ReduceOpKind::Sum);
            c.root = static_cast<int>(i % static_cast<std::size_t>(n));
            c.inplace = i % 7 == 3;
            c.async = i % 5 == 0;
            colls[k].check(comm, c);
            if (::testing::Test::HasFailure()) return;
          }
          const std::string got = copies_run(comm.trace_json(), colls[k].op);
          // Where the rules never copy once at this size (shm_collectives.cc:
          // ranks that share cores need 128 KiB blocks), both alternatives run
          // the rules' path, and every operation says so. On 2 ranks with a
          // core each all eight copy once at 160 KB, the three that read every
          // block at 16,400 B.
          const bool copies_once = got.size() > 1 && got[1] == 'c';
          const bool own_cores = n == 2 && std::thread::hardware_concurrency() >= 2;
          if (copies_once || (own_cores && (!kSanitized || colls[k].all_read))) {
            EXPECT_EQ(got, expected) << "rank " << comm.rank();
          } else {
            EXPECT_EQ(got, std::string(expected.size(), 's')) << "rank " << comm.rank();
          }
          if (comm.rank() == 0) std::printf("world %d, %s: %s\n", n, colls[k].op, got.c_str());
        }
        // all_reduce copies in this class now; with PremulSum its rules never
        // copy once, so those operations run the rules' path and say so.
        const std::string before = copies_run(comm.trace_json(), "all_reduce");
        for (int i = 0; i < 3; ++i) {
          CaseInfo c;
          c.id = ++id;
          c.dtype = DataType::Float32;
          c.count = kTunedCount;
          c.op = ReduceOp(ReduceOpKind::PremulSum);
          c.op.scalar = 0.5;
          check_all_reduce(comm, c);
        }
        EXPECT_EQ(copies_run(comm.trace_json(), "all_reduce"), before + "sss") << "rank " << comm.rank();
        detail::Tuner::set_test_penalty(0, 0);
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(World, TunedSingleCopy, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& p) { return "n" + std::to_string(p.param); });

}  // namespace
}  // namespace tutti::testing
