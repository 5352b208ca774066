// Every point-to-point rule of the Transport interface (transport.h), run
// against every transport: TCP, and shared memory over TCP. Three ranks live
// in this process, each with its own transport (connected by socket pairs,
// and for shared memory a segment and a store of their own), so the rules
// are checked on the transports themselves, below any communicator.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "net/socket.h"
#include "transport/matching.h"
#include "transport/shm/shm_transport.h"
#include "transport/tcp/tcp_transport.h"
#include "tutti/store.h"

namespace {

namespace d = tutti::detail;
using tutti::ErrorKind;
using namespace std::chrono_literals;

constexpr int kRanks = 3;
constexpr std::uint64_t kComm = 0x5eed;

std::vector<char> random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 g(seed);
  std::vector<char> v(n);
  for (auto& c : v) c = static_cast<char>(g() | 1);  // never zero
  return v;
}

// A signed tag: operation `op`, step `step` (transport.h, kSignedTagOpShift).
std::uint64_t op_tag(std::uint64_t op, std::uint64_t step) { return (op << d::kSignedTagOpShift) | step; }

std::string describe(std::uint64_t sig, std::uint64_t against) {
  return "operation " + std::to_string(sig) +
         (against ? " where this rank called operation " + std::to_string(against) : "");
}

// A pid no process has: a child's, once it has exited and been reaped.
int dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  return static_cast<int>(child);
}

// The three ranks' transports. For shared memory each rank's segment is
// mapped by its own transport, as separate processes would; the rank
// `unreadable` is given a pid no process has, so that its neighbours
// cannot read its memory.
struct World {
  std::vector<std::shared_ptr<d::Transport>> t;
  // Every rank's raw end towards each peer (dup'ed): shutting them down is
  // what a killed process leaves its peers.
  std::vector<std::vector<int>> raw;

  explicit World(const std::string& kind, int unreadable = -1) : t(kRanks), raw(kRanks, std::vector<int>(kRanks, -1)) {
    std::vector<std::vector<d::Fd>> peers(kRanks);
    for (auto& p : peers) p.resize(kRanks);
    for (int i = 0; i < kRanks; ++i)
      for (int j = i + 1; j < kRanks; ++j) {
        int sv[2];
        EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
        raw[i][j] = ::dup(sv[0]);
        raw[j][i] = ::dup(sv[1]);
        peers[i][j] = d::Fd(sv[0]);
        peers[j][i] = d::Fd(sv[1]);
      }
    std::vector<std::shared_ptr<d::Transport>> net(kRanks);
    for (int r = 0; r < kRanks; ++r) net[r] = std::make_shared<d::TcpTransport>(r, kRanks, std::move(peers[r]), 0);
    if (kind == "tcp") {
      t = net;
    } else {
      auto store = tutti::make_memory_store();
      const std::string name = "/tutti-conformance-" + std::to_string(::getpid()) + "-" + std::to_string(serial()++);
      std::vector<int> pids(kRanks, ::getpid());
      if (unreadable >= 0) pids[static_cast<std::size_t>(unreadable)] = dead_pid();
      std::vector<std::thread> threads;
      for (int r = 0; r < kRanks; ++r)
        threads.emplace_back(
            [&, r] { t[r] = d::ShmTransport::create(net[r], *store, name, pids, d::Clock::now() + 10s); });
      for (auto& th : threads) th.join();
      for (int r = 0; r < kRanks && unreadable < 0; ++r)
        EXPECT_NE(dynamic_cast<d::ShmTransport*>(t[r].get()), nullptr) << "rank " << r << " fell back to TCP";
    }
    for (auto& x : t) x->set_signature_describer(&describe);
  }
  ~World() {
    for (auto& row : raw)
      for (int fd : row)
        if (fd >= 0) ::close(fd);
  }
  static int& serial() {
    static int n = 0;
    return n;
  }
  // A process killed: its connections end without a goodbye.
  void kill(int r) {
    for (int p = 0; p < kRanks; ++p)
      if (raw[r][p] >= 0) ::shutdown(raw[r][p], SHUT_RDWR);
  }
};

