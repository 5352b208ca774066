// The TCP transport facing a peer that sends garbage, truncated, oversized or
// malformed frames: only that peer's connection fails, with PeerLost naming
// it and what was wrong; other peers are served; nothing large is allocated
// on a header's word alone.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "common/log.h"
#include "net/socket.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/tcp_transport.h"

namespace {

namespace d = tutti::detail;
using namespace std::chrono_literals;

std::mt19937_64& rng() {
  static std::mt19937_64 g{std::random_device{}()};
  return g;
}

std::vector<char> random_payload(std::size_t n) {
  std::vector<char> v(n);
  for (auto& c : v) c = static_cast<char>(rng()() | 1);
  return v;
}

void send_all(int fd, const void* p, std::size_t n) {
  d::write_full(fd, p, n, d::Clock::now() + 5s, "transport under test");
}

d::FrameHeader header(std::uint64_t comm, std::uint64_t tag, std::uint64_t bytes) {
  d::FrameHeader h;
  h.comm_id = comm;
  h.tag = tag;
  h.bytes = bytes;
  return h;
}

long max_rss_kib() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

// Rank 0's transport of a world of 3; the test plays ranks 1 and 2 through
// socket pairs.
struct Fixture {
  d::Fd end[3];
  std::unique_ptr<d::TcpTransport> t;
  // The test's ends close first, so the transport's shutdown does not wait for them.
  ~Fixture() {
    for (auto& e : end) e.reset();
    t.reset();
  }
  Fixture() {
    std::vector<d::Fd> peers(3);
    for (int r = 1; r < 3; ++r) {
      int sv[2];
      EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
      peers[r] = d::Fd(sv[0]);
      end[r] = d::Fd(sv[1]);
    }
    t = std::make_unique<d::TcpTransport>(0, 3, std::move(peers), 0);
  }
};

struct BadStream {
  const char* name;
  std::function<void(int fd)> send;
  std::string error;  // what the failed receive from rank 1 says
};

TEST(TcpTransportInput, BadFramesFailOnlyThatPeerNamingIt) {
  const d::LogLevel old_level = d::log_level();
  d::set_log_level(d::LogLevel::Off);
  const std::uint64_t kComm = 7;
  auto raw = [](d::FrameHeader h) {
    return [h](int fd) { send_all(fd, &h, sizeof h); };
  };
  d::FrameHeader bad_magic = header(kComm, 1, 16);
  bad_magic.magic ^= 0x01010101u;
  d::FrameHeader bad_version = header(kComm, 1, 16);
  bad_version.version = 9;
  d::FrameHeader flags = header(kComm, 1, 16);
  flags.flags = 64;
  d::FrameHeader goodbye_payload = header(kComm, 1, 16);
  goodbye_payload.flags = d::kFrameGoodbye;
  d::FrameHeader big_notice = header(kComm, 1, d::kMaxNoticeBytes + 1);
  big_notice.flags = d::kFrameLostNotice;
  std::vector<BadStream> cases = {
      {"garbage",
       [](int fd) {
         auto junk = random_payload(200);
         junk[0] = 0;  // never the frame magic
         send_all(fd, junk.data(), junk.size());
       },
       "corrupt frame from rank 1: bad frame magic"},
      {"bad magic", raw(bad_magic), "corrupt frame from rank 1: bad frame magic"},
      {"unknown version", raw(bad_version), "corrupt frame from rank 1: unsupported frame version 9"},
      {"unknown flags", raw(flags), "corrupt frame from rank 1: unknown frame flags 64"},
      {"goodbye with a payload", raw(goodbye_payload), "corrupt frame from rank 1: goodbye frame with a payload"},
      {"oversized notice", raw(big_notice), "corrupt frame from rank 1: lost-peer notice of 1025 bytes"},
      {"oversized claim", raw(header(kComm, 1, d::kMaxFrameBytes + 1)),
       "corrupt frame from rank 1: frame claims " + std::to_string(d::kMaxFrameBytes + 1) + " bytes"},
      {"truncated header",
       [](int fd) {
         d::FrameHeader h = header(kComm, 1, 16);
         send_all(fd, &h, sizeof h / 2);
         ::shutdown(fd, SHUT_WR);
       },
       "rank 1 closed its connection in the middle of a message"},
      {"truncated payload",
       [](int fd) {
         d::FrameHeader h = header(kComm, 50, 1000);  // unexpected: nobody waits for tag 50
         send_all(fd, &h, sizeof h);
         auto part = random_payload(500);
         send_all(fd, part.data(), part.size());
         ::shutdown(fd, SHUT_WR);
       },
       "rank 1 closed its connection in the middle of a message"},
      // A valid header that claims 256 GiB for a message nobody waits for,
      // then a few bytes and the end: nothing like the claim is allocated.
      {"huge unexpected claim",
       [](int fd) {
         d::FrameHeader h = header(kComm, 99, std::uint64_t{1} << 38);
         send_all(fd, &h, sizeof h);
         auto part = random_payload(4096);
         send_all(fd, part.data(), part.size());
         ::shutdown(fd, SHUT_WR);
       },
       "rank 1 closed its connection in the middle of a message"},
  };
  const long rss_before = max_rss_kib();
  for (const BadStream& c : cases) {
    SCOPED_TRACE(c.name);
    Fixture f;
    std::vector<char> from1(16), from2(64);
    auto r1 = f.t->post_recv(1, kComm, 1, from1.data(), from1.size());
    auto r2 = f.t->post_recv(2, kComm, 1, from2.data(), from2.size());
    c.send(f.end[1].get());
    // Rank 2 sends a good message while rank 1 misbehaves.
    auto good = random_payload(from2.size());
    d::FrameHeader h = header(kComm, 1, good.size());
    send_all(f.end[2].get(), &h, sizeof h);
    send_all(f.end[2].get(), good.data(), good.size());
    ASSERT_TRUE(r1->wait_until(d::Clock::now() + 5s)) << "the bad stream went unnoticed";
    EXPECT_FALSE(r1->ok());
    EXPECT_EQ(r1->error_kind(), tutti::ErrorKind::PeerLost);
    EXPECT_EQ(r1->error_message().rfind(c.error, 0), 0u) << r1->error_message();
    EXPECT_EQ(f.t->peer_failure(1), r1->error_message());
    ASSERT_TRUE(r2->wait_until(d::Clock::now() + 5s));
    ASSERT_TRUE(r2->ok()) << r2->error_message();
    EXPECT_EQ(r2->source(), 2);
    EXPECT_EQ(from2, good);
    EXPECT_EQ(f.t->peer_failure(2), "");
    // Later receives from rank 1 fail at once with the same cause.
    auto later = f.t->post_recv(1, kComm, 2, from1.data(), from1.size());
    ASSERT_TRUE(later->done());
    EXPECT_EQ(later->error_message(), r1->error_message());
  }
  // Far below the 256 GiB claimed (64 MiB are allocated eagerly).
  EXPECT_LT(max_rss_kib() - rss_before, 200 * 1024);
  d::set_log_level(old_level);
}

// An unexpected message larger than the eager allocation arrives whole and
// intact (its buffer grows as its bytes arrive).
TEST(TcpTransportInput, LargeUnexpectedMessageArrivesIntact) {
  Fixture f;
  const std::size_t n = (64u << 20) + 12345;
  auto data = random_payload(n);
  std::thread sender([&] {
    d::FrameHeader h = header(3, 5, n);
    send_all(f.end[1].get(), &h, sizeof h);
    send_all(f.end[1].get(), data.data(), data.size());
  });
  std::this_thread::sleep_for(50ms);  // most of it arrives before the receive is posted
  std::vector<char> got(n);
  auto r = f.t->post_recv(1, 3, 5, got.data(), got.size());
  ASSERT_TRUE(r->wait_until(d::Clock::now() + 20s));
  sender.join();
  ASSERT_TRUE(r->ok()) << r->error_message();
  EXPECT_EQ(r->bytes(), n);
  EXPECT_TRUE(got == data);
}

}  // namespace
