// Point-to-point, groups and error paths in real processes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/errors.h"
#include "harness/spawn.h"
#include "multirank/collective_checks.h"

namespace tutti::testing {
namespace {

// (world size, TUTTI_TRANSPORT): "auto" sends point-to-point through shared
// memory (every rank is on this host), "tcp" through loopback TCP.
class MultiRank : public ::testing::TestWithParam<std::tuple<int, std::string>> {
 protected:
  int world() const { return std::get<0>(GetParam()); }
  SpawnOptions opts() const {
    SpawnOptions o;
    o.env = transport_env(std::get<1>(GetParam()));
    return o;
  }
};

// The tests that need a peer: every world size but 1.
class MultiRankPairs : public MultiRank {};

std::string world_and_transport(const ::testing::TestParamInfo<std::tuple<int, std::string>>& p) {
  const std::string& mode = std::get<1>(p.param);
  return "n" + std::to_string(std::get<0>(p.param)) + "_" + (mode == "auto" ? std::string("shm") : mode);
}

// A communicator over every rank of `world`, so that a test can abort it and
// still use the world afterwards.
std::optional<Communicator> copy_of(Communicator& world) {
  std::vector<int> all(world.size());
  for (int i = 0; i < world.size(); ++i) all[i] = i;
  return world.new_group(all);
}

TEST_P(MultiRank, PointToPoint) {
  spawn(
      world(),
      [](Communicator& comm) {
        const int n = comm.size(), r = comm.rank();
        CaseInfo c;
        c.dtype = DataType::Float64;
        // Every ordered pair, blocking, with the tag naming the pair.
        for (int count : {0, 1, 7, 5000}) {
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
                int from = comm.recv(b.data(), c.count, c.dtype, src, src * 64 + dst);
                EXPECT_EQ(from, src);
                Buf want = input_of(c, src);
                EXPECT_TRUE(b == want) << "from " << src << " count " << count;
              }
            }
          }
        }
        // Non-blocking ring exchange in both directions, plus a message to self.
        c.count = 1000;
        c.id = 8001;
        Buf mine = input_of(c, r);
        Buf from_prev(mine.size()), from_next(mine.size()), from_self(mine.size());
        Work w1 = comm.irecv(from_prev.data(), c.count, c.dtype, (r + n - 1) % n, 1);
        Work w2 = comm.irecv(from_next.data(), c.count, c.dtype, (r + 1) % n, 2);
        Work w3 = comm.irecv(from_self.data(), c.count, c.dtype, r, 3);
        Work s1 = comm.isend(mine.data(), c.count, c.dtype, (r + 1) % n, 1);
        Work s2 = comm.isend(mine.data(), c.count, c.dtype, (r + n - 1) % n, 2);
        Work s3 = comm.isend(mine.data(), c.count, c.dtype, r, 3);
        for (Work* w : {&w1, &w2, &w3, &s1, &s2, &s3}) w->wait();
        EXPECT_EQ(w1.source(), (r + n - 1) % n);
        EXPECT_EQ(w3.source(), r);
        EXPECT_EQ(w1.bytes(), mine.size());
        EXPECT_TRUE(input_of(c, (r + n - 1) % n) == from_prev);
        EXPECT_TRUE(input_of(c, (r + 1) % n) == from_next);
        EXPECT_TRUE(mine == from_self);
        // Any source: rank 0 receives one message from every other rank, in
        // whatever order they arrive, and learns who sent each.
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
        // Same source and tag: messages arrive in the order sent.
        if (n >= 2 && r < 2) {
          for (int i = 0; i < 50; ++i) {
            std::int32_t v = i;
            if (r == 0) {
              comm.send(&v, 1, DataType::Int32, 1, 4);
            } else {
              comm.recv(&v, 1, DataType::Int32, 0, 4);
              EXPECT_EQ(v, i);
            }
          }
        }
        comm.barrier();
      },
      opts());
}

