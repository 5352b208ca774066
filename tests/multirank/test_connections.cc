// Connections on first use: a rank holds connections to the peers its
// operations needed (its two ring neighbours from init on), from either
// side at once without deadlock; a loss reaches ranks that never connected
// to the lost one. Peer connections are told apart from the store's by
// their TCP congestion control (TUTTI_TCP_CONGESTION), which only they get.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "common/errors.h"
#include "harness/spawn.h"
#include "net/socket.h"

namespace tutti::testing {
namespace {

// The congestion control peer connections get here: one that is not the
// kernel's default (reno is always built in, and allowed to every process).
std::string peer_congestion() {
  detail::Fd probe(::socket(AF_INET, SOCK_STREAM, 0));
  return detail::congestion_of(probe.get()) == "reno" ? "cubic" : "reno";
}

// This process's connected TCP sockets with that congestion control.
int peer_connections(const std::string& cc) {
  int n = 0;
  for (int fd = 0; fd < 4096; ++fd) {
    sockaddr_storage peer{};
    socklen_t len = sizeof peer;
    if (::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &len) != 0) continue;
    if (detail::congestion_of(fd) == cc) ++n;
  }
  return n;
}

// Small integers in eighths, different per rank and element: every sum of
// them is exact in any order.
float small_eighths(std::size_t j, int r) {
  return static_cast<float>((j * 31 + static_cast<std::size_t>(r) * 17) % 97) / 8;
}

int ceil_log2(int n) {
  int k = 0;
  while ((1 << k) < n) ++k;
  return k;
}

// Each operation adds only the connections it needs: the ring neighbours
// after init and a ring all_reduce; O(log p) after a barrier and small
// all_reduce (dissemination, recursive doubling); every peer after a
// pairwise all_to_all. Every result is checked.
TEST(Connections, GrowWithThePeersUsed) {
  const std::string cc = peer_congestion();
  constexpr int kRanks = 16;
  SpawnOptions o;
  // (Pairwise all_to_all exchanges with every peer; Bruck's, which the table
  // picks for small blocks, with log2(p).)
  o.env = {
      {"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_TCP_CONGESTION", cc}, {"TUTTI_ALGO", "all_reduce:ring,all_to_all:pairwise"}};
  spawn(
      kRanks,
      [&](Communicator& comm) {
        const int n = comm.size();
        EXPECT_EQ(peer_connections(cc), 2) << "after init";
        std::vector<float> a(50000), b(a.size());
        for (std::size_t j = 0; j < a.size(); ++j) a[j] = small_eighths(j, comm.rank());
        // A ring all_reduce, checked; the next one holds every rank back
        // until all have counted (the ring's connections only).
        auto ring_all_reduce = [&] {
          comm.all_reduce(a.data(), b.data(), a.size(), DataType::Float32, ReduceOp::SUM);
          for (std::size_t j = 0; j < b.size(); ++j) {
            float want = 0;
            for (int r = 0; r < n; ++r) want += small_eighths(j, r);
            ASSERT_EQ(b[j], want) << j;
          }
        };
        ring_all_reduce();
        EXPECT_EQ(peer_connections(cc), 2) << "after a ring all_reduce";
        ring_all_reduce();
        comm.barrier();
        const int after_barrier = peer_connections(cc);
        EXPECT_LE(after_barrier, 2 + 2 * ceil_log2(n)) << "after a barrier";
        EXPECT_GT(after_barrier, 2) << "after a barrier";
        ring_all_reduce();
        std::vector<std::int64_t> s(static_cast<std::size_t>(n)), t(s.size());
        for (int p = 0; p < n; ++p) s[static_cast<std::size_t>(p)] = 1000 * comm.rank() + p;
        comm.all_to_all(s.data(), t.data(), 1, DataType::Int64);
        for (int p = 0; p < n; ++p) EXPECT_EQ(t[static_cast<std::size_t>(p)], 1000 * p + comm.rank());
        EXPECT_EQ(peer_connections(cc), n - 1) << "after an all_to_all";
        ring_all_reduce();  // nobody leaves (closing connections) before all have counted
      },
      o);
}

// Every pair connects from both sides at the same moment (each rank sends
// to and receives from every other at once), many times over fresh jobs:
// one connection per pair is kept, no exchange hangs, every message arrives.
TEST(Connections, BothSidesConnectingAtOnce) {
  const std::string cc = peer_congestion();
  for (const char* per_peer : {"1", "3"}) {
    SpawnOptions o;
    o.env = {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_TCP_CONGESTION", cc}, {"TUTTI_SOCKETS_PER_PEER", per_peer}};
    o.timeout = std::chrono::seconds(60);
    spawn(
        6,
        [&](Communicator& comm) {
          const int n = comm.size(), r = comm.rank();
          constexpr std::size_t kCount = 300000;  // striped where there are data connections
          std::vector<std::vector<std::int32_t>> in(static_cast<std::size_t>(n)), out(in.size());
          std::vector<Work> works;
          for (int p = 0; p < n; ++p) {
            if (p == r) continue;
            auto& o_ = out[static_cast<std::size_t>(p)];
            o_.resize(kCount);
            for (std::size_t i = 0; i < kCount; ++i) o_[i] = static_cast<std::int32_t>(r * 1000003 + p * 7919 + i);
            in[static_cast<std::size_t>(p)].assign(kCount, -1);
            works.push_back(comm.irecv(in[static_cast<std::size_t>(p)].data(), kCount, DataType::Int32, p, 5));
            works.push_back(comm.isend(o_.data(), kCount, DataType::Int32, p, 5));
          }
          for (Work& w : works) w.wait();
          for (int p = 0; p < n; ++p) {
            if (p == r) continue;
            const auto& got = in[static_cast<std::size_t>(p)];
            std::size_t bad = 0;
            for (std::size_t i = 0; i < kCount; ++i)
              bad += got[i] != static_cast<std::int32_t>(p * 1000003 + r * 7919 + i);
            EXPECT_EQ(bad, 0u) << "from rank " << p;
          }
          if (std::string(per_peer) == "1") {
            EXPECT_EQ(peer_connections(cc), n - 1);  // one per pair, whoever started first
          } else {
            // The opener adds the data connections once the first is made
            // (messages go unstriped meanwhile): some may still be on the way.
            const int links = peer_connections(cc);
            EXPECT_GE(links, n - 1);
            EXPECT_LE(links, 4 * (n - 1));
          }
          comm.barrier();  // nobody leaves (closing connections) before all have counted
        },
        o);
  }
}

// A rank killed while the others run ring all_reduces, where each rank is
// connected to its two neighbours only: every survivor, those far from the
// victim too, fails with PeerLost naming it within 2 s of the kill.
TEST(Connections, ALossReachesRanksNeverConnectedToIt) {
  auto* killed_at = static_cast<std::atomic<std::int64_t>*>(
      ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(killed_at, MAP_FAILED);
  const std::string cc = peer_congestion();
  constexpr int kRanks = 8, kVictim = 5;
  auto now_ns = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  killed_at->store(0);
  SpawnOptions o;
  o.env = {{"TUTTI_TRANSPORT", "tcp"}, {"TUTTI_TCP_CONGESTION", cc}, {"TUTTI_ALGO", "all_reduce:ring"}};
  o.may_die = {kVictim};
  o.op_timeout = std::chrono::seconds(30);
  spawn(
      kRanks,
      [&](Communicator& comm) {
        std::vector<float> a(64 * 1024), b(a.size()), want(a.size(), 0.f);
        for (std::size_t j = 0; j < a.size(); ++j) {
          a[j] = small_eighths(j, comm.rank());
          for (int r = 0; r < kRanks; ++r) want[j] += small_eighths(j, r);
        }
        comm.all_reduce(a.data(), b.data(), a.size(), DataType::Float32, ReduceOp::SUM);
        ASSERT_EQ(peer_connections(cc), 2);
        for (int i = 0; i < 200; ++i) {
          if (comm.rank() == kVictim && i == 3) {
            killed_at->store(now_ns());
            ::raise(SIGKILL);
          }
          try {
            comm.all_reduce(a.data(), b.data(), a.size(), DataType::Float32, ReduceOp::SUM);
            for (std::size_t j = 0; j < b.size(); ++j) ASSERT_EQ(b[j], want[j]) << j;
          } catch (const Error& e) {
            const std::int64_t t = now_ns(), k = killed_at->load();
            ASSERT_NE(k, 0) << what_of(e);
            EXPECT_EQ(e.kind(), ErrorKind::PeerLost) << what_of(e);
            EXPECT_NE(e.message().find("rank " + std::to_string(kVictim)), std::string::npos) << what_of(e);
            EXPECT_LT(t - k, 2'000'000'000) << "noticed " << (t - k) / 1000000 << " ms after the kill";
            return;
          }
        }
        ADD_FAILURE() << "no error after the kill";
      },
      o);
  ::munmap(killed_at, 4096);
}

}  // namespace
}  // namespace tutti::testing