bool finishes(const d::RequestPtr& r, std::chrono::milliseconds within = 5s) {
  return r->wait_until(d::Clock::now() + within);
}

void expect_ok(const d::RequestPtr& r, int source, std::size_t bytes) {
  ASSERT_TRUE(finishes(r));
  ASSERT_TRUE(r->ok()) << r->error_message();
  EXPECT_EQ(r->source(), source);
  EXPECT_EQ(r->bytes(), bytes);
}

void expect_sent(const d::RequestPtr& r) {
  ASSERT_TRUE(r->wait_until(d::Clock::now() + 10s));
  ASSERT_TRUE(r->ok()) << r->error_message();
}

void expect_failed(const d::RequestPtr& r, ErrorKind kind, const std::string& words,
                   std::chrono::milliseconds within = 5s) {
  ASSERT_TRUE(finishes(r, within)) << "still pending; expected " << words;
  ASSERT_FALSE(r->ok());
  EXPECT_EQ(r->error_kind(), kind) << r->error_message();
  EXPECT_NE(r->error_message().find(words), std::string::npos) << r->error_message();
}

class P2pConformance : public ::testing::TestWithParam<const char*> {};

// Messages on one (peer, tag) arrive in the order sent; tags do not wait for
// each other; a receive posted before and one posted after the message
// arrived see the same rule.
TEST_P(P2pConformance, FifoPerPeerAndTag) {
  World w(GetParam());
  constexpr int kEach = 6;
  std::vector<std::vector<char>> a, b;
  std::vector<d::RequestPtr> sends;
  for (int i = 0; i < kEach; ++i) {
    a.push_back(random_bytes(64 + i, 100 + i));
    b.push_back(random_bytes(5000 + i, 200 + i));  // past the inline size of shared memory
  }
  // Half the receives of tag 8 are posted first.
  std::vector<std::vector<char>> got_b(kEach);
  std::vector<d::RequestPtr> recv_b;
  for (int i = 0; i < kEach / 2; ++i) {
    got_b[i].resize(b[i].size());
    recv_b.push_back(w.t[0]->post_recv(1, kComm, 8, got_b[i].data(), got_b[i].size()));
  }
  for (int i = 0; i < kEach; ++i) {
    sends.push_back(w.t[1]->post_send(0, kComm, 7, a[i].data(), a[i].size()));
    sends.push_back(w.t[1]->post_send(0, kComm, 8, b[i].data(), b[i].size()));
  }
  for (int i = kEach / 2; i < kEach; ++i) {
    got_b[i].resize(b[i].size());
    recv_b.push_back(w.t[0]->post_recv(1, kComm, 8, got_b[i].data(), got_b[i].size()));
  }
  for (int i = 0; i < kEach; ++i) {
    std::vector<char> got(a[i].size());
    auto r = w.t[0]->post_recv(1, kComm, 7, got.data(), got.size());
    expect_ok(r, 1, a[i].size());
    EXPECT_EQ(got, a[i]) << "message " << i << " of tag 7";
  }
  for (int i = 0; i < kEach; ++i) {
    expect_ok(recv_b[i], 1, b[i].size());
    EXPECT_EQ(got_b[i], b[i]) << "message " << i << " of tag 8";
  }
  for (auto& s : sends) expect_sent(s);
}