// Sizes on both sides of every path (inline, single-copy), more messages in
// flight to one peer than a shared-memory ring holds, receives posted in
// another order than the sends, large messages from any source.
TEST_P(MultiRankPairs, PointToPointManyInFlightAndMixedSizes) {
  spawn(
      world(),
      [](Communicator& comm) {
        const int n = comm.size(), r = comm.rank();
        const std::size_t sizes[] = {0, 1, 20, 21, 1000, 70000};
        constexpr int kMessages = 150;
        auto case_of = [&](int i, int tag_group) {
          CaseInfo c;
          c.dtype = DataType::Float32;
          c.count = sizes[i % 6];
          c.id = 50000 + static_cast<std::uint64_t>(i) + 1000u * static_cast<std::uint64_t>(tag_group);
          return c;
        };
        if (r == 0) {
          // Same tag: FIFO across sizes; all posted before the receiver starts.
          std::vector<Buf> out;
          std::vector<Work> works;
          for (int i = 0; i < kMessages; ++i) out.push_back(input_of(case_of(i, 0), 0));
          for (int i = 0; i < kMessages; ++i)
            works.push_back(comm.isend(out[i].data(), out[i].size() / 4, DataType::Float32, 1, 7));
          comm.barrier();
          for (Work& w : works) w.wait();
          // Two tags, received in the other order.
          Buf a = input_of(case_of(5, 1), 0), b = input_of(case_of(5, 2), 0);
          Work wa = comm.isend(a.data(), a.size() / 4, DataType::Float32, 1, 100);
          Work wb = comm.isend(b.data(), b.size() / 4, DataType::Float32, 1, 200);
          wa.wait();
          wb.wait();
        } else if (r == 1) {
          comm.barrier();  // every send of rank 0 is posted (and most cannot be in the ring yet)
          for (int i = 0; i < kMessages; ++i) {
            CaseInfo c = case_of(i, 0);
            Buf got = input_of(c, 1, 99);
            int from = comm.recv(got.data(), c.count, c.dtype, 0, 7);
            EXPECT_EQ(from, 0);
            ASSERT_TRUE(got == input_of(c, 0)) << "message " << i << " of " << c.count << " floats";
          }
          CaseInfo ca = case_of(5, 1), cb = case_of(5, 2);
          Buf b(ca.count * 4), a(ca.count * 4);
          comm.recv(b.data(), cb.count, cb.dtype, 0, 200);
          comm.recv(a.data(), ca.count, ca.dtype, 0, 100);
          EXPECT_TRUE(a == input_of(ca, 0));
          EXPECT_TRUE(b == input_of(cb, 0));
        } else {
          comm.barrier();
        }
        // Large messages from any source.
        CaseInfo c;
        c.dtype = DataType::Int32;
        c.count = 50000;
        if (r == n - 1) {
          std::vector<bool> seen(n, false);
          for (int i = 0; i < n - 1; ++i) {
            Buf got(c.count * 4);
            int from = comm.recv(got.data(), c.count, c.dtype, kAnySource, 3);
            ASSERT_TRUE(from >= 0 && from < n - 1 && !seen[from]) << from;
            seen[from] = true;
            c.id = 60000 + static_cast<std::uint64_t>(from);
            EXPECT_TRUE(got == input_of(c, from)) << "from " << from;
          }
        } else {
          c.id = 60000 + static_cast<std::uint64_t>(r);
          Buf mine = input_of(c, r);
          comm.send(mine.data(), c.count, c.dtype, n - 1, 3);
        }
        comm.barrier();
      },
      opts());
}

// Exchanges of 16 KiB between two ranks, 300 in a row, each waited for: a
// waiter is woken when its message is in. Striped (messages of 4 KiB and
// more split across three data connections), a waiter that read the
// header connection itself slept through its stripes' arrival in 10 ms
// slices: 4.7 ms an exchange, against 0.11 over one connection.
TEST_P(MultiRankPairs, ExchangesWakeTheirWaiters) {
  spawn(
      world(),
      [](Communicator& comm) {
        const int r = comm.rank();
        if (r > 1) return;
        constexpr int kRounds = 300;
        CaseInfo c;
        c.dtype = DataType::Float32;
        c.count = 4096;  // 16 KiB
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < kRounds; ++i) {
          c.id = 50000 + static_cast<std::uint64_t>(i);
          Buf mine = input_of(c, r), got = input_of(c, r, 77);
          Work rw = comm.irecv(got.data(), c.count, c.dtype, 1 - r, i);
          Work sw = comm.isend(mine.data(), c.count, c.dtype, 1 - r, i);
          rw.wait();
          sw.wait();
          if (got != input_of(c, 1 - r)) {
            ADD_FAILURE() << "round " << i << ": rank " << r << " got another message";
            return;
          }
        }
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start).count();
        if (!kSanitized) {
          EXPECT_LT(ms, 700) << kRounds << " exchanges on rank " << r;
        }
        if (r == 0) std::printf("%d exchanges of 16 KiB: %lld ms\n", kRounds, static_cast<long long>(ms));
      },
      opts());
}

