// Communicator::alloc_shared: all_reduce and reduce on memory every rank of
// the host can address run directly on it (the flight recorder says
// "shm_direct"), for every dtype, reduce op, root and form, and fall back to
// the usual paths, still right, wherever one rank's buffers lie elsewhere.
#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "harness/spawn.h"
#include "multirank/collective_checks.h"

namespace tutti::testing {
namespace {

// Largest case: 17 MiB of float32 outputs (the outputs of 16 MiB and more
// are written with streaming stores); under the sanitizers 400 KB (slices of
// several 64 KiB chunks).
constexpr std::size_t kLargeCount = kSanitized ? 100000 : (17u << 20) / 4;
// An odd count no world size divides, of every dtype (complex128 the widest).
constexpr std::size_t kOddCount = 40009;
constexpr std::size_t kSharedBytes = std::max(kLargeCount * 4, kOddCount * 16) + 4096;

class SharedBuffers : public ::testing::TestWithParam<std::string> {};

// A run of the suite's parameter ("n2", "n3", "n4" over shared memory,
// "n3_tcp"): its ranks, whether in shared memory, the segments' prefix
// (`tag` tells the tests apart) and the ranks' settings.
struct Mode {
  int n;
  bool shm;
  std::string prefix;
  SpawnOptions options;
};
Mode mode_of(const std::string& param, const std::string& tag) {
  Mode m{param[1] - '0', param.find("tcp") == std::string::npos, shm_prefix_for(tag + "-" + param), {}};
  m.options.env = {
      {"TUTTI_TRACE_BUFFER", "8192"}, {"TUTTI_SHM_PREFIX", m.prefix}, {"TUTTI_SHM_ONESHOT_BYTES", "16384"}};
  if (!m.shm) m.options.env.push_back({"TUTTI_TRANSPORT", "tcp"});
  return m;
}

// A random integer for (element, case, rank), from `lo` to `lo + span - 1`,
// as a float (sums of a few stay exact).
float hashed_value(std::size_t i, std::uint64_t round, int rank, int lo, int span) {
  std::uint64_t z = (i * 0x9e3779b97f4a7c15ULL) ^ (round << 36) ^ static_cast<std::uint64_t>(rank + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return static_cast<float>(lo + static_cast<int>((z ^ (z >> 31)) % static_cast<std::uint64_t>(span)));
}

TEST_P(SharedBuffers, AllReduceAndReduceRunDirectlyOnThemAndFallBackWhereOneRankIsElsewhere) {
  const Mode m = mode_of(GetParam(), "shared");
  const int n = m.n;
  const bool shm = m.shm;
  const std::string& prefix = m.prefix;
  const SpawnOptions& o = m.options;
  spawn(
      n,
      [&](Communicator& comm) {
        const int r = comm.rank();
        // Sizes differ per rank; both buffers must hold the largest case.
        char* a = static_cast<char*>(comm.alloc_shared(kSharedBytes + 64 * r));
        char* b = static_cast<char*>(comm.alloc_shared(kSharedBytes));
        ASSERT_NE(a, nullptr);
        ASSERT_NE(b, nullptr);
        EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a) % 4096, 0u);
        std::memset(a, 0x5a, kSharedBytes);  // every byte of it is ours to use
        std::memset(b, 0xa5, kSharedBytes);
        std::uint64_t id = 7100000;
        std::vector<std::string> expected;  // per all_reduce / reduce, in order
        auto one = [&](bool reduce, DataType dt, std::size_t count, ReduceOp op, int root, bool shared_here,
                       bool all_shared, bool send_only = false) {
          CaseInfo c;
          c.id = ++id;
          c.dtype = dt;
          c.count = count;
          c.op = op;
          c.root = root;
          c.inplace = id % 2 == 0;
          c.async = id % 3 == 0;
          if (shared_here) {
            c.shared[0] = a;
            c.shared[1] = b;
            c.shared_bytes = kSharedBytes;
            c.shared_send_only = send_only;
          }
          if (reduce)
            check_reduce(comm, c);
          else
            check_all_reduce(comm, c);
          // Directly where every rank's buffers are shared (one-shot up to
          // TUTTI_SHM_ONESHOT_BYTES, two-shot above), and not PremulSum
          // (whose scalars differ per rank).
          const bool direct = shm && all_shared && op.kind != ReduceOpKind::PremulSum;
          expected.push_back(std::string(reduce ? "r:" : "a:") + (direct ? "direct" : "other"));
        };
        // Every dtype and valid reduce op, one-shot (a few elements, and the
        // one-shot size exactly), just past the one-shot size and at an odd
        // count that no world size divides; every root for reduce.
        for (int d = 0; d < kNumDataTypes && !::testing::Test::HasFailure(); ++d) {
          const DataType dt = static_cast<DataType>(d);
          const std::size_t es = dtype_size(dt);
          for (int k = 0; k < kNumReduceOps; ++k) {
            ReduceOp op(static_cast<ReduceOpKind>(k));
            if (op.kind == ReduceOpKind::PremulSum) op.scalar = dtype_is_integer(dt) ? 3.0 : 0.5;
            if (!reduce_op_invalid_reason(dt, op).empty()) continue;
            for (std::size_t count : {std::size_t{37}, (16u << 10) / es, (16u << 10) / es + 1, kOddCount}) {
              one(false, dt, count, op, 0, true, true);
              one(true, dt, count, op, static_cast<int>(id % static_cast<std::uint64_t>(n)), true, true);
            }
          }
        }
        one(false, DataType::Float32, 4096, ReduceOp(ReduceOpKind::Sum), 0, true, true);
        // Large: many chunks per slice, streamed outputs.
        one(false, DataType::Float32, kLargeCount, ReduceOp(ReduceOpKind::Sum), 0, true, true);
        one(true, DataType::BFloat16, kLargeCount, ReduceOp(ReduceOpKind::Max), n - 1, true, true);
        // One rank's buffers on the heap, or only its receive buffer (out of
        // place; a reduce's root): every rank falls back.
        for (int heap = 0; heap < n; ++heap) {
          one(false, DataType::Float64, 30001, ReduceOp(ReduceOpKind::Sum), 0, r != heap, false);
          one(true, DataType::Int32, 30001, ReduceOp(ReduceOpKind::Product), heap, r != heap, false);
          if (id % 2 == 1) ++id;  // out of place next
          one(false, DataType::Float32, 30001, ReduceOp(ReduceOpKind::Max), 0, true, false, r == heap);
          if (id % 2 == 1) ++id;
          one(true, DataType::Float32, 30001, ReduceOp(ReduceOpKind::Min), heap, true, false, r == heap);
        }
        if (::testing::Test::HasFailure()) return;
        // What ran, from the flight recorder.
        const std::string js = comm.trace_json();
        const std::vector<std::string> ar = algorithms_in_trace(js, "all_reduce"),
                                       rd = algorithms_in_trace(js, "reduce");
        std::size_t ia = 0, ir = 0;
        for (const std::string& e : expected) {
          const bool reduce = e[0] == 'r';
          const std::vector<std::string>& got = reduce ? rd : ar;
          std::size_t& i = reduce ? ir : ia;
          ASSERT_LT(i, got.size()) << "rank " << r << ": the trace lacks operations";
          if (e.substr(2) == "direct") {
            EXPECT_EQ(got[i], "shm_direct") << "rank " << r << ", " << (reduce ? "reduce" : "all_reduce") << " #" << i;
          } else {
            EXPECT_NE(got[i], "shm_direct") << "rank " << r << ", " << (reduce ? "reduce" : "all_reduce") << " #" << i;
          }
          ++i;
        }
        EXPECT_EQ(ia, ar.size());
        EXPECT_EQ(ir, rd.size());
        comm.free_shared(b);
        comm.free_shared(a);
        // A new allocation after the frees (perhaps where a freed one was mapped)
        // runs directly again; once it is freed too, the heap's run the usual way.
        const std::size_t count = 10000;
        auto* v = static_cast<float*>(comm.alloc_shared(count * sizeof(float)));
        auto sum_of_ranks = [&](float* x) {
          for (std::size_t i = 0; i < count; ++i) x[i] = static_cast<float>(r + 1) * static_cast<float>(i % 7);
          comm.all_reduce(x, x, count, DataType::Float32, ReduceOp(ReduceOpKind::Sum));
          for (std::size_t i = 0; i < count; ++i) {
            const float want = static_cast<float>(n * (n + 1) / 2) * static_cast<float>(i % 7);
            if (x[i] != want) {
              ADD_FAILURE() << "rank " << r << ", element " << i << ": " << x[i] << ", expected " << want;
              break;
            }
          }
          return algorithms_in_trace(comm.trace_json(), "all_reduce").back();
        };
        const std::string ran = sum_of_ranks(v);
        if (shm) {
          EXPECT_EQ(ran, "shm_direct");
        } else {
          EXPECT_NE(ran, "shm_direct");
        }
        comm.free_shared(v);
        std::vector<float> heap(count);
        EXPECT_NE(sum_of_ranks(heap.data()), "shm_direct");
      },
      o);
  EXPECT_TRUE(shm_segments(prefix).empty());
}

INSTANTIATE_TEST_SUITE_P(World, SharedBuffers, ::testing::Values("n2", "n3", "n4", "n3_tcp"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

// broadcast, all_gather, reduce_scatter and all_to_all on alloc_shared
// memory run directly ("shm_direct"), with every rank's result checked
// element by element; where one rank's buffer is on the heap, or
// all_to_all runs in place, every rank takes the usual path, still right.
TEST_P(SharedBuffers, TheOtherCollectivesRunDirectlyOnThem) {
  const Mode m = mode_of(GetParam(), "others");
  const int n = m.n;
  const bool shm = m.shm;
  const std::string& prefix = m.prefix;
  const SpawnOptions& o = m.options;
  spawn(
      n,
      [&](Communicator& comm) {
        const int r = comm.rank();
        // float32 elements a block: past the one-shot size on every n, and a few.
        const std::size_t most = 5003;
        const std::size_t most_all = most * static_cast<std::size_t>(n);
        auto* in = static_cast<float*>(comm.alloc_shared(most_all * sizeof(float)));
        auto* out = static_cast<float*>(comm.alloc_shared(most_all * n * sizeof(float)));
        std::vector<float> heap_in(most_all), heap_out(most_all * n);
        // Random integers (a hash of element, case and rank): sums are exact.
        std::uint64_t round = 0;
        auto value = [&](std::size_t i, int rank) { return hashed_value(i, round, rank, -1000, 2001); };
        auto expect_ran = [&](const char* op, bool direct, const std::string& what) {
          std::vector<std::string> algos = algorithms_in_trace(comm.trace_json(), op);
          // Over TCP an equal all_to_all past Bruck's sizes runs as all_to_all_v.
          if (algos.empty() && !shm) algos = algorithms_in_trace(comm.trace_json(), std::string(op) + "_v");
          ASSERT_FALSE(algos.empty()) << "rank " << r << ": no " << op << " in the trace: " << comm.trace_json();
          const std::string& ran = algos.back();
          if (direct && shm) {
            EXPECT_EQ(ran, "shm_direct") << "rank " << r << ": " << what;
          } else {
            EXPECT_NE(ran, "shm_direct") << "rank " << r << ": " << what;
          }
        };
        auto expect_equal = [&](const float* got, std::size_t len, auto&& want, const std::string& what) {
          for (std::size_t i = 0; i < len; ++i)
            if (got[i] != want(i)) {
              ADD_FAILURE() << "rank " << r << ", " << what << ", element " << i << ": " << got[i] << ", expected "
                            << want(i);
              return;
            }
        };
        for (const std::size_t count : {most, std::size_t{3}})
          for (int heap = -1; heap < n && !::testing::Test::HasFailure(); ++heap) {
            const std::size_t all = count * static_cast<std::size_t>(n);
            // heap >= 0: that rank's buffers are on the heap.
            float* src = r == heap ? heap_in.data() : in;
            float* dst = r == heap ? heap_out.data() : out;
            const bool direct = heap < 0;
            const std::string where = direct ? "all shared" : "rank " + std::to_string(heap) + " on the heap";
            // broadcast from the last rank.
            ++round;
            for (std::size_t i = 0; i < all; ++i) src[i] = r == n - 1 ? value(i, n - 1) : -1.f;
            comm.broadcast(src, all, DataType::Float32, n - 1);
            expect_equal(
                src, all, [&](std::size_t i) { return value(i, n - 1); }, "broadcast, " + where);
            expect_ran("broadcast", direct, "broadcast, " + where);
            // all_gather of `all` elements a rank.
            ++round;
            for (std::size_t i = 0; i < all; ++i) src[i] = value(i, r);
            comm.all_gather(src, dst, all, DataType::Float32);
            expect_equal(
                dst, all * n, [&](std::size_t i) { return value(i % all, static_cast<int>(i / all)); },
                "all_gather, " + where);
            expect_ran("all_gather", direct, "all_gather, " + where);
            // reduce_scatter: Sum, then Max, of n blocks of `count`.
            for (ReduceOpKind k : {ReduceOpKind::Sum, ReduceOpKind::Max, ReduceOpKind::Avg}) {
              ++round;
              for (std::size_t i = 0; i < all; ++i) src[i] = value(i, r);
              comm.reduce_scatter(src, dst, count, DataType::Float32, ReduceOp(k));
              expect_equal(
                  dst, count,
                  [&](std::size_t i) {
                    float acc = value(r * count + i, 0);
                    for (int q = 1; q < n; ++q)
                      acc = k == ReduceOpKind::Max ? std::max(acc, value(r * count + i, q))
                                                   : acc + value(r * count + i, q);
                    return k == ReduceOpKind::Avg ? acc / static_cast<float>(n) : acc;
                  },
                  std::string("reduce_scatter ") + reduce_op_name(k) + ", " + where);
              expect_ran("reduce_scatter", direct, "reduce_scatter, " + where);
            }
            // all_to_all of blocks of `count`, then in place.
            ++round;
            for (std::size_t i = 0; i < all; ++i) src[i] = value(i, r);
            comm.all_to_all(src, dst, count, DataType::Float32);
            auto a2a = [&](std::size_t i) { return value(r * count + i % count, static_cast<int>(i / count)); };
            expect_equal(dst, all, a2a, "all_to_all, " + where);
            expect_ran("all_to_all", direct, "all_to_all, " + where);
            comm.all_to_all(src, src, count, DataType::Float32);
            expect_equal(src, all, a2a, "all_to_all in place, " + where);
            expect_ran("all_to_all", false, "all_to_all in place, " + where);
          }
        comm.free_shared(out);
        comm.free_shared(in);
      },
      o);
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// Unset, TUTTI_SHM_ONESHOT_BYTES leaves the forms to the timed choices
// (media/shm_medium.h): on shared allocations in place or copying through
// the segment, one-shot or two-shot. Every alternative's trials give the
// right sums, element by element, in place and on the heap, for sizes each
// choice covers; in shared memory the trace shows both in place and
// copying runs at every size.
TEST_P(SharedBuffers, TimedChoicesStayRight) {
  Mode m = mode_of(GetParam(), "timed");
  std::erase_if(m.options.env, [](const auto& kv) { return kv.first == "TUTTI_SHM_ONESHOT_BYTES"; });
  const int n = m.n;
  const bool shm = m.shm;
  spawn(
      n,
      [&](Communicator& comm) {
        const int r = comm.rank();
        constexpr std::size_t kMost = (512u << 10) / 4 + 3;
        auto* shared = static_cast<float*>(comm.alloc_shared(kMost * sizeof(float)));
        std::vector<float> heap(kMost);
        std::uint64_t round = 0;
        for (const std::size_t count : {std::size_t{13}, std::size_t{1021}, std::size_t{16411}, kMost}) {
          for (int i = 0; i < 40 && !::testing::Test::HasFailure(); ++i) {
            float* x = i % 4 == 3 ? heap.data() : shared;
            ++round;
            for (std::size_t e = 0; e < count; ++e) x[e] = hashed_value(e, round, r, -5000, 10001);
            comm.all_reduce(x, x, count, DataType::Float32, ReduceOp(ReduceOpKind::Sum));
            for (std::size_t e = 0; e < count; ++e) {
              float want = 0;
              for (int q = 0; q < n; ++q) want += hashed_value(e, round, q, -5000, 10001);
              if (x[e] != want) {
                ADD_FAILURE() << "rank " << r << ", " << count << " elements, #" << i << ", element " << e << ": "
                              << x[e] << ", expected " << want;
                break;
              }
            }
          }
          if (!shm) continue;
          // The shared operations of this size, the last 40 of the trace.
          const std::vector<std::string> ran = algorithms_in_trace(comm.trace_json(), "all_reduce");
          ASSERT_GE(ran.size(), 40u);
          int direct = 0, copied = 0;
          for (std::size_t i = ran.size() - 40; i < ran.size(); ++i) {
            if ((i - (ran.size() - 40)) % 4 == 3) continue;  // on the heap
            ++(ran[i] == "shm_direct" ? direct : copied);
          }
          EXPECT_GT(direct, 0) << "rank " << r << ", " << count << " elements";
          EXPECT_GT(copied, 0) << "rank " << r << ", " << count << " elements";
        }
        comm.free_shared(shared);
      },
      m.options);
  EXPECT_TRUE(shm_segments(m.prefix).empty());
}

// Whether this process maps allocation `serial` of the shared-memory group
// whose segments are named under `prefix` (/proc/self/maps lists a mapped
// segment by name, "(deleted)" once its name is gone).
bool maps_allocation(const std::string& prefix, std::uint64_t serial) {
  std::ifstream maps("/proc/self/maps");
  const std::string tail = "-a" + std::to_string(serial);
  const std::string deleted = " (deleted)";
  for (std::string line; std::getline(maps, line);) {
    if (line.find(prefix) == std::string::npos) continue;
    // The segment's name ends the line, before " (deleted)" (its name is gone).
    std::string path = line.substr(line.find('/'));
    if (path.ends_with(deleted)) path.resize(path.size() - deleted.size());
    if (path.ends_with(tail)) return true;
  }
  return false;
}

// Communicator::alloc_shared_owned: each rank lets go of its part on its
// own. Operations run directly on such memory while every rank holds its
// part, and fall back where one rank let go and passes the heap; a rank
// keeps the allocation mapped until every rank let go; the memory outlives
// the communicator while its handle lives; free_shared refuses it.
TEST_P(SharedBuffers, OwnedOnesAreLetGoOfByEachRankOnItsOwn) {
  const Mode m = mode_of(GetParam(), "owned");
  const int n = m.n;
  const bool shm = m.shm;
  const std::string& prefix = m.prefix;
  const SpawnOptions& o = m.options;
  spawn(
      n,
      [&](Communicator& world) {
        const int r = world.rank();
        std::vector<int> all(static_cast<std::size_t>(n));
        for (int i = 0; i < n; ++i) all[static_cast<std::size_t>(i)] = i;
        std::shared_ptr<void> keep;  // outlives the communicator
        {
          std::optional<Communicator> comm = world.new_group(all);
          ASSERT_TRUE(comm.has_value());
          const std::size_t count = 30001;
          std::shared_ptr<void> a = comm->alloc_shared_owned(count * sizeof(float) + 64 * r);
          std::shared_ptr<void> b = comm->alloc_shared_owned(count * sizeof(float));
          ASSERT_NE(a, nullptr);
          ASSERT_NE(b, nullptr);
          EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.get()) % 4096, 0u);
          std::uint64_t round = 0;
          // Random integers (a hash of element, round and rank) in floats:
          // every sum is exact.
          auto value = [&](std::size_t i, int rank) { return hashed_value(i, round, rank, 1, 100001); };
          auto sum_of_ranks = [&](float* x) {
            ++round;
            for (std::size_t i = 0; i < count; ++i) x[i] = value(i, r);
            comm->all_reduce(x, x, count, DataType::Float32, ReduceOp(ReduceOpKind::Sum));
            for (std::size_t i = 0; i < count; ++i) {
              float want = 0;
              for (int q = 0; q < n; ++q) want += value(i, q);
              if (x[i] != want) {
                ADD_FAILURE() << "rank " << r << ", element " << i << ": " << x[i] << ", expected " << want;
                break;
              }
            }
            return algorithms_in_trace(comm->trace_json(), "all_reduce").back();
          };
          auto expect_direct = [&](const std::string& ran, bool yes) {
            if (yes && shm) {
              EXPECT_EQ(ran, "shm_direct") << "rank " << r;
            } else {
              EXPECT_NE(ran, "shm_direct") << "rank " << r;
            }
          };
          expect_direct(sum_of_ranks(static_cast<float*>(a.get())), true);
          expect_direct(sum_of_ranks(static_cast<float*>(b.get())), true);
          // Rank 0 lets go of a: it runs on the heap, the others on a.
          if (r == 0) a.reset();
          std::vector<float> heap(count);
          expect_direct(sum_of_ranks(r == 0 ? heap.data() : static_cast<float*>(a.get())), false);
          if (shm) {
            EXPECT_TRUE(maps_allocation(prefix, 1)) << "rank " << r << " unmapped a while peers hold it";
          }
          expect_direct(sum_of_ranks(static_cast<float*>(b.get())), true);
          // Everyone lets go of a; a new allocation forgets it everywhere.
          a.reset();
          std::shared_ptr<void> c = comm->alloc_shared_owned(4096);
          if (shm) {
            EXPECT_FALSE(maps_allocation(prefix, 1)) << "rank " << r << " still maps a";
            EXPECT_TRUE(maps_allocation(prefix, 2)) << "rank " << r;
          }
          // free_shared is not for owned memory.
          try {
            comm->free_shared(b.get());
            ADD_FAILURE() << "free_shared of owned memory succeeded";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
            EXPECT_NE(e.message().find("a pointer alloc_shared did not return"), std::string::npos) << e.what();
          }
          keep = b;
          std::memset(keep.get(), 0x3c, count * sizeof(float));
        }
        // The communicator is gone; its memory is still this rank's.
        const auto* bytes = static_cast<const unsigned char*>(keep.get());
        EXPECT_EQ(bytes[0], 0x3c);
        EXPECT_EQ(bytes[30001 * sizeof(float) - 1], 0x3c);
        keep.reset();
        if (shm) {
          EXPECT_FALSE(maps_allocation(prefix, 2)) << "rank " << r << " still maps b";
        }
      },
      o);
  EXPECT_TRUE(shm_segments(prefix).empty());
}

// Ranks that free different allocations, or memory alloc_shared did not
// give them, all fail with InvalidArgument naming what each passed.
// In shared memory and over TCP (ordinary memory, the same checks).
class SharedBuffersAgreement : public ::testing::TestWithParam<std::string> {
 protected:
  SpawnOptions options() const {
    SpawnOptions o;
    if (GetParam() == "tcp") o.env = {{"TUTTI_TRANSPORT", "tcp"}};
    return o;
  }
};

TEST_P(SharedBuffersAgreement, FreeingDifferentAllocationsFailsOnEveryRank) {
  spawn(
      3,
      [](Communicator& world) {
        const std::vector<int> all = {0, 1, 2};
        auto check = [&](bool heap) {
          std::optional<Communicator> comm = world.new_group(all);
          ASSERT_TRUE(comm.has_value());
          void* x = comm->alloc_shared(4096);
          void* y = comm->alloc_shared(8192);
          std::vector<char> elsewhere(64);
          void* mine = world.rank() == 1 ? (heap ? static_cast<void*>(elsewhere.data()) : y) : x;
          try {
            comm->free_shared(mine);
            ADD_FAILURE() << "free_shared of different allocations succeeded";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
            EXPECT_NE(e.message().find("free_shared"), std::string::npos) << e.what();
            const std::string rank1 = heap ? "rank 1 a pointer alloc_shared did not return" : "rank 1 allocation #2";
            EXPECT_NE(e.message().find(rank1), std::string::npos) << e.what();
          }
          // Nothing was freed and the communicator carries on.
          std::vector<float> v(20000, static_cast<float>(world.rank()));
          comm->all_reduce(v.data(), v.data(), v.size(), DataType::Float32, ReduceOp(ReduceOpKind::Sum));
          EXPECT_EQ(v[19999], 3.f);
          comm->free_shared(y);
          comm->free_shared(x);
        };
        check(false);
        check(true);
        // The world is unharmed.
        int v = world.rank();
        world.all_reduce(&v, &v, 1, DataType::Int32, ReduceOp(ReduceOpKind::Sum));
        EXPECT_EQ(v, 3);
      },
      options());
}

// A rank that asks for more than a rank may: every rank fails with
// InvalidArgument naming it, and the communicator carries on.
TEST_P(SharedBuffersAgreement, AnOversizedRequestFailsOnEveryRank) {
  spawn(
      2,
      [](Communicator& world) {
        try {
          world.alloc_shared(world.rank() == 1 ? std::size_t{1} << 50 : 4096);
          ADD_FAILURE() << "alloc_shared of 2^50 bytes succeeded";
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << e.what();
          EXPECT_NE(e.message().find("alloc_shared: rank 1 asks for 1125899906842624 bytes"), std::string::npos)
              << e.what();
        }
        void* p = world.alloc_shared(4096);
        std::memset(p, 1, 4096);
        world.free_shared(p);
      },
      options());
}

INSTANTIATE_TEST_SUITE_P(Transports, SharedBuffersAgreement, ::testing::Values("shm", "tcp"),
                         [](const ::testing::TestParamInfo<std::string>& i) { return i.param; });

// A rank killed inside a direct all_reduce, or instead of joining an
// alloc_shared: the others get PeerLost naming it, fast, and no segment
// (the group's or an allocation's) is left.
// `calls` must fail within 2 s with PeerLost naming rank 2.
void expect_rank_2_lost(const char* what, const std::function<void()>& calls) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    calls();
    ADD_FAILURE() << what << " kept working without rank 2";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << e.what();
    EXPECT_NE(e.message().find("rank 2"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
}

TEST(SharedBuffersMisuse, KilledRankInADirectAllReduceLeavesNoSegment) {
  const std::string prefix = shm_prefix_for("shared-killed");
  SpawnOptions o;
  o.env = {{"TUTTI_SHM_PREFIX", prefix}};
  o.may_die = {2};
  spawn(
      3,
      [](Communicator& world) {
        const std::size_t count = 1 << 18;
        auto* buf = static_cast<float*>(world.alloc_shared(count * sizeof(float)));
        for (std::size_t i = 0; i < count; ++i) buf[i] = 1.f;
        for (int i = 0; i < 5; ++i) world.all_reduce(buf, buf, count, DataType::Float32, ReduceOp(ReduceOpKind::Max));
        const std::string js = world.trace_json();
        EXPECT_NE(js.find("\"algo\":\"shm_direct\""), std::string::npos) << "rank " << world.rank();
        if (world.rank() == 2) ::raise(SIGKILL);
        expect_rank_2_lost("all_reduce", [&] {
          for (int i = 0; i < 1000; ++i)
            world.all_reduce(buf, buf, count, DataType::Float32, ReduceOp(ReduceOpKind::Max));
        });
      },
      o);
  EXPECT_TRUE(shm_segments(prefix).empty());
  const std::string prefix2 = shm_prefix_for("shared-killed-alloc");
  o.env = {{"TUTTI_SHM_PREFIX", prefix2}};
  spawn(
      3,
      [](Communicator& world) {
        float v = 1;
        world.all_reduce(&v, &v, 1, DataType::Float32, ReduceOp(ReduceOpKind::Sum));  // the group exists
        if (world.rank() == 2) ::raise(SIGKILL);
        expect_rank_2_lost("alloc_shared", [&] { world.alloc_shared(1 << 20); });
      },
      o);
  EXPECT_TRUE(shm_segments(prefix2).empty());
}

}  // namespace
}  // namespace tutti::testing