// A receive from any peer takes the earliest message to arrive and names its
// sender; one from a given peer never takes another's.
TEST_P(P2pConformance, AnySourceTakesTheEarliestAndNamesTheSender) {
  World w(GetParam());
  const auto m2 = random_bytes(256, 2), m1 = random_bytes(256, 1);
  auto s2 = w.t[2]->post_send(0, kComm, 3, m2.data(), m2.size());
  expect_sent(s2);  // a 256-byte send completes once handed over, on both transports
  std::this_thread::sleep_for(20ms);
  // Rank 2's message is in before rank 1 sends.
  std::vector<char> from1(256);
  auto r1 = w.t[0]->post_recv(1, kComm, 3, from1.data(), from1.size());
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(r1->done()) << "a receive from rank 1 took rank 2's message";
  auto s1 = w.t[1]->post_send(0, kComm, 3, m1.data(), m1.size());
  expect_ok(r1, 1, 256);
  EXPECT_EQ(from1, m1);
  std::vector<char> any(256);
  auto ra = w.t[0]->post_recv(d::kAnyPeer, kComm, 3, any.data(), any.size());
  expect_ok(ra, 2, 256);
  EXPECT_EQ(any, m2);
  // Posted first, any source: whoever sends.
  std::vector<char> any2(256);
  auto rb = w.t[0]->post_recv(d::kAnyPeer, kComm, 4, any2.data(), any2.size());
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(rb->done());
  auto s3 = w.t[1]->post_send(0, kComm, 4, m1.data(), m1.size());
  expect_ok(rb, 1, 256);
  EXPECT_EQ(any2, m1);
  expect_sent(s1);
  expect_sent(s2);
  expect_sent(s3);
}

// A message of another size than the receive's fails the receive with
// Mismatch naming both sizes, whether the receive or the message came
// first; the next message on the pair still arrives.
TEST_P(P2pConformance, SizeMismatchFailsTheReceiveAndTheStreamGoesOn) {
  World w(GetParam());
  const auto big = random_bytes(16, 3), next = random_bytes(100, 4);
  std::vector<char> small(8);
  auto r = w.t[0]->post_recv(1, kComm, 5, small.data(), small.size());
  auto s = w.t[1]->post_send(0, kComm, 5, big.data(), big.size());
  expect_failed(r, ErrorKind::Mismatch, "expected a message of 8 bytes from rank 1, but it sent 16 bytes");
  auto s2 = w.t[1]->post_send(0, kComm, 6, big.data(), big.size());
  std::this_thread::sleep_for(20ms);  // in before its receive
  auto r2 = w.t[0]->post_recv(1, kComm, 6, small.data(), small.size());
  expect_failed(r2, ErrorKind::Mismatch, "expected a message of 8 bytes from rank 1, but it sent 16 bytes");
  std::vector<char> got(next.size());
  auto s3 = w.t[1]->post_send(0, kComm, 7, next.data(), next.size());
  auto r3 = w.t[0]->post_recv(1, kComm, 7, got.data(), got.size());
  expect_ok(r3, 1, next.size());
  EXPECT_EQ(got, next);
  for (auto& x : {s, s2, s3}) expect_sent(x);
}

// Aborting a communicator fails its waiting receives at once with the
// reason given, leaves other communicators alone, and fails later posts.
TEST_P(P2pConformance, AbortWakesWaitersAndFailsLaterPosts) {
  World w(GetParam());
  std::vector<char> buf(64), other(64);
  auto r = w.t[0]->post_recv(1, kComm, 9, buf.data(), buf.size());
  auto r_any = w.t[0]->post_recv(d::kAnyPeer, kComm, 10, buf.data(), buf.size());
  auto keep = w.t[0]->post_recv(1, kComm + 1, 9, other.data(), other.size());
  std::thread aborter([&] {
    std::this_thread::sleep_for(50ms);
    w.t[0]->abort_comm(kComm, ErrorKind::Aborted, "stopped by the test");
  });
  const auto t0 = d::Clock::now();
  expect_failed(r, ErrorKind::Aborted, "stopped by the test");
  expect_failed(r_any, ErrorKind::Aborted, "stopped by the test");
  EXPECT_LT(d::Clock::now() - t0, 2s);
  aborter.join();
  auto later = w.t[0]->post_recv(1, kComm, 11, buf.data(), buf.size());
  expect_failed(later, ErrorKind::Aborted, "stopped by the test", 100ms);
  EXPECT_FALSE(keep->done());
  const auto m = random_bytes(64, 5);
  auto s = w.t[1]->post_send(0, kComm + 1, 9, m.data(), m.size());
  expect_ok(keep, 1, 64);
  EXPECT_EQ(other, m);
  expect_sent(s);
}