// A large message into a smaller receive: Mismatch naming both sizes on the
// receiver; the sender's request completes, or fails with the receiver's
// Mismatch when that reaches it first.
TEST_P(MultiRankPairs, MismatchedLargeMessageIsAnError) {
  spawn(
      world(),
      [](Communicator& world) {
        auto g = copy_of(world);
        std::vector<float> v(30000, 1.f);
        if (world.rank() == 0) {
          try {
            g->send(v.data(), v.size(), DataType::Float32, 1, 5);
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Mismatch) << what_of(e);
            EXPECT_NE(e.message().find("120000 bytes"), std::string::npos) << what_of(e);
          }
        } else if (world.rank() == 1) {
          try {
            g->recv(v.data(), 20000, DataType::Float32, 0, 5);
            ADD_FAILURE() << "a 120000-byte message was accepted into an 80000-byte receive";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Mismatch) << what_of(e);
            EXPECT_NE(e.message().find("80000 bytes"), std::string::npos) << what_of(e);
            EXPECT_NE(e.message().find("120000 bytes"), std::string::npos) << what_of(e);
          }
        }
        world.barrier();
      },
      opts());
}

TEST_P(MultiRank, InvalidArgumentsAreRefusedBeforeSending) {
  spawn(
      world(),
      [](Communicator& comm) {
        const int n = comm.size();
        float x[4] = {1, 2, 3, 4};
        auto expect_invalid = [&](const std::function<void()>& f, const std::string& needle) {
          try {
            f();
            ADD_FAILURE() << "accepted; expected InvalidArgument mentioning '" << needle << "'";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument) << what_of(e);
            EXPECT_NE(e.message().find(needle), std::string::npos) << what_of(e);
            EXPECT_NE(e.message().find("rank " + std::to_string(comm.rank())), std::string::npos) << what_of(e);
          }
        };
        expect_invalid([&] { comm.broadcast(x, 4, DataType::Float32, n); }, "root " + std::to_string(n));
        expect_invalid([&] { comm.reduce(x, x, 4, DataType::Float32, ReduceOp::SUM, -1); }, "root -1");
        expect_invalid([&] { comm.all_reduce(x, x, 4, DataType::Float32, ReduceOp::BXOR); }, "bitwise");
        expect_invalid([&] { comm.all_reduce(x, x, 4, DataType::Complex64, ReduceOp::MAX); }, "complex");
        expect_invalid([&] { comm.all_reduce(x, x, 1, DataType::Int32, ReduceOp::premul_sum(0.5)); }, "integral");
        expect_invalid([&] { comm.all_reduce(nullptr, x, 4, DataType::Float32, ReduceOp::SUM); }, "sendbuf is null");
        expect_invalid([&] { comm.send(x, 4, DataType::Float32, n + 3); }, "peer " + std::to_string(n + 3));
        expect_invalid([&] { comm.send(x, 4, DataType::Float32, 0, -5); }, "tag -5");
        expect_invalid([&] { comm.all_reduce(x, x, 4, static_cast<DataType>(99), ReduceOp::SUM); },
                       "unknown data type");
        // None of that aborted the communicator.
        std::int64_t v = 1;
        comm.all_reduce(&v, &v, 1, DataType::Int64, ReduceOp::SUM);
        EXPECT_EQ(v, n);
      },
      opts());
}

// Two disjoint groups, an overlapping split and the world, with operations in
// flight on all of them at once, from one thread and from several.
TEST_P(MultiRank, GroupsRunConcurrently) {
  spawn(
      world(),
      [](Communicator& world) {
        const int n = world.size(), r = world.rank();
        std::vector<int> evens, odds;
        for (int i = 0; i < n; ++i) (i % 2 ? odds : evens).push_back(i);
        auto ge = world.new_group(evens);
        auto go = odds.empty() ? std::nullopt : world.new_group(odds);
        EXPECT_EQ(ge.has_value(), r % 2 == 0);
        EXPECT_EQ(go.has_value(), r % 2 == 1);
        Communicator mine = ge ? *ge : *go;
        EXPECT_EQ(mine.size(), static_cast<int>((r % 2 ? odds : evens).size()));
        EXPECT_EQ(mine.rank(), r / 2);
        // Overlapping: ranks split by r / 3, ordered by descending world rank.
        auto sp = world.split(r / 3, -r);
        ASSERT_TRUE(sp.has_value());
        const int members = std::min(n, (r / 3) * 3 + 3) - (r / 3) * 3;
        EXPECT_EQ(sp->size(), members);
        EXPECT_EQ(sp->rank(), (std::min(n, (r / 3) * 3 + 3) - 1) - r);
        auto none = world.split(r == 0 ? -1 : 1, 0);  // rank 0 opts out
        EXPECT_EQ(none.has_value(), r != 0);

        for (int iter = 0; iter < 20; ++iter) {
          std::vector<std::int64_t> a(300, r + iter), b(300, r * 10 + iter), c(300, r * 100 + iter), d(300, 1);
          Work wa = world.iall_reduce(a.data(), a.data(), a.size(), DataType::Int64, ReduceOp::SUM);
          Work wb = mine.iall_reduce(b.data(), b.data(), b.size(), DataType::Int64, ReduceOp::SUM);
          Work wc = sp->iall_reduce(c.data(), c.data(), c.size(), DataType::Int64, ReduceOp::MAX);
          Work wd = none ? none->iall_reduce(d.data(), d.data(), d.size(), DataType::Int64, ReduceOp::SUM) : Work();
          wd.wait();
          wc.wait();
          wb.wait();
          wa.wait();
          std::int64_t sa = 0, sb = 0;
          for (int i = 0; i < n; ++i) sa += i + iter;
          for (int i = r % 2; i < n; i += 2) sb += i * 10 + iter;
          std::int64_t mc = 100 * (std::min(n, (r / 3) * 3 + 3) - 1) + iter;
          for (int i = 0; i < 300; ++i) {
            ASSERT_EQ(a[i], sa);
            ASSERT_EQ(b[i], sb);
            ASSERT_EQ(c[i], mc);
            if (none) {
              ASSERT_EQ(d[i], n - 1);
            }
          }
        }
        // Different communicators driven from different threads at once.
        std::atomic<int> bad{0};
        std::thread t1([&] {
          for (int i = 0; i < 30; ++i) {
            std::int32_t v = r;
            mine.all_reduce(&v, &v, 1, DataType::Int32, ReduceOp::MAX);
            if (v != (r % 2 ? odds.back() : evens.back())) ++bad;
          }
        });
        for (int i = 0; i < 30; ++i) {
          std::int32_t v = 1;
          sp->all_reduce(&v, &v, 1, DataType::Int32, ReduceOp::SUM);
          if (v != members) ++bad;
        }
        t1.join();
        EXPECT_EQ(bad.load(), 0);
        // Collectives on sub-groups are full collectives too.
        if (ge) {
          CaseInfo c;
          c.id = 4242;
          c.dtype = DataType::Float32;
          c.count = 333;
          c.root = ge->size() - 1;
          c.op = ReduceOpKind::Sum;
          check_reduce_scatter(*ge, c);
          check_broadcast(*ge, c);
          check_gather(*ge, c);
        }
        world.barrier();
      },
      opts());
}