// A peer that dies fails the receives waiting on it (and later ones) with
// PeerLost within 2 s; receives from the others still complete.
TEST_P(P2pConformance, KilledPeerFailsItsReceivesOnly) {
  World w(GetParam());
  std::vector<char> buf(64), ok_buf(64);
  auto r = w.t[0]->post_recv(2, kComm, 12, buf.data(), buf.size());
  w.kill(2);
  const auto t0 = d::Clock::now();
  expect_failed(r, ErrorKind::PeerLost, "rank 2", 2s);
  EXPECT_LT(d::Clock::now() - t0, 2s);
  auto later = w.t[0]->post_recv(2, kComm, 13, buf.data(), buf.size());
  expect_failed(later, ErrorKind::PeerLost, "rank 2", 2s);
  EXPECT_NE(w.t[0]->peer_failure(2), "");
  EXPECT_EQ(w.t[0]->peer_failure(1), "");
  const auto m = random_bytes(64, 6);
  auto s = w.t[1]->post_send(0, kComm, 12, m.data(), m.size());
  auto r1 = w.t[0]->post_recv(1, kComm, 12, ok_buf.data(), ok_buf.size());
  expect_ok(r1, 1, 64);
  EXPECT_EQ(ok_buf, m);
  expect_sent(s);
}

// What each rank's liveness handlers were told (transport.h, "Liveness").
// Declared before the World, so that it outlives the transports' threads.
struct Heard {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::vector<std::pair<int, std::string>>> lost =
      std::vector<std::vector<std::pair<int, std::string>>>(kRanks);
  std::vector<std::vector<std::pair<std::uint64_t, std::string>>> failed =
      std::vector<std::vector<std::pair<std::uint64_t, std::string>>>(kRanks);
  std::vector<std::vector<ErrorKind>> kinds = std::vector<std::vector<ErrorKind>>(kRanks);

  void listen(World& w) {
    for (int r = 0; r < kRanks; ++r) {
      w.t[r]->set_peer_lost_handler([this, r](int peer, const std::string& why) {
        std::lock_guard<std::mutex> lock(mu);
        lost[r].emplace_back(peer, why);
        cv.notify_all();
      });
      w.t[r]->set_comm_failed_handler([this, r](std::uint64_t comm, ErrorKind kind, const std::string& why) {
        std::lock_guard<std::mutex> lock(mu);
        failed[r].emplace_back(comm, why);
        kinds[r].push_back(kind);
        cv.notify_all();
      });
    }
  }
  // Waits until `done` holds (under the lock), up to 5 s.
  template <class F>
  bool until(F done) {
    std::unique_lock<std::mutex> lock(mu);
    return cv.wait_for(lock, 5s, done);
  }
  std::size_t losses_of(int r, int peer) {
    std::lock_guard<std::mutex> lock(mu);
    return static_cast<std::size_t>(
        std::count_if(lost[r].begin(), lost[r].end(), [&](const auto& l) { return l.first == peer; }));
  }
};

// A rank declared lost is reported once to every rank's handler: the
// declaring one with its words, the others by its notice, the rank itself
// told that it was cut off; its receives then fail with PeerLost.
TEST_P(P2pConformance, DeclaredLossReachesEveryRankOnce) {
  Heard heard;
  World w(GetParam());
  heard.listen(w);
  std::vector<char> buf(64);
  auto r = w.t[0]->post_recv(2, kComm, 16, buf.data(), buf.size());
  w.t[0]->declare_lost(2, "stopped answering (declared by the test)");
  ASSERT_TRUE(heard.until([&] { return !heard.lost[0].empty() && !heard.lost[1].empty() && !heard.lost[2].empty(); }))
      << "a handler heard nothing";
  std::this_thread::sleep_for(200ms);  // a second report would come by now
  for (int q = 0; q < kRanks; ++q) {
    std::lock_guard<std::mutex> lock(heard.mu);
    ASSERT_EQ(heard.lost[q].size(), 1u) << "rank " << q;
    EXPECT_EQ(heard.lost[q][0].first, 2) << "rank " << q;
  }
  EXPECT_NE(heard.lost[0][0].second.find("stopped answering (declared by the test)"), std::string::npos)
      << heard.lost[0][0].second;
  EXPECT_NE(heard.lost[1][0].second.find("rank 0 reports: stopped answering"), std::string::npos)
      << heard.lost[1][0].second;
  EXPECT_NE(heard.lost[2][0].second.find("rank 0 reports"), std::string::npos) << heard.lost[2][0].second;
  expect_failed(r, ErrorKind::PeerLost, "stopped answering", 2s);
  EXPECT_NE(w.t[0]->peer_failure(2), "");
  EXPECT_EQ(w.t[0]->peer_failure(1), "");
  // The losses reported before a handler is set are replayed to it.
  std::vector<int> replayed;
  w.t[1]->set_peer_lost_handler([&](int peer, const std::string&) { replayed.push_back(peer); });
  EXPECT_EQ(replayed, std::vector<int>{2});
}

// A killed rank is reported once to each survivor's handler, though each
// learns of it twice: on its own connection and by the other's notice.
TEST_P(P2pConformance, KilledPeerIsReportedOnce) {
  Heard heard;
  World w(GetParam());
  heard.listen(w);
  w.kill(2);
  ASSERT_TRUE(heard.until([&] { return !heard.lost[0].empty() && !heard.lost[1].empty(); }));
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(heard.losses_of(0, 2), 1u);
  EXPECT_EQ(heard.losses_of(1, 2), 1u);
  EXPECT_EQ(heard.losses_of(0, 1), 0u);
  EXPECT_EQ(heard.losses_of(1, 0), 0u);
}

// A failed communicator is told to the members listed, with its kind and
// words, and to no one else; this rank's own handler is not called.
TEST_P(P2pConformance, FailedCommunicatorReachesItsMembers) {
  Heard heard;
  World w(GetParam());
  heard.listen(w);
  w.t[0]->notify_comm_failed(kComm, {0, 1, 2}, ErrorKind::Revoked, "revoked by the test", true);
  ASSERT_TRUE(heard.until([&] { return !heard.failed[1].empty() && !heard.failed[2].empty(); }));
  w.t[1]->notify_comm_failed(kComm + 1, {1, 2}, ErrorKind::Timeout, "timed out in the test", true);
  ASSERT_TRUE(heard.until([&] { return heard.failed[2].size() >= 2; }));
  std::this_thread::sleep_for(200ms);
  std::lock_guard<std::mutex> lock(heard.mu);
  EXPECT_TRUE(heard.failed[0].empty());
  ASSERT_EQ(heard.failed[1].size(), 1u);
  EXPECT_EQ(heard.failed[1][0].first, kComm);
  EXPECT_EQ(heard.kinds[1][0], ErrorKind::Revoked);
  EXPECT_NE(heard.failed[1][0].second.find("rank 0 failed: revoked by the test"), std::string::npos)
      << heard.failed[1][0].second;
  ASSERT_EQ(heard.failed[2].size(), 2u);
  EXPECT_EQ(heard.failed[2][0].first, kComm);
  EXPECT_EQ(heard.failed[2][1].first, kComm + 1);
  EXPECT_EQ(heard.kinds[2][1], ErrorKind::Timeout);
  EXPECT_NE(heard.failed[2][1].second.find("rank 1 failed: timed out in the test"), std::string::npos)
      << heard.failed[2][1].second;
  for (int q = 0; q < kRanks; ++q) EXPECT_TRUE(heard.lost[q].empty()) << "rank " << q;
}