TEST_P(MultiRankPairs, MismatchedMessageSizeIsAnError) {
  spawn(
      world(),
      [](Communicator& world) {
        auto g = copy_of(world);
        if (world.rank() == 0) {
          float v[3] = {1, 2, 3};
          g->send(v, 3, DataType::Float32, 1, 5);
        } else if (world.rank() == 1) {
          float v[2];
          try {
            g->recv(v, 2, DataType::Float32, 0, 5);
            ADD_FAILURE() << "a 12-byte message was accepted into an 8-byte receive";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Mismatch) << what_of(e);
            EXPECT_NE(e.message().find("8 bytes"), std::string::npos) << what_of(e);
            EXPECT_NE(e.message().find("12 bytes"), std::string::npos) << what_of(e);
          }
        }
        // The world is unaffected.
        world.barrier();
      },
      opts());
}

TEST_P(MultiRankPairs, AbortWakesWaitersAndFailsLaterCalls) {
  spawn(
      world(),
      [](Communicator& world) {
        auto g = copy_of(world);
        if (world.rank() == 0) {
          // Nobody sends this; abort from another thread must wake the waiter.
          float v = 0;
          Work w = g->irecv(&v, 1, DataType::Float32, 1, 77);
          std::thread t([&] {
            std::this_thread::sleep_for(std::chrono::milliseconds(50));
            g->abort("test abort");
          });
          auto t0 = std::chrono::steady_clock::now();
          try {
            w.wait();
            ADD_FAILURE() << "wait returned after abort";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Aborted) << what_of(e);
            EXPECT_NE(e.message().find("test abort"), std::string::npos) << what_of(e);
          }
          t.join();
          EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
          try {
            g->barrier();
            ADD_FAILURE() << "barrier on an aborted communicator returned";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Aborted) << what_of(e);
            EXPECT_NE(e.message().find("test abort"), std::string::npos) << what_of(e);
          }
        }
        world.barrier();
      },
      opts());
}

TEST_P(MultiRankPairs, TimeoutNamesThePeer) {
  spawn(
      world(),
      [](Communicator& world) {
        auto g = copy_of(world);
        g->set_timeout(std::chrono::milliseconds(300));
        if (world.rank() == 1) {
          // Rank 0 never joins this broadcast.
          float v = 0;
          try {
            g->broadcast(&v, 1, DataType::Float32, 0);
            ADD_FAILURE() << "broadcast without the root returned";
          } catch (const Error& e) {
            EXPECT_EQ(e.kind(), ErrorKind::Timeout) << what_of(e);
            EXPECT_NE(e.message().find("rank 0"), std::string::npos) << what_of(e);
            EXPECT_NE(e.message().find("broadcast #"), std::string::npos) << what_of(e);
          }
        }
        world.barrier();
      },
      opts());
}