// Empty messages match and complete; a large one (past every eager and
// striping size) arrives whole, posted before or after it came.
TEST_P(P2pConformance, EmptyAndHugeMessages) {
  World w(GetParam());
  auto se = w.t[1]->post_send(0, kComm, 14, nullptr, 0);
  auto re = w.t[0]->post_recv(1, kComm, 14, nullptr, 0);
  expect_ok(re, 1, 0);
  expect_sent(se);
  const std::size_t n = std::size_t(48) << 20;
  const auto big = random_bytes(n, 7);
  std::vector<char> got(n);
  auto r = w.t[0]->post_recv(2, kComm, 15, got.data(), got.size());
  auto s = w.t[2]->post_send(0, kComm, 15, big.data(), big.size());
  expect_ok(r, 2, n);
  EXPECT_TRUE(got == big) << "the first differing byte is at "
                          << std::mismatch(got.begin(), got.end(), big.begin()).first - got.begin();
  expect_sent(s);
  // Arrived before its receive (shared memory keeps it in the sender's memory).
  std::vector<char> got2(n);
  auto s2 = w.t[2]->post_send(0, kComm, 16, big.data(), big.size());
  std::this_thread::sleep_for(50ms);
  auto r2 = w.t[0]->post_recv(2, kComm, 16, got2.data(), got2.size());
  expect_ok(r2, 2, n);
  EXPECT_TRUE(got2 == big);
  expect_sent(s2);
}

// Signed messages: a receive of the same operation with another signature
// fails with Mismatch even under another tag (another algorithm), and so
// does a receive of a later operation when a message of an earlier one is
// still waiting (this rank completed that operation without it).
TEST_P(P2pConformance, SignaturesOfOtherAndStaleOperationsFail) {
  World w(GetParam());
  const auto m = random_bytes(32, 8);
  std::vector<char> buf(32);
  // Same operation 5, different signatures and steps.
  auto s = w.t[1]->post_send(0, kComm, op_tag(5, 1), m.data(), m.size(), 111);
  std::this_thread::sleep_for(20ms);
  auto r = w.t[0]->post_recv(1, kComm, op_tag(5, 2), buf.data(), buf.size(), 222);
  expect_failed(r, ErrorKind::Mismatch, "rank 1 sent a message of operation 111 where this rank called operation 222");
  // Posted first: the message fails it on arrival. (Another communicator:
  // on this one, rank 1's message of operation 5 still waits, and is stale
  // to any later operation.)
  auto r2 = w.t[0]->post_recv(2, kComm + 2, op_tag(6, 2), buf.data(), buf.size(), 333);
  auto s2 = w.t[2]->post_send(0, kComm + 2, op_tag(6, 1), m.data(), m.size(), 444);
  expect_failed(r2, ErrorKind::Mismatch, "rank 2 sent a message of operation 444 where this rank called operation 333");
  // Stale: rank 1's message of operation 7 is never received; this rank
  // goes on to operation 8.
  World w2(GetParam());
  auto s3 = w2.t[1]->post_send(0, kComm, op_tag(7, 0), m.data(), m.size(), 555);
  std::this_thread::sleep_for(20ms);
  auto r3 = w2.t[0]->post_recv(1, kComm, op_tag(8, 0), buf.data(), buf.size(), 666);
  expect_failed(r3, ErrorKind::Mismatch, "rank 1 sent a message of operation 555 for an operation this rank completed");
  // Unsigned messages (point-to-point) are never checked this way.
  auto s4 = w2.t[2]->post_send(0, kComm + 1, op_tag(1, 0), m.data(), m.size());
  auto r4 = w2.t[0]->post_recv(2, kComm + 1, op_tag(1, 0), buf.data(), buf.size(), 777);
  expect_ok(r4, 2, 32);
  EXPECT_EQ(buf, m);
  for (auto& x : {s, s2, s4}) expect_sent(x);
  (void)s3;
}

INSTANTIATE_TEST_SUITE_P(Transports, P2pConformance, ::testing::Values("tcp", "shm"),
                         [](const ::testing::TestParamInfo<const char*>& p) { return std::string(p.param); });

// The matcher alone: any source takes the earliest arrival among each
// peer's first candidate, and a claimed message is skipped.
struct Posted {
  int peer;
  std::uint64_t comm, tag, sig;
  d::RequestPtr req;
};
struct Waiting {
  std::uint64_t comm, tag, sig, arrival;
  int id;
  bool has_claim = false;
};

// ShmTransport::create's vote: when one rank's neighbours cannot read its
// memory, every rank keeps point-to-point on the network transport (the
// one that could read both of its neighbours too).
TEST(ShmTransportCreate, OneRankUnreadableKeepsEveryRankOnTheNetwork) {
  World w("shm", 1);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(dynamic_cast<d::ShmTransport*>(w.t[r].get()), nullptr) << "rank " << r;
    EXPECT_NE(dynamic_cast<d::TcpTransport*>(w.t[r].get()), nullptr) << "rank " << r;
  }
}

TEST(Matcher, AnySourceFifoAndClaims) {
  d::Matcher<Posted, Waiting> m(3);
  m.add_unexpected(2, {1, 9, 0, 0, 20});
  m.add_unexpected(1, {1, 9, 0, 0, 10});
  m.add_unexpected(1, {1, 9, 0, 0, 11});
  int from = -1;
  d::Matcher<Posted, Waiting>::UnexpectedList::iterator it;
  ASSERT_TRUE(m.find_unexpected(d::kAnyPeer, 1, 9, &from, &it));
  EXPECT_EQ(from, 2);
  EXPECT_EQ(it->id, 20);
  it->has_claim = true;
  ASSERT_TRUE(m.find_unexpected(d::kAnyPeer, 1, 9, &from, &it));
  EXPECT_EQ(it->id, 10);
  m.erase_unexpected(from, it);
  ASSERT_TRUE(m.find_unexpected(1, 1, 9, &from, &it));
  EXPECT_EQ(it->id, 11);
  EXPECT_FALSE(m.find_unexpected(0, 1, 9, &from, &it));
  EXPECT_FALSE(m.find_unexpected(1, 1, 8, &from, &it));
  m.post({d::kAnyPeer, 1, 4, 0, std::make_shared<d::Completion>()});
  m.post({2, 1, 4, 0, std::make_shared<d::Completion>()});
  Posted p{};
  ASSERT_TRUE(m.take_posted(2, 1, 4, &p));
  EXPECT_EQ(p.peer, d::kAnyPeer);  // post order
  ASSERT_TRUE(m.take_posted(2, 1, 4, &p));
  EXPECT_EQ(p.peer, 2);
  EXPECT_FALSE(m.take_posted(2, 1, 4, &p));
}

// A receive of operation 5 is checked against what waits: a peer that ran
// thousands of operations ahead (a stream of gathers) hides neither another
// peer's message of operation 5 from a different operation nor a message of
// an operation this rank has finished.
TEST(Matcher, PostChecksEveryPeerWhenOnePeerRanAhead) {
  const std::uint64_t comm = 7, sig = 0x51, other_sig = 0x52;
  auto tag = [](std::uint64_t op, std::uint32_t step) { return d::collective_tag(op, step); };
  d::Matcher<Posted, Waiting> m(3);
  for (std::uint64_t op = 5; op < 5005; ++op) m.add_unexpected(1, {comm, tag(op, 0), sig, 0, 0});
  m.add_unexpected(2, {comm + 1, tag(3, 0), other_sig, 0, 0});  // another communicator
  EXPECT_EQ(m.check_post(comm, tag(5, 0), sig), "");
  EXPECT_EQ(m.check_post(comm, tag(5, 1), sig), "");  // a later step of the same operation
  m.add_unexpected(2, {comm, tag(5, 0), other_sig, 0, 0});
  EXPECT_EQ(m.check_post(comm, tag(5, 0), sig),
            "rank 2 sent a message of " + std::to_string(other_sig) + " where this rank called " + std::to_string(sig));
  d::Matcher<Posted, Waiting> stale(3);
  for (std::uint64_t op = 5; op < 5005; ++op) stale.add_unexpected(1, {comm, tag(op, 0), sig, 0, 0});
  stale.add_unexpected(0, {comm, tag(4, 0), other_sig, 0, 0});
  EXPECT_EQ(stale.check_post(comm, tag(5, 0), sig), "rank 0 sent a message of " + std::to_string(other_sig) +
                                                        " for an operation this rank completed without it");
}

}  // namespace