// Named groups (MPI_Comm_create_group): only the members call, the others
// go on with other work; the same list under another name is another group;
// a parent that was aborted still makes them; non-members get nothing.
TEST_P(MultiRank, NamedGroupsAreMadeByTheirMembersAlone) {
  spawn(
      world(),
      [](Communicator& world) {
        const int n = world.size(), r = world.rank();
        std::vector<int> low, high;
        for (int i = 0; i < n; ++i) (i < (n + 1) / 2 ? low : high).push_back(i);
        const std::vector<int>& mine = r < (n + 1) / 2 ? low : high;
        // Each half makes two groups of itself, in reverse rank order, while
        // the other half makes its own: no call on the other half's side.
        std::vector<int> rev(mine.rbegin(), mine.rend());
        auto a = world.new_group(rev, "half a");
        auto b = world.new_group(rev, "half b");
        ASSERT_TRUE(a.has_value() && b.has_value());
        EXPECT_EQ(a->size(), static_cast<int>(mine.size()));
        EXPECT_EQ(a->rank(), static_cast<int>(mine.size()) - 1 - (r - mine.front()));
        EXPECT_EQ(a->world_ranks(), rev);
        // Not a member: nothing, and nothing sent.
        const std::vector<int>& other = r < (n + 1) / 2 ? high : low;
        if (!other.empty()) {
          EXPECT_FALSE(world.new_group(other, "half a").has_value());
        }
        // The two groups of one list are two communicators: operations in
        // flight on both at once do not mix.
        std::vector<std::int64_t> x(500), y(500);
        for (int i = 0; i < 500; ++i) {
          x[i] = 1000003 * r + i;
          y[i] = 7919 * r - i;
        }
        Work wx = a->iall_reduce(x.data(), x.data(), x.size(), DataType::Int64, ReduceOp::SUM);
        Work wy = b->iall_reduce(y.data(), y.data(), y.size(), DataType::Int64, ReduceOp::MAX);
        wy.wait();
        wx.wait();
        for (int i = 0; i < 500; ++i) {
          std::int64_t sx = 0, my = 0;
          for (int m : mine) sx += 1000003 * m + i;
          my = 7919 * mine.back() - i;
          ASSERT_EQ(x[i], sx);
          ASSERT_EQ(y[i], my);
        }
        CaseInfo c;
        c.id = 4343;
        c.dtype = DataType::Float64;
        c.count = 1001;
        c.root = 0;
        c.op = ReduceOpKind::Sum;
        check_all_gather(*b, c);
        check_reduce_scatter(*a, c);
        // A parent that was aborted still makes a working group.
        auto parent = copy_of(world);
        parent->abort("aborted on purpose");
        auto after = parent->new_group(mine, "after the abort");
        ASSERT_TRUE(after.has_value());
        std::int32_t v = r + 1;
        after->all_reduce(&v, &v, 1, DataType::Int32, ReduceOp::SUM);
        std::int32_t want = 0;
        for (int m : mine) want += m + 1;
        EXPECT_EQ(v, want);
        // Bad lists are refused before anything is sent.
        std::vector<int> twice{r, r};
        Error e = expect_error([&] { world.new_group(twice, "bad"); });
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_CONTAINS(e.message(), "is listed twice");
        std::vector<int> outside{n};
        e = expect_error([&] { world.new_group(outside, "bad"); });
        EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
        EXPECT_CONTAINS(e.message(), "is not in this communicator");
        world.barrier();
      },
      opts());
}

INSTANTIATE_TEST_SUITE_P(World, MultiRank,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4, 5, 7, 8), ::testing::Values("auto", "tcp")),
                         world_and_transport);
INSTANTIATE_TEST_SUITE_P(Striped, MultiRank, ::testing::Combine(::testing::Values(2, 5), ::testing::Values("striped")),
                         world_and_transport);
INSTANTIATE_TEST_SUITE_P(World, MultiRankPairs,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5, 7, 8), ::testing::Values("auto", "tcp")),
                         world_and_transport);
INSTANTIATE_TEST_SUITE_P(Striped, MultiRankPairs,
                         ::testing::Combine(::testing::Values(2, 5), ::testing::Values("striped")),
                         world_and_transport);

}  // namespace
}  // namespace tutti::testing

namespace tutti::testing {
namespace {

TEST(LocalRanks, DerivedFromHostIdentity) {
  spawn(4, [](Communicator& world) {
    // All ranks of the harness run on this host.
    EXPECT_EQ(world.local_size(), 4);
    EXPECT_EQ(world.local_rank(), world.rank());
    auto odd = world.split(world.rank() % 2, 0);
    EXPECT_EQ(odd->local_size(), 2);
    EXPECT_EQ(odd->local_rank(), world.rank() / 2);
  });
}

}  // namespace
}  // namespace tutti::testing

namespace tutti::testing {
namespace {

// Same pointer as send and receive buffer, over shared memory and over TCP.
class InPlaceEdges : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(InPlaceEdges, ScatterAndAllToAllWithOneBuffer) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", std::get<1>(GetParam())}, {"TUTTI_CHUNK_BYTES", "256"}};
  spawn(
      std::get<0>(GetParam()),
      [](Communicator& comm) {
        const int n = comm.size(), r = comm.rank();
        for (std::size_t count : {1, 300, 5000}) {
          for (int root = 0; root < n; ++root) {
            // scatter(buf, buf): the root's buffer is both the source and the
            // receive buffer (block 0 of it).
            std::vector<std::int32_t> buf(count * n);
            for (std::size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<std::int32_t>(i * 7 + root * 1000003 + 1);
            std::vector<std::int32_t> want(buf.begin() + r * count, buf.begin() + (r + 1) * count);
            if (r != root) std::fill(buf.begin(), buf.end(), -1);
            comm.scatter(buf.data(), buf.data(), count, DataType::Int32, root);
            EXPECT_TRUE(std::equal(want.begin(), want.end(), buf.begin()))
                << "scatter root " << root << " count " << count;
          }
          // all_to_all(buf, buf).
          std::vector<std::int64_t> a(count * n);
          for (std::size_t i = 0; i < a.size(); ++i) a[i] = static_cast<std::int64_t>(r) * 1000000007 + i + 1;
          comm.all_to_all(a.data(), a.data(), count, DataType::Int64);
          for (int p = 0; p < n; ++p)
            for (std::size_t i = 0; i < count; ++i)
              ASSERT_EQ(a[p * count + i], static_cast<std::int64_t>(p) * 1000000007 + r * count + i + 1)
                  << "all_to_all in place, from rank " << p;
        }
      },
      o);
}

// Every rank ends with the same bits, even where the kernels are not
// commutative bit for bit: max(+0, -0) and NaN payloads.
TEST_P(InPlaceEdges, AllReduceResultsAreBitIdenticalOnEveryRank) {
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", std::get<1>(GetParam())}};
  spawn(
      std::get<0>(GetParam()),
      [](Communicator& comm) {
        const int n = comm.size(), r = comm.rank();
        std::vector<float> v = {r % 2 ? -0.0f : 0.0f, r % 2 ? 0.0f : -0.0f, 1.0f};
        for (ReduceOpKind op : {ReduceOpKind::Max, ReduceOpKind::Min}) {
          std::vector<float> x = v;
          comm.all_reduce(x.data(), x.data(), x.size(), DataType::Float32, op);
          std::vector<float> all(x.size() * n);
          comm.all_gather(x.data(), all.data(), x.size(), DataType::Float32);
          EXPECT_EQ(0, std::memcmp(all.data(), all.data() + x.size() * (n - 1), x.size() * sizeof(float)));
          for (int p = 0; p < n; ++p)
            EXPECT_EQ(0, std::memcmp(all.data() + p * x.size(), x.data(), x.size() * sizeof(float))) << "rank " << p;
        }
      },
      o);
}

INSTANTIATE_TEST_SUITE_P(World, InPlaceEdges,
                         ::testing::Combine(::testing::Values(2, 3, 4, 5), ::testing::Values("auto", "tcp")),
                         world_and_transport);

TEST(FailStop, AbortWakesASharedMemoryWait) {
  spawn(2, [](Communicator& world) {
    auto g = world.new_group(std::vector<int>{0, 1});
    if (world.rank() == 0) {
      std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        g->abort("watchdog");
      });
      auto t0 = std::chrono::steady_clock::now();
      float v = 1;
      try {
        g->all_reduce(&v, &v, 1, DataType::Float32, ReduceOp::SUM);  // rank 1 never joins
        ADD_FAILURE() << "all_reduce returned without its peer";
      } catch (const Error& e) {
        EXPECT_EQ(e.kind(), ErrorKind::Aborted) << e.what();
      }
      t.join();
      EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(2));
    }
    world.barrier();
  });
}

TEST(FailStop, PointToPointErrorAbortsTheCommunicator) {
  spawn(2, [](Communicator& world) {
    auto g = world.new_group(std::vector<int>{0, 1});
    if (world.rank() == 0) {
      float v[3] = {1, 2, 3};
      g->send(v, 3, DataType::Float32, 1);
    } else {
      float v[2];
      EXPECT_THROW(g->recv(v, 2, DataType::Float32, 0), Error);
      try {
        g->barrier();
        ADD_FAILURE() << "the communicator was still usable after a failed receive";
      } catch (const Error& e) {
        // Later calls fail at once with the cause's kind and message.
        EXPECT_EQ(e.kind(), ErrorKind::Mismatch) << e.what();
        EXPECT_NE(e.message().find("aborted earlier"), std::string::npos) << e.what();
        EXPECT_NE(e.message().find("12 bytes"), std::string::npos) << e.what();
      }
    }
    world.barrier();
  });
}

}  // namespace
}  // namespace tutti::testing
